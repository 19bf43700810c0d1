"""Container nodes: real kubelets with containerd, runc and gVisor, beside the kwok fleet.

- `layout.py`   where one node keeps its files (pure)
- `configs.py`  the text of containerd's, the kubelet's, CNI's and runsc's configuration
                (pure: a node's layout and ports in, file contents out)
- `hostnet.py`  the host bridge the pods live on, and nothing routed off the machine
- `cgroups.py`  the cgroup each node's runtime and pods run in: how `down` finds every
                process a node started, by pid
- `sweeping.py` what `down` must leave behind: nothing (processes, mounts, network
                namespaces, shim sockets, the bridge)
- `starting.py` the shell that writes a node's files and starts its containerd and kubelet
"""

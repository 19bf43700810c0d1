"""Container nodes: real kubelets with containerd, runc and gVisor, beside the kwok fleet.

- `layout.py`      where one node keeps its files, its sockets and its cgroup (pure)
- `configs.py`     the text of containerd's, the kubelet's, CNI's and runsc's configuration
                   (pure: a node's layout and settings in, file contents out)
- `addons.py`      kube-proxy's configuration, CoreDNS's Corefile and the kube-dns objects
                   (pure)
- `disk_room.py`   whether the disk under the state has room for the nodes' images (pure)
- `hostnet.py`     the host bridge the pods live on, forwarding on it only, and the
                   GRIDLOOP-ISOLATE and GRIDLOOP-HOST chains
- `cgroups.py`     the cgroup each node's runtime and pods run in: how `down` finds every
                   process a node started, by pid
- `kube_chains.py` the KUBE- iptables chains the kubelets and kube-proxy add, and taking
                   them out again
- `stale_leases.py` the leader Leases the pods of a stopped cluster left held, released
                   before its nodes start again (a restart's controllers lead at once)
- `sweeping.py`    what `down` must leave behind: nothing (processes, mounts, network
                   namespaces, shim sockets, log links, the bridge, iptables chains)
- `starting.py`    the shell that checks the machine, writes a node's files and starts its
                   containerd and kubelet
"""

"""`gridloop local`: a Kubernetes cluster on this machine, built from source, with a
simulated GPU fleet and, optionally, real container nodes.

Its wings:
- `build/`: what the cluster runs, built from pinned upstream source into the build
  cache: the Go recipes (`recipes`, `building`, `gomod`), build-time edits of upstream
  source (`overlays`, `netpol_overlays`), and the container images (`images/`);
- `kwok/`: the simulated GPU fleet: kwok's Stages and the fleet's nodes;
- `container/`: real nodes (containerd, kubelet, runc, gVisor) on network namespaces
  of this machine, their networking, DNS and Prometheus objects, and stopping one;
- `addons/`: what `up` puts into the cluster beside the control plane: Kueue's and
  agent-sandbox's objects, the object store, Services that lead to host processes, and
  the wait for webhooks that fail closed.

Beside them, the control plane's shell: `ports` (where everything listens), `flags`
(each process's command line), `prometheus_config`, `certs`, `launching` (the process
table), `processes` (start, find, stop by pid), `state` (state.json), `node_taints`,
`cluster` (up and down), and the command line (`commands`, `cluster_commands`).
"""

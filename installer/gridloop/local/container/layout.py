"""Where one container node keeps its files, all under the cluster's state directory (pure).

Everything a node writes lives under `<state>/nodes/<name>/`, so `down` can find every
mount and file by prefix. Two things cannot: unix sockets (a path must fit in 108 bytes,
and a state directory under a test's tmp path does not leave room), kept under
`/run/gridloop/<hash of the state directory>/`; and the shim sockets containerd puts
under its compiled-in `/run/containerd/s/`, found through the `address` files in the
node's containerd state.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

SOCKETS_ROOT = Path("/run/gridloop")
BRIDGE = "gridloop0"  # one host bridge for every container node's pods
# the cloud metadata server's address: on the bridge, where nothing listens (hostnet.py)
METADATA_IP = "169.254.169.254"
# an address that stands in for a host on the internet (TEST-NET-2, never routed anywhere):
# on the bridge too, pods reach it through their node, and nothing listens unless a test
# starts a server there; it is outside every range a sandbox's egress policy denies
OUTSIDE_IP = "198.51.100.1"
# the cgroup (below each v1 hierarchy's root) every container node's processes run under:
# /gridloop/<cluster>/<node>, so two local clusters (two state directories) never share one
CGROUP_PARENT = "gridloop"


def cluster_id(state_dir: Path) -> str:
    """A short name for one local cluster, from its state directory."""
    return hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]


def sockets_dir(state_dir: Path) -> Path:
    return SOCKETS_ROOT / cluster_id(state_dir)


def cluster_cgroup(state_dir: Path) -> str:
    return f"/{CGROUP_PARENT}/{cluster_id(state_dir)}"


@dataclass(frozen=True)
class NodeLayout:
    name: str
    root: Path  # <state>/nodes/<name>
    sockets: Path  # /run/gridloop/<cluster>
    cluster_cgroup: str  # /gridloop/<cluster>

    @classmethod
    def of(cls, state_dir: Path, name: str) -> NodeLayout:
        return cls(
            name=name,
            root=state_dir / "nodes" / name,
            sockets=sockets_dir(state_dir),
            cluster_cgroup=cluster_cgroup(state_dir),
        )

    # containerd
    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd.toml"

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.root / "containerd" / "state"

    @property
    def containerd_socket(self) -> Path:
        return self.sockets / f"{self.name}.sock"

    @property
    def registry_hosts(self) -> Path:
        """containerd's `config_path`: one `<registry>/hosts.toml` per mirrored registry."""
        return self.root / "certs.d"

    # CNI
    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_data_dir(self) -> Path:
        return self.root / "cni" / "ipam"

    # gVisor
    @property
    def runsc_config(self) -> Path:
        return self.root / "runsc.toml"

    @property
    def runsc_root(self) -> Path:
        return self.root / "runsc" / "root"

    @property
    def runsc_logs(self) -> Path:
        return self.root / "runsc" / "logs"

    # kubelet
    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet.yaml"

    @property
    def kubelet_kubeconfig(self) -> Path:
        return self.root / "kubelet.kubeconfig"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pods"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def cgroup(self) -> str:
        """The kubelet's cgroupRoot: every pod of the node runs below it."""
        return f"{self.cluster_cgroup}/{self.name}"

    @property
    def runtime_cgroup(self) -> str:
        """containerd's cgroup: its shims inherit it, so `down` finds them too."""
        return f"{self.cgroup}/runtime"

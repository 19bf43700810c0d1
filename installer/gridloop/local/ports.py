"""Where the local cluster listens: loopback, the port block each process gets from one
base port, and the address ranges of services and simulated pods (pure; the ground of
`gridloop.local`: the other modules and `gridloop status` read it)."""

from __future__ import annotations

import ipaddress
from dataclasses import asdict, dataclass

from gridloop.fleet import schema

LOOPBACK = "127.0.0.1"
# the ranges the fleet schema keeps container pods out of (fleet/schema.py holds them)
SERVICE_CIDR = schema.SERVICE_RANGE
# kwok hands out fake pod IPs from here; nothing connects to them
_PODS = ipaddress.ip_network(schema.SIMULATED_POD_RANGE)
POD_CIDR = f"{_PODS.network_address + 1}/{_PODS.prefixlen}"  # kwok's --cidr: its gateway

_OFFSETS = {
    "etcd": 0,
    "etcd_peer": 1,
    "kwok": 2,
    "controller_manager": 3,
    "scheduler": 4,
    "dcgm_sim": 5,
    "prometheus": 6,
    "health": 7,
    "kueue": 8,  # Kueue's health probes (/healthz, /readyz)
    "kueue_webhook": 9,
    "kueue_metrics": 10,
    "kueue_visibility": 11,
    "agent_sandbox": 12,  # agent-sandbox's controller's health probes (/healthz, /readyz)
    "registry": 13,  # the local image registry (container nodes pull from it)
    # each container node's kubelet's /healthz (its API listens on the node's own address)
    "kubelet_0": 14,
    "kubelet_1": 15,
    "kubelet_2": 16,
    "kube_proxy": 17,  # its /healthz
    "kube_proxy_metrics": 18,
    # 19, 20: the host's CoreDNS, before it was a pod (container/addons.py)
    "netpol_metrics": 21,  # kube-network-policies' /metrics
    "object_store": 22,  # the object store's S3 API (object_store.py)
    "apiserver": 43,
}
# Below the kernel's ephemeral port range (32768-60999 by default): a port in it can be
# held by any process's outgoing connection (Prometheus' scrapes, the API server's watch
# of etcd), and then no server can bind it, SO_REUSEADDR or not.
DEFAULT_BASE_PORT = 26400
MAX_CONTAINER_NODES = 3
CONTAINER_NODE_PROCESSES = ("containerd", "kubelet")


@dataclass(frozen=True)
class Ports:
    etcd: int
    etcd_peer: int
    kwok: int
    controller_manager: int
    scheduler: int
    dcgm_sim: int
    prometheus: int
    health: int
    kueue: int
    kueue_webhook: int
    kueue_metrics: int
    kueue_visibility: int
    agent_sandbox: int
    registry: int
    kubelet_0: int
    kubelet_1: int
    kubelet_2: int
    kube_proxy: int
    kube_proxy_metrics: int
    netpol_metrics: int
    object_store: int
    apiserver: int

    @classmethod
    def from_base(cls, base: int) -> Ports:
        if not 1024 <= base <= 65535 - max(_OFFSETS.values()):
            raise ValueError(
                f"--base-port {base} out of range 1024..{65535 - max(_OFFSETS.values())}"
            )
        return cls(**{name: base + off for name, off in _OFFSETS.items()})

    def by_process(self) -> dict[str, int]:
        """Every port and the process that listens on it, for checks and `status`."""
        names = {
            "etcd": "etcd",
            "etcd_peer": "etcd (peer)",
            "kwok": "kwok",
            "controller_manager": "kube-controller-manager",
            "scheduler": "kube-scheduler",
            "dcgm_sim": "dcgm-sim",
            "prometheus": "prometheus",
            "health": "gridloop-health",
            "kueue": "kueue",
            "kueue_webhook": "kueue (webhook)",
            "kueue_metrics": "kueue (metrics)",
            "kueue_visibility": "kueue (visibility)",
            "agent_sandbox": "agent-sandbox",
            "registry": "registry",
            **{f"kubelet_{i}": f"{node_process('kubelet', i)} (healthz)" for i in range(3)},
            "kube_proxy": "kube-proxy",
            "kube_proxy_metrics": "kube-proxy (metrics)",
            "netpol_metrics": "kube-network-policies",
            "object_store": "object-store",
            "apiserver": "kube-apiserver",
        }
        return {names[k]: v for k, v in asdict(self).items()}

    def kubelet_healthz(self, index: int) -> int:
        return int(getattr(self, f"kubelet_{index}"))

    def used_by(self, processes: list[str]) -> dict[str, int]:
        """The ports these processes listen on (`etcd (peer)` comes with etcd, and so on)."""
        return {
            owner: port
            for owner, port in self.by_process().items()
            if owner.split(" (")[0] in processes
        }


def node_process(kind: str, index: int) -> str:
    """The process name of container node `index`'s containerd or kubelet."""
    from gridloop.fleet.nodes import container_node_name

    return f"{kind}/{container_node_name(index)}"

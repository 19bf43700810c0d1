"""NetworkPolicy for the container nodes' pods: kube-network-policies on the host (pure).

The bridge CNI enforces nothing, so the local cluster runs SIG Network's
kube-network-policies (built from its module with the edits netpol_overlays.py lists) as one
host process for all container nodes, as kube-proxy is: they share the host's network
namespace. It watches Pods, Namespaces and NetworkPolicies, keeps the addresses of the
pods some policy selects in an nftables set, and judges the first packet of each of
their connections in user space against the policies (ingress of the receiver, egress
of the sender, as upstream does).

How a packet reaches it here: upstream's nftables chains (table `kube-network-policies`,
hooks postrouting and input) set the mark bit `MARK` where upstream would queue, and the
iptables chain `GRIDLOOP-NETPOL` in the mangle table, hooked into POSTROUTING and INPUT,
sends marked packets to nfqueue `QUEUE`. This machine's kernel has no nft `queue`
expression, only the xt NFQUEUE target. Fail closed as upstream is: while the table
exists and nothing reads the queue, the policed pods' new connections are dropped; the
process deletes its table when it stops, and `down` deletes what a killed one left.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gridloop import names
from gridloop.local.build import netpol_overlays

BINARY = "kube-network-policies"
USER = "system:kube-network-policies"  # its client certificate's name (certs.py)
TABLE = "kube-network-policies"  # upstream's nftables table name
QUEUE = 100  # upstream's default nfqueue number
MARK = 0x10000000  # a bit kube-proxy (0x4000, 0x8000) and the kubelet do not use
CHAIN = "GRIDLOOP-NETPOL"  # mangle; hooked from POSTROUTING and INPUT
HOOKS = ("POSTROUTING", "INPUT")
LOCAL_LABEL = {names.LOCAL_COMPONENT_LABEL: "network-policy"}


def argv(binary: Path, first_node: str, metrics_port: int) -> list[str]:
    return [
        str(binary),
        f"--hostname-override={first_node}",
        f"--nfqueue-id={QUEUE}",
        f"--metrics-bind-address=127.0.0.1:{metrics_port}",
        # the DNS race it works around is fixed in kernels 6.12 and later; with the fix
        # on, upstream queues DNS with nft's queue expression, which this kernel lacks
        "--netfilter-bug-1766-fix=false",
        "--v=1",
    ]


def env(kubeconfig: Path, nodes: list[str]) -> dict[str, str]:
    return {
        netpol_overlays.NETPOL_KUBECONFIG_ENV: str(kubeconfig),
        netpol_overlays.NETPOL_NODES_ENV: ",".join(nodes),
        netpol_overlays.NETPOL_MARK_ENV: hex(MARK),
        netpol_overlays.NETPOL_INPUT_ENV: "1",
    }


def health_path() -> str:
    """Upstream serves /metrics only; it answers once the process runs."""
    return "/metrics"


def queue_rules() -> list[list[str]]:
    """iptables arguments (mangle table) for the chain that queues marked packets."""
    return [[CHAIN, "-m", "mark", "--mark", f"{MARK:#x}/{MARK:#x}", "-j", "NFQUEUE",
             "--queue-num", str(QUEUE)]]  # fmt: skip


def rbac_objects() -> list[dict[str, Any]]:
    """What it reads (Pods, Namespaces, NetworkPolicies) and the Events it records."""
    name = "gridloop:kube-network-policies"
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name, "labels": LOCAL_LABEL},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["pods", "namespaces"],
                    "verbs": ["get", "list", "watch"],
                },
                {
                    "apiGroups": ["networking.k8s.io"],
                    "resources": ["networkpolicies"],
                    "verbs": ["get", "list", "watch"],
                },
                {
                    "apiGroups": ["", "events.k8s.io"],
                    "resources": ["events"],
                    "verbs": ["create", "patch", "update"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": LOCAL_LABEL},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
        },
    ]

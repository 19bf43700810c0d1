"""The leader Leases a stopped cluster's pods left held, released before it starts again.

`local down` stops a container node's pods with the node's cgroup (sweeping.py): no
controller gets to release its leader Lease, as Kueue and agent-sandbox do when they
stop gracefully (KubeRay never does). On the next `up` each controller is a new
candidate, and client-go's leader election waits out a held lease's whole duration
counted from when the candidate first saw it, not from the holder's last renewal: every
controller of the chart would sit idle for that long (15 s for Kueue, KubeRay and
agent-sandbox) after each restart, Kueue admitting nothing and removing no finalizer.
So before the nodes start `up` releases each Lease held by a pod of a container node, as
the holder would have on a graceful stop (client-go's `release`: holder cleared,
duration 1 s). Node heartbeats (kube-node-lease) and Leases held by anything else stay.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.rest import ApiException

from gridloop.fleet.nodes import CONTAINER_NODE_LABEL

NODE_HEARTBEATS = "kube-node-lease"


@dataclass(frozen=True)
class HeldLease:
    namespace: str
    name: str
    holder: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def held_by(leases: Iterable[HeldLease], pods: Iterable[str]) -> list[HeldLease]:
    """The leases (node heartbeats aside) whose holder is one of `pods`: the pod's name, as
    gridloop's health service writes it, or the name then `_` and an id, as
    controller-runtime writes its `<hostname>_<uuid>` (a pod's hostname is its name)."""
    names = set(pods)
    return [
        lease
        for lease in leases
        if lease.namespace != NODE_HEARTBEATS
        and (lease.holder in names or lease.holder.partition("_")[0] in names)
    ]


def release(api: client.ApiClient) -> list[HeldLease]:
    """Release the Leases held by pods bound to a container node; the ones released. Call
    it only while no container node runs (their pods stopped with them)."""
    core, coord = client.CoreV1Api(api), client.CoordinationV1Api(api)
    nodes = core.list_node(label_selector=f"{CONTAINER_NODE_LABEL}=true").items
    pods = [
        pod.metadata.name
        for node in nodes
        for pod in core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node.metadata.name}"
        ).items
    ]
    leases = [
        HeldLease(item.metadata.namespace, item.metadata.name, item.spec.holder_identity or "")
        for item in coord.list_lease_for_all_namespaces().items
    ]
    released = []
    for lease in held_by(leases, pods):
        body = {"spec": {"holderIdentity": "", "leaseDurationSeconds": 1}}
        try:
            coord.patch_namespaced_lease(lease.name, lease.namespace, body)
        except ApiException as err:
            if err.status != 404:
                raise
            continue
        released.append(lease)
    return released

"""The leader Leases a stopped cluster's pods left held, released before it starts again.

`local down` stops a container node's pods with the node's cgroup (sweeping.py): no
controller gets to release its leader Lease, and on the next `up` each controller of the
chart would sit idle for the lease's duration (gridloop.leases says why). Before the
nodes start, `up` releases every Lease held by a pod bound to a container node.
"""

from __future__ import annotations

from kubernetes import client

from gridloop import leases
from gridloop.fleet.nodes import CONTAINER_NODE_LABEL


def release(api: client.ApiClient) -> list[leases.HeldLease]:
    """Release the Leases held by pods bound to a container node; the ones released. Call
    it only while no container node runs (their pods stopped with them)."""
    core = client.CoreV1Api(api)
    nodes = core.list_node(label_selector=f"{CONTAINER_NODE_LABEL}=true").items
    pods = [
        pod.metadata.name
        for node in nodes
        for pod in core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node.metadata.name}"
        ).items
    ]
    return leases.release(api, leases.held_by(leases.listed(api), pods))

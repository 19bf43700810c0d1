"""Leader Leases whose holder is gone: found, and released as the holder would have.

Controllers elect a leader through a coordination.k8s.io Lease. One that stops cleanly
clears its holder (Kueue and agent-sandbox do; KubeRay never does); one that is killed
leaves the Lease held. A new candidate then waits out the lease's whole duration counted
from when it first saw it, not from the holder's last renewal (client-go's leader
election): 15 s for Kueue, KubeRay and agent-sandbox, in which Kueue admits nothing and
removes no finalizer. Where gridloop knows the holder is gone (its pod stopped with a
local cluster, or no longer exists), it releases the Lease as client-go's `release`
does (holder cleared, duration 1 s), so the next leader starts at once. Node heartbeats
(kube-node-lease) are never touched.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.rest import ApiException

NODE_HEARTBEATS = "kube-node-lease"


@dataclass(frozen=True)
class HeldLease:
    namespace: str
    name: str
    holder: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def holder_pod(self) -> str:
        """The pod a holder names: gridloop's health service writes its pod's name,
        controller-runtime `<hostname>_<uuid>` (a pod's hostname is its name)."""
        return self.holder.partition("_")[0]


def held_by(leases: Iterable[HeldLease], pods: Iterable[str]) -> list[HeldLease]:
    """The leases (node heartbeats aside) whose holder is one of `pods`."""
    names = set(pods)
    return [
        lease
        for lease in leases
        if lease.namespace != NODE_HEARTBEATS and lease.holder and lease.holder_pod in names
    ]


def left_by(
    leases: Iterable[HeldLease],
    deployments: Iterable[tuple[str, str]],
    pods: Iterable[tuple[str, str]],
) -> list[HeldLease]:
    """The leases held by a pod of one of `deployments` (namespace, name: its pods are
    named `<name>-<hash>-<id>`) in the lease's namespace that no longer exists (`pods`:
    namespace, name of every pod there is)."""
    existing = set(pods)
    owners: dict[str, set[str]] = {}
    for namespace, name in deployments:
        owners.setdefault(namespace, set()).add(name)
    return [
        lease
        for lease in leases
        if lease.namespace != NODE_HEARTBEATS
        and lease.holder
        and (lease.namespace, lease.holder_pod) not in existing
        and any(lease.holder_pod.startswith(f"{name}-") for name in owners.get(lease.namespace, ()))
    ]


def listed(api: client.ApiClient, namespace: str | None = None) -> list[HeldLease]:
    coord = client.CoordinationV1Api(api)
    found = (
        coord.list_lease_for_all_namespaces()
        if namespace is None
        else coord.list_namespaced_lease(namespace)
    )
    return [
        HeldLease(item.metadata.namespace, item.metadata.name, item.spec.holder_identity or "")
        for item in found.items
    ]


def release(api: client.ApiClient, leases: Iterable[HeldLease]) -> list[HeldLease]:
    """Release each (holder cleared, duration 1 s); the ones released (a gone one is not)."""
    coord = client.CoordinationV1Api(api)
    released = []
    for lease in leases:
        body = {"spec": {"holderIdentity": "", "leaseDurationSeconds": 1}}
        try:
            coord.patch_namespaced_lease(lease.name, lease.namespace, body)
        except ApiException as err:
            if err.status != 404:
                raise
            continue
        released.append(lease)
    return released

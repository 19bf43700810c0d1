"""Delete the release's Kueue queues and flavors while Kueue still runs (pure core + shell).

Kueue puts its `kueue.x-k8s.io/resource-in-use` finalizer on every ClusterQueue and
ResourceFlavor, and only its controller removes it. A plain `helm uninstall` deletes
the controller together with them, and they stay terminating with their names taken,
so the next install of the chart is refused. The chart's pre-delete hook runs this
first: LocalQueues, then ClusterQueues, the Cohort and the ResourceFlavors, each
deleted by name and waited for until gone. `gridloop uninstall` calls the same `remove`
itself, with the release's objects it finds by label (uninstall_command.py), and skips
the hook.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.rest import ApiException

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
# what goes first: a ClusterQueue is in use while a LocalQueue points at it, a flavor
# while a ClusterQueue names it
ORDER = ("localqueues", "clusterqueues", "cohorts", "resourceflavors")
# how often a kind's deletions are looked for: the four kinds are waited for one after
# the other, and each wait lasts at least one poll once Kueue has anything to let go
POLL_S = 0.2


@dataclass(frozen=True)
class Queue:
    plural: str  # one of ORDER
    name: str
    namespace: str = ""  # LocalQueues only

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.plural[:-1]} {where}{self.name}"


def parse_local_queue(text: str) -> Queue:
    """`NAMESPACE/NAME` -> the LocalQueue; anything else is a ValueError naming it."""
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        raise ValueError(f"--localqueue {text}: want NAMESPACE/NAME")
    return Queue("localqueues", name, namespace)


def in_order(queues: Sequence[Queue]) -> list[Queue]:
    return sorted(queues, key=lambda q: ORDER.index(q.plural))


def remove(
    api: client.ApiClient,
    queues: Sequence[Queue],
    say: Callable[[str], None],
    timeout: float = 120.0,
) -> list[Queue]:
    """Delete each (one kind after the other, waiting for each kind to go); return the
    ones still there at the timeout (empty: all gone)."""
    custom = client.CustomObjectsApi(api)
    deadline = time.monotonic() + timeout
    for plural in ORDER:
        batch = [q for q in in_order(queues) if q.plural == plural]
        for queue in batch:
            if _delete(custom, queue):
                say(f"deleting {queue}")
        while batch and time.monotonic() < deadline:
            batch = [q for q in batch if _exists(custom, q)]
            if batch:
                time.sleep(POLL_S)
        if batch:
            return [
                *batch,
                *[q for q in in_order(queues) if ORDER.index(q.plural) > ORDER.index(plural)],
            ]
    return []


def _delete(custom: client.CustomObjectsApi, queue: Queue) -> bool:
    """Whether it was there to delete."""
    return _call(custom, queue, "delete")


def _exists(custom: client.CustomObjectsApi, queue: Queue) -> bool:
    return _call(custom, queue, "get")


def _call(custom: client.CustomObjectsApi, queue: Queue, verb: str) -> bool:
    """`verb` (get or delete) on the queue; False when it is not there (404)."""
    scope = "namespaced" if queue.namespace else "cluster"
    where = (queue.namespace,) if queue.namespace else ()
    try:
        getattr(custom, f"{verb}_{scope}_custom_object")(
            GROUP, VERSION, *where, queue.plural, queue.name
        )
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True

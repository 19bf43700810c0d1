"""Change one node's taints without losing anyone else's.

`local up` brings nodes an older gridloop made up to date: the simulated GPU nodes get
the GPU taint they were created without, the container nodes lose the NoSchedule taint
they were registered with. The health service may taint the same nodes meanwhile, so a
change is a merge patch carrying the resourceVersion it was computed from, redone after
a fresh read on a conflict.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from gridloop.errors import ClusterError

Taints = list[dict[str, Any]]
ATTEMPTS = 5


def change_taints(core: client.CoreV1Api, name: str, change: Callable[[Taints], Taints]) -> bool:
    """Apply `change` to the node's taints; True if it changed them (False: nothing to
    do, or the node is gone)."""
    for _ in range(ATTEMPTS):
        try:
            node = json.loads(core.read_node(name, _preload_content=False).data)
        except ApiException as err:
            if err.status == 404:
                return False
            raise ClusterError(f"reading node {name}: {err.reason}") from err
        taints: Taints = (node.get("spec") or {}).get("taints") or []
        wanted = change(list(taints))
        if wanted == taints:
            return False
        body = {
            "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
            "spec": {"taints": wanted or None},
        }
        try:
            core.patch_node(name, body, _preload_content=False)
            return True
        except ApiException as err:
            if err.status == 404:
                return False
            if err.status != 409:
                raise ClusterError(f"changing the taints of node {name}: {err.reason}") from err
    raise ClusterError(f"changing the taints of node {name}: still conflicting after {ATTEMPTS}")


def with_taint(taint: dict[str, str]) -> Callable[[Taints], Taints]:
    """A change adding `taint` unless a taint with its key is there."""
    return lambda taints: (
        taints if any(t.get("key") == taint["key"] for t in taints) else [*taints, dict(taint)]
    )


def without_key(key: str) -> Callable[[Taints], Taints]:
    """A change removing every taint with `key`."""
    return lambda taints: [t for t in taints if t.get("key") != key]

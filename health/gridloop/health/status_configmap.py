"""The status ConfigMap: the breaker's state, the quota removals, the last cycle's summary.

`gridloop-health-status` in the service's namespace. The breaker lives here so
a restarted or failed-over replica picks it up; operators read it with
`kubectl get configmap gridloop-health-status -o yaml` or `gridloop health status`.
The GPU quota the rebalancer took away within its window (quotas.py) is kept
beside the breaker, for the same reason; `reset-breaker` clears both.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from gridloop.health import breaker as breakers
from gridloop.health.observed import MANAGER, Breaker
from gridloop.health.quotas import Removal

NAME = "gridloop-health-status"


@dataclass(frozen=True)
class Status:
    breaker: Breaker
    removals: tuple[Removal, ...] = ()


def load(core: client.CoreV1Api, namespace: str) -> Status:
    try:
        cm = core.read_namespaced_config_map(NAME, namespace)
    except ApiException as err:
        if err.status == 404:
            return Status(Breaker())  # first start: nothing quarantined yet
        raise
    data = cm.data or {}
    return Status(
        breakers.from_json(data.get("breaker", "")),
        removals_from_json(data.get("quotaRemovals", "[]")),
    )


def removals_to_json(removals: tuple[Removal, ...]) -> str:
    return json.dumps([[r.at, r.queue, r.flavor, r.gpus] for r in removals])


def removals_from_json(text: str) -> tuple[Removal, ...]:
    """An unreadable record reads as a window already full: unsure means take no more."""
    try:
        return tuple(Removal(float(t), str(q), str(f), int(g)) for t, q, f, g in json.loads(text))
    except (ValueError, TypeError):
        return (Removal(math.inf, "-", "-", 2**31),)


def save(
    core: client.CoreV1Api,
    namespace: str,
    breaker: Breaker,
    summary: dict[str, Any],
    removals: tuple[Removal, ...] = (),
) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": NAME,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": MANAGER},
        },
        "data": {
            "breaker": breakers.to_json(breaker),
            "lastCycle": json.dumps(summary, sort_keys=True),
            "quotaRemovals": removals_to_json(removals),
        },
    }
    # server-side apply: the service owns these fields, whoever created the object
    core.api_client.call_api(
        f"/api/v1/namespaces/{namespace}/configmaps/{NAME}",
        "PATCH",
        query_params=[("fieldManager", MANAGER), ("force", "true")],
        header_params={
            "Content-Type": "application/apply-patch+yaml",
            "Accept": "application/json",
        },
        body=body,
        auth_settings=["BearerToken"],
        _preload_content=False,
    )

"""The status ConfigMap: the breaker's state and the last cycle's summary.

`gridloop-health-status` in the service's namespace. The breaker lives here so
a restarted or failed-over replica picks it up; operators read it with
`kubectl get configmap gridloop-health-status -o yaml` or `gridloop health status`.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from gridloop.health import breaker as breakers
from gridloop.health.observed import MANAGER, Breaker

NAME = "gridloop-health-status"


def load(core: client.CoreV1Api, namespace: str) -> Breaker:
    try:
        cm = core.read_namespaced_config_map(NAME, namespace)
    except ApiException as err:
        if err.status == 404:
            return Breaker()  # first start: nothing quarantined yet
        raise
    return breakers.from_json((cm.data or {}).get("breaker", ""))


def save(core: client.CoreV1Api, namespace: str, breaker: Breaker, summary: dict[str, Any]) -> None:
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

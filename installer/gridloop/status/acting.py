"""The few things `gridloop status --allow-actions` may do, each asked for first in the UI.

Cordon and uncordon go through the same field of the Node as `kubectl cordon`
(spec.unschedulable), under the field manager `gridloop-status`; an uncordon of a
node the health service quarantined is a human override it respects (docs/health.md).
Resetting the breaker is `gridloop health reset-breaker`.
"""

from __future__ import annotations

from kubernetes import client

from gridloop.health import breaker as breakers
from gridloop.health import status_configmap as status

MANAGER = "gridloop-status"


class Actions:
    def __init__(self, api: client.ApiClient, health_namespace: str) -> None:
        self.core = client.CoreV1Api(api)
        self.health_namespace = health_namespace

    def __call__(self, action: str, node: str) -> str:
        if action in ("cordon", "uncordon"):
            cordon = action == "cordon"
            self.core.patch_node(
                node, {"spec": {"unschedulable": cordon or None}}, field_manager=MANAGER
            )
            return f"node/{node} {'cordoned' if cordon else 'uncordoned'}"
        if action == "reset-breaker":
            before = status.load(self.core, self.health_namespace).breaker
            status.save(
                self.core, self.health_namespace, breakers.reset(before), {"resetBy": MANAGER}
            )
            return "breaker reset" + (f" (was tripped: {before.reason})" if before.tripped else "")
        raise ValueError(f"unknown action {action!r}")

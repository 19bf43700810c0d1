"""Read a model's rollout from the cluster, and say it in an Event (the shell around
rollouts.py).

`read` takes a Deployment already read and lists its ReplicaSets and pods by the model's
label (the chart's pod template carries `gridloop.io/model`, and ReplicaSets and pods
copy the template's labels). `record` writes a Warning Event on the Deployment, so
`kubectl describe deployment`, `kubectl get events` and `gridloop status`'s events view
say which revision serves and why the new one is stuck.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client

from gridloop import kube
from gridloop.kube import get
from gridloop.models import rollouts

SOURCE = "gridloop"  # the Events' source.component: the installer


def is_model(deployment: Mapping[str, Any]) -> bool:
    template = (deployment.get("spec") or {}).get("template") or {}
    return bool(((template.get("metadata") or {}).get("labels") or {}).get(rollouts.MODEL))


def read(api: client.ApiClient, deployment: Mapping[str, Any]) -> rollouts.Rollout:
    meta = deployment.get("metadata") or {}
    namespace = meta.get("namespace", "")
    template = (deployment.get("spec") or {}).get("template") or {}
    model = ((template.get("metadata") or {}).get("labels") or {})[rollouts.MODEL]
    query = {"labelSelector": f"{rollouts.MODEL}={model}"}
    replica_sets = get(api, f"/apis/apps/v1/namespaces/{namespace}/replicasets", query)
    pods = get(api, f"/api/v1/namespaces/{namespace}/pods", query)
    return rollouts.rollout(deployment, replica_sets.get("items") or [], pods.get("items") or [])


def record(api: client.ApiClient, deployment: Mapping[str, Any], rollout: rollouts.Rollout) -> str:
    """A Warning Event on the Deployment when its new revision is stuck; its message."""
    meta = deployment.get("metadata") or {}
    message = f"model {rollout.model}: {rollout.summary()}"
    kube.record_event(
        client.CoreV1Api(api),
        client.V1ObjectReference(
            api_version="apps/v1",
            kind="Deployment",
            name=meta["name"],
            namespace=meta["namespace"],
            uid=meta.get("uid"),
        ),
        rollouts.REASON,
        message,
        namespace=meta["namespace"],
        component=SOURCE,
        instance=SOURCE,
        warning=True,
        suffix="revision",
    )
    return message

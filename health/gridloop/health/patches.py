"""Node patches as pure data: what each action changes on a Node object.

Every patch carries the resourceVersion it was computed from, so the API
server refuses it (409) if the node changed meanwhile; the shell then reads
the node again and recomputes. Taints are a plain list on the server (no merge
key), so the patch always sends the whole list it wants.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from gridloop.health.actions import Acknowledge, Quarantine
from gridloop.health.observed import (
    ACKNOWLEDGED,
    FAULTS,
    GPUS,
    HEALTHY_SINCE,
    MANAGER,
    QUARANTINED_AT,
    QUARANTINED_BY,
    REASON,
    STATE_LABEL,
    TAINT_KEY,
)

Node = dict[str, Any]
_RECORD = (QUARANTINED_AT, REASON, GPUS, FAULTS, HEALTHY_SINCE, QUARANTINED_BY)


def _taints_without_ours(node: Node) -> list[dict[str, Any]]:
    return [t for t in (node.get("spec", {}).get("taints") or []) if t.get("key") != TAINT_KEY]


def _meta(node: Node, **changes: Any) -> dict[str, Any]:
    return {"resourceVersion": node["metadata"]["resourceVersion"], **changes}


def quarantine(node: Node, action: Quarantine, now: float) -> dict[str, Any]:
    taints = [
        *_taints_without_ours(node),
        {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"},
    ]
    if action.no_execute:
        taints.append({"key": TAINT_KEY, "value": "true", "effect": "NoExecute"})
    return {
        "metadata": _meta(
            node,
            labels={STATE_LABEL: "quarantined"},
            annotations={
                QUARANTINED_BY: MANAGER,
                QUARANTINED_AT: _iso(now),
                REASON: action.reason,
                GPUS: ",".join(action.gpus),
                FAULTS: json.dumps(sorted(action.faults)),
                HEALTHY_SINCE: None,
            },
        ),
        "spec": {"unschedulable": True, "taints": taints},
    }


def release(node: Node) -> dict[str, Any]:
    """Untaint, uncordon and forget: only ever sent for nodes gridloop quarantined."""
    return {
        "metadata": _meta(node, labels={STATE_LABEL: None}, annotations=dict.fromkeys(_RECORD)),
        "spec": {"unschedulable": False, "taints": _taints_without_ours(node)},
    }


def acknowledge(node: Node, action: Acknowledge) -> dict[str, Any]:
    """A person uncordoned the node: drop gridloop's taint and record, remember the faults."""
    annotations: dict[str, Any] = dict.fromkeys(_RECORD)
    annotations[ACKNOWLEDGED] = json.dumps(sorted(action.faults))
    return {
        "metadata": _meta(node, labels={STATE_LABEL: None}, annotations=annotations),
        "spec": {"taints": _taints_without_ours(node)},
    }


def healthy_since(node: Node, since: float | None) -> dict[str, Any]:
    value = None if since is None else _iso(since)
    return {"metadata": _meta(node, annotations={HEALTHY_SINCE: value})}


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_iso(value: str) -> float:
    return dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC).timestamp()

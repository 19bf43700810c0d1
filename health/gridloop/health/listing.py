"""Read GPU nodes from the API server into NodeViews (gridloop's record included).

One list call per cycle for the whole fleet. A node's record is what
gridloop wrote in its annotations, so a restarted service knows its past.
"""

from __future__ import annotations

import json
from typing import Any

from gridloop.health.observed import (
    ACKNOWLEDGED,
    FAULTS,
    HEALTHY_SINCE,
    MANAGER,
    QUARANTINED_AT,
    QUARANTINED_BY,
    NodeView,
    Record,
)
from gridloop.health.patches import parse_iso

GPU_NODES = "nvidia.com/gpu.present=true"


def _faults(raw: str | None) -> frozenset[str]:
    if not raw:
        return frozenset()
    try:
        value = json.loads(raw)
    except ValueError:
        return frozenset()
    return frozenset(str(v) for v in value) if isinstance(value, list) else frozenset()


def _gpus_expected(node: dict[str, Any]) -> int:
    labels = node["metadata"].get("labels", {})
    raw = labels.get("nvidia.com/gpu.count") or node.get("status", {}).get("allocatable", {}).get(
        "nvidia.com/gpu", "0"
    )
    try:
        return int(raw)
    except ValueError:
        return 0


def node_view(node: dict[str, Any], opt_out_label: str) -> NodeView:
    meta = node["metadata"]
    labels, notes = meta.get("labels", {}), meta.get("annotations", {}) or {}
    pool = f"{labels.get('gridloop.io/site', '-')}/" + labels.get(
        "gridloop.io/pool", labels.get("nvidia.com/gpu.product", "-")
    )
    record = None
    if notes.get(QUARANTINED_BY) == MANAGER and notes.get(QUARANTINED_AT):
        since = notes.get(HEALTHY_SINCE)
        record = Record(
            quarantined_at=parse_iso(notes[QUARANTINED_AT]),
            faults=_faults(notes.get(FAULTS)),
            healthy_since=parse_iso(since) if since else None,
        )
    return NodeView(
        name=meta["name"],
        pool=pool,
        gpus_expected=_gpus_expected(node),
        unschedulable=bool(node.get("spec", {}).get("unschedulable")),
        opted_out=labels.get(opt_out_label) == "true",
        record=record,
        acknowledged=_faults(notes.get(ACKNOWLEDGED)),
    )


def node_views(nodes: list[dict[str, Any]], opt_out_label: str) -> dict[str, NodeView]:
    return {n["metadata"]["name"]: node_view(n, opt_out_label) for n in nodes}

"""Read GPU nodes from the API server into NodeViews (gridloop's record included).

A node's record is what gridloop wrote in its annotations, so a restarted
service knows its past. The fleet is listed in pages and each page becomes
views before the next is read: 5,000 nodes are ~23 MB of JSON, and holding it
all decoded at once would double the service's peak memory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gridloop import names
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

GPU_LABEL = (names.GPU_PRESENT_LABEL, "true")
GPU_NODES = "=".join(GPU_LABEL)  # the label selector


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
    raw = labels.get(names.GPU_COUNT_LABEL) or node.get("status", {}).get("allocatable", {}).get(
        names.GPU_RESOURCE, "0"
    )
    try:
        return int(raw)
    except ValueError:
        return 0


def _ready(node: dict[str, Any]) -> bool:
    for cond in node.get("status", {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def node_view(node: dict[str, Any], opt_out_label: str) -> NodeView:
    meta = node["metadata"]
    labels, notes = meta.get("labels", {}), meta.get("annotations", {}) or {}
    pool = f"{labels.get('gridloop.io/site', '-')}/" + labels.get(
        names.POOL_LABEL, labels.get(names.GPU_PRODUCT_LABEL, "-")
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
        ready=_ready(node),
        labels=labels,
    )


PAGE = 500  # nodes per list call


@dataclass(frozen=True)
class Listed:
    views: dict[str, NodeView]
    versions: dict[str, int]  # each node's resourceVersion
    taints: dict[str, list[dict[str, Any]]]  # each node's taints, as the API server has them
    resource_version: str  # the list's: a watch continues from here


def list_views(core: Any, opt_out_label: str) -> Listed:
    """Every GPU node as a NodeView, read a page at a time."""
    views: dict[str, NodeView] = {}
    versions: dict[str, int] = {}
    taints: dict[str, list[dict[str, Any]]] = {}
    token = None
    while True:
        raw = core.list_node(
            label_selector=GPU_NODES, limit=PAGE, _continue=token, _preload_content=False
        )
        page = json.loads(raw.data)
        for node in page["items"]:
            meta = node["metadata"]
            views[meta["name"]] = node_view(node, opt_out_label)
            versions[meta["name"]] = int(meta.get("resourceVersion") or 0)
            taints[meta["name"]] = (node.get("spec") or {}).get("taints") or []
        token = page["metadata"].get("continue")
        if not token:
            return Listed(views, versions, taints, str(page["metadata"]["resourceVersion"]))

"""`gridloop status --once`: the same views as the UI, as a table or as JSON.

JSON keys are camelCase, as kubectl's; a `--filter` keeps the same rows the UI would.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence

from gridloop.status import views
from gridloop.status.snapshot import Snapshot

FIELDS = {"fleet": "nodes", "queues": "queues", "inference": "models", "sandboxes": "sandboxes"}
FIELDS["events"] = "events"


def _camel(name: str) -> str:
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)


def _camelized(value: object) -> object:
    if isinstance(value, dict):
        return {_camel(str(k)): _camelized(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_camelized(v) for v in value]
    return value


def _kept(snapshot: Snapshot, view: str, filter_text: str) -> list[int]:
    """Which of the view's objects (by position) the filter keeps."""
    rows = views.table(snapshot, view).rows
    keep = {r.key for r in views.filtered(rows, filter_text)}
    return [i for i, r in enumerate(rows) if r.key in keep]


def _kept_keys(snapshot: Snapshot, view: str, filter_text: str) -> set[str]:
    """The keys of the view's rows the filter keeps."""
    return {r.key for r in views.filtered(views.table(snapshot, view).rows, filter_text)}


def as_json(snapshot: Snapshot, chosen: Sequence[str], filter_text: str = "") -> str:
    """Every chosen view's objects with all their fields, plus the verdicts and summary."""
    data = dataclasses.asdict(snapshot)
    out: dict[str, object] = {
        "context": snapshot.context,
        "takenAt": snapshot.taken_at,
        "summary": views.summary(snapshot),
        "breaker": data["breaker"],
        "problems": dict(snapshot.problems),
        "absent": list(snapshot.absent),
    }
    for view in chosen:
        key = FIELDS[view]
        items = data[key]
        if view == "fleet":
            for node, raw in zip(snapshot.nodes, items, strict=True):
                state, why = views.verdict(node)
                raw.update(labels=dict(node.labels), healthy=node.healthy, verdict=state, why=why)
        if view == "sandboxes":  # a row per template, then one per pod: kept by key
            keep = _kept_keys(snapshot, view, filter_text)
            out[key] = [
                raw
                for s, raw in zip(snapshot.sandboxes, items, strict=True)
                if views.sandbox_key(s) in keep
            ]
            out["sandbox_pods"] = [
                raw
                for p, raw in zip(snapshot.sandbox_pods, data["sandbox_pods"], strict=True)
                if views.pod_key(p) in keep
            ]
            continue
        if view == "events":  # the view's order: newest first
            items = sorted(items, key=lambda e: e["time"], reverse=True)
        out[key] = [items[i] for i in _kept(snapshot, view, filter_text)]
    return json.dumps(_camelized(out), indent=2, sort_keys=True) + "\n"


def as_table(snapshot: Snapshot, chosen: Sequence[str], filter_text: str = "") -> str:
    lines = [views.summary(snapshot)]
    stale = views.stale(snapshot)
    if stale:
        lines.append(f"STALE: {stale}")
    if ignored := views.ignored(snapshot):
        lines.append(f"IGNORED: {ignored}")
    for view in chosen:
        table = views.table(snapshot, view)
        rows = views.filtered(table.rows, filter_text)
        lines += ["", f"{view.upper()}"]
        if not rows:
            lines.append(f"  ({f'no rows match {filter_text!r}' if table.rows else table.empty})")
            continue
        lines += _aligned([c.title for c in table.columns], [r.cells for r in rows])
        if view == "queues":
            lines += _jobs(snapshot, {r.key for r in rows})
    return "\n".join(lines) + "\n"


def _jobs(snapshot: Snapshot, queues: set[str]) -> list[str]:
    """Under the queues, the jobs Kueue holds for them (the shown queues' Workloads)."""
    rows = [
        (
            f"{job.kind}/{job.name}",
            job.namespace,
            q.name,
            job.state,
            ",".join(job.flavors) or "-",
            views.job_age(job, snapshot.taken_at),
            job.why or "-",
        )
        for q in snapshot.queues
        if q.name in queues
        for job in q.jobs
    ]
    if not rows:
        return []
    header = ["JOB", "NAMESPACE", "CLUSTERQUEUE", "STATE", "FLAVORS", "AGE", "WHY"]
    return ["", "JOBS", *_aligned(header, rows)]


def _aligned(header: list[str], rows: Sequence[tuple[str, ...]]) -> list[str]:
    """kubectl-style columns: padded to the widest cell, three spaces between."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    out = []
    for cells in [tuple(header), *rows]:
        out.append("   ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    return out

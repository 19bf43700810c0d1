"""`gridloop status --once`: the same views as the UI, as a table or as JSON."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from gridloop.status import views
from gridloop.status.snapshot import Snapshot


def as_json(snapshot: Snapshot, chosen: Sequence[str]) -> str:
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
        if view == "fleet":
            nodes = []
            for node, raw in zip(snapshot.nodes, data["nodes"], strict=True):
                state, why = views.verdict(node)
                raw["labels"] = dict(node.labels)
                nodes.append({**raw, "healthy": node.healthy, "verdict": state, "why": why})
            out["nodes"] = nodes
        else:
            key = {"queues": "queues", "inference": "models"}.get(view, view)
            out[key] = data[key]
    return json.dumps(out, indent=2, sort_keys=True) + "\n"


def as_table(snapshot: Snapshot, chosen: Sequence[str]) -> str:
    lines = [views.summary(snapshot)]
    stale = views.stale(snapshot)
    if stale:
        lines.append(f"STALE: {stale}")
    for view in chosen:
        table = views.table(snapshot, view)
        lines += ["", f"{view.upper()}"]
        if not table.rows:
            lines.append(f"  ({table.empty})")
            continue
        lines += _aligned([c.title for c in table.columns], [r.cells for r in table.rows])
    return "\n".join(lines) + "\n"


def _aligned(header: list[str], rows: list[tuple[str, ...]]) -> list[str]:
    """kubectl-style columns: padded to the widest cell, three spaces between."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    out = []
    for cells in [tuple(header), *rows]:
        out.append("   ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    return out

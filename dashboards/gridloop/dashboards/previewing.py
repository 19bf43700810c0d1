"""Render a dashboard's panels to one PNG from a live Prometheus (matplotlib).

Each panel is drawn where Grafana would put it (its ``gridPos`` on a 24-column grid):
time series as lines (the first few series named in a legend), stat panels as their
current value. It is a preview for docs and reviews, not Grafana: thresholds, colours
and units beyond seconds, percent and bytes are not reproduced.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt
from matplotlib.gridspec import GridSpec

from gridloop.dashboards.catalog import dashboard as load_dashboard
from gridloop.dashboards.fetching import Series, query_range
from gridloop.dashboards.queries import expand

LEGEND_MAX = 6
_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def legend(template: str, labels: Mapping[str, str]) -> str:
    """Grafana's ``{{label}}`` legend format filled in from a series' labels."""
    if not template:
        return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or "value"
    return _LEGEND.sub(lambda m: labels.get(m.group(1), ""), template)


def render(
    name: str,
    url: str,
    out: Path,
    since_s: float,
    values: Mapping[str, str] | None = None,
    now: float | None = None,
) -> Path:
    """Draw dashboard ``name`` over the last ``since_s`` seconds into ``out``/<name>.png."""
    board = load_dashboard(name)
    end = time.time() if now is None else now
    start, step = end - since_s, max(5.0, since_s / 240)
    window = f"{max(20, int(4 * step))}s"
    panels = [p for p in board["panels"] if p["type"] != "row"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in board["panels"])
    fig = plt.figure(figsize=(24, rows * 0.42), dpi=80)
    fig.suptitle(f"{board['title']}  (last {since_s / 60:.0f} min)", fontsize=16, x=0.01, ha="left")
    grid = GridSpec(
        rows, 24, figure=fig, hspace=2.2, wspace=1.2, top=0.95, bottom=0.03, left=0.04, right=0.99
    )
    for panel in panels:
        g = panel["gridPos"]
        ax = fig.add_subplot(grid[g["y"] : g["y"] + g["h"], g["x"] : g["x"] + g["w"]])
        series = [
            (t, s)
            for t in panel["targets"]
            for s in query_range(
                url,
                expand(t["expr"], values, window),
                start,
                end,
                step,
                f"{name} panel {panel['id']} {panel['title']!r}",
            )
        ]
        _draw(ax, panel, series)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def _draw(ax: Any, panel: dict[str, Any], series: list[tuple[dict[str, Any], Series]]) -> None:
    ax.set_title(panel["title"], fontsize=11, loc="left")
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
    if panel["type"] == "stat":
        ax.axis("off")
        last = [s.values[-1] for _, s in series if s.values and not math.isnan(s.values[-1])]
        text = "no data" if not last else _value(sum(last), unit, panel)
        ax.text(0.5, 0.4, text, fontsize=28, ha="center", va="center", transform=ax.transAxes)
        return
    for i, (target, s) in enumerate(series):
        times = [t - s.times[-1] for t in s.times] if s.times else []
        label = legend(target.get("legendFormat", ""), s.labels) if i < LEGEND_MAX else None
        ax.plot([t / 60 for t in times], s.values, linewidth=0.9, label=label)
    if not series:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("minutes ago", fontsize=8)
    if unit and unit != "none":
        ax.set_ylabel(unit, fontsize=8)
    ax.tick_params(labelsize=7)
    if len(series) > 0:
        extra = f" (+{len(series) - LEGEND_MAX} more)" if len(series) > LEGEND_MAX else ""
        ax.legend(
            fontsize=7, loc="upper left", title=f"{len(series)} series{extra}", title_fontsize=7
        )


def _value(value: float, unit: str, panel: dict[str, Any]) -> str:
    for mapping in panel.get("fieldConfig", {}).get("defaults", {}).get("mappings", []):
        hit = mapping.get("options", {}).get(f"{value:g}")
        if hit:
            return str(hit.get("text", value))
    suffix = {"s": " s", "percent": " %", "percentunit": ""}.get(unit, "")
    return f"{value:.3g}{suffix}"

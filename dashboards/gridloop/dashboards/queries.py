"""Every PromQL query a dashboard runs, and each one ready to send to Prometheus.

Panels' targets and annotation queries are read out of the dashboard JSON (the same
files the chart carries), and Grafana's variables are expanded as Grafana would with
every filter at All: ``$site`` becomes ``.*``, ``$__rate_interval`` a fixed window.
Used by the tests (every query parses, returns data on the local cluster) and by
``gridloop dashboards preview``.

Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gridloop.dashboards.panels import ALL

RATE_WINDOW = "1m"
_VARIABLE = re.compile(r"\$(__rate_interval|__interval|__range|[A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class Target:
    """One query of a dashboard: a panel's target or an annotation."""

    dashboard: str
    panel_id: int  # 0 for annotations
    panel: str  # the panel's title, or "annotation <name>"
    ref: str
    expr: str
    legend: str = ""
    instant: bool = False

    @property
    def where(self) -> str:
        return f"{self.dashboard} panel {self.panel_id} {self.panel!r} target {self.ref}"


def targets(name: str, dashboard: Mapping[str, Any]) -> list[Target]:
    out = []
    for panel in dashboard.get("panels", []):
        for t in panel.get("targets") or []:
            out.append(
                Target(
                    name,
                    panel["id"],
                    panel["title"],
                    t["refId"],
                    t["expr"],
                    t.get("legendFormat", ""),
                    bool(t.get("instant")),
                )
            )
    for a in dashboard.get("annotations", {}).get("list", []):
        if a.get("expr"):
            out.append(Target(name, 0, f"annotation {a['name']}", "-", a["expr"]))
    return out


def expand(expr: str, values: Mapping[str, str] | None = None, window: str = RATE_WINDOW) -> str:
    """``expr`` with Grafana's variables replaced: those in ``values`` by their value,
    the interval variables by ``window``, every other variable by All (``.*``)."""
    given = dict(values or {})

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name.startswith("__"):
            return window
        return given.get(name, ALL)

    return _VARIABLE.sub(one, expr)


def variable_queries(dashboard: Mapping[str, Any]) -> dict[str, str]:
    """name -> the label_values(...) query of each query variable."""
    out = {}
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            query = v["query"]
            out[v["name"]] = query["query"] if isinstance(query, dict) else str(query)
    return out

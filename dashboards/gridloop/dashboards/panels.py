"""The pieces every gridloop dashboard is made of, over grafana-foundation-sdk's builders.

A ``Board`` numbers its panels itself (ids 1, 2, ... in the order they are added, rows
included), so ids are unique and stable across regenerations; the SDK lays panels out
left to right, a new line when 24 columns are used. Every panel and query names the
``$datasource`` variable, never a fixed data source, and every variable that filters
defaults to All (its ``allValue`` ``.*`` also matches a series without that label).

Pure: builders in, builders out; no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypeVar

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.builders.common import VizLegendOptions
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model

DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
ALL = ".*"
RATE = "$__rate_interval"
QUANTILES = (0.5, 0.9, 0.99)

Panel = timeseries.Panel | stat.Panel
T = TypeVar("T")


def q(expr: str, legend: str = "", instant: bool = False) -> prometheus.Dataquery:
    """One PromQL target; refIds are set by ``Board`` (A, B, ...)."""
    target = prometheus.Dataquery().expr(expr).datasource(DATASOURCE)
    if legend:
        target = target.legend_format(legend)
    return target.instant() if instant else target.range()


def graph(
    title: str,
    description: str,
    unit: str,
    targets: Sequence[prometheus.Dataquery],
    width: int = 12,
    height: int = 8,
) -> timeseries.Panel:
    """A time series panel with a table legend (so a series can be found by name)."""
    legend = (
        VizLegendOptions()
        .display_mode(common.LegendDisplayMode.TABLE)
        .placement(common.LegendPlacement.RIGHT)
        .show_legend(True)
        .calcs(["lastNotNull", "max"])
    )
    return (
        timeseries.Panel()
        .title(title)
        .description(description)
        .unit(unit)
        .span(width)
        .height(height)
        .legend(legend)
        .line_width(1)
        .fill_opacity(8)
        .targets(list(targets))
    )


def single(
    title: str,
    description: str,
    target: prometheus.Dataquery,
    unit: str = "none",
    width: int = 6,
    mapping: dict[str, str] | None = None,
) -> stat.Panel:
    """A stat panel showing one current value (with text for known values, if given)."""
    panel = (
        stat.Panel()
        .title(title)
        .description(description)
        .unit(unit)
        .span(width)
        .height(4)
        .targets([target])
    )
    if mapping:
        options = {k: model.ValueMappingResult(text=v) for k, v in mapping.items()}
        panel = panel.mappings([model.ValueMap(options=options)])
    return panel


def quantiles(metric: str, by: str, selector: str, legend: str) -> list[prometheus.Dataquery]:
    """p50, p90 and p99 of a Prometheus histogram, per ``by``."""
    return [
        q(
            f"histogram_quantile({p}, sum by (le, {by}) "
            f"(rate({metric}_bucket{{{selector}}}[{RATE}])))",
            f"{legend} p{round(p * 100)}",
        )
        for p in QUANTILES
    ]


class Board:
    """A dashboard being built: fixed uid, ``$datasource`` first, panels numbered."""

    def __init__(self, uid: str, title: str, description: str, tags: Sequence[str]) -> None:
        self._next_id = 1
        self._titles: dict[str, str] = {}
        self.builder = (
            db.Dashboard(title)
            .uid(uid)
            .description(description)
            .tags(["gridloop", *tags])
            .readonly()
            .tooltip(model.DashboardCursorSync.CROSSHAIR)
            .time("now-1h", "now")
            .refresh("30s")
            .timezone("browser")
            .with_variable(
                db.DatasourceVariable("datasource").label("Data source").type("prometheus")
            )
        )

    def variable(self, name: str, label: str, query: str, description: str) -> Board:
        """A multi-value filter from ``label_values(...)``, All by default."""
        self.builder = self.builder.with_variable(
            db.QueryVariable(name)
            .label(label)
            .description(description)
            .datasource(DATASOURCE)
            .query({"query": query, "refId": f"{name}-values"})
            .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(model.VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(ALL)
            .current(model.VariableOption(text="All", value="$__all", selected=True))
        )
        return self

    def annotation(self, name: str, expr: str, color: str, title: str) -> Board:
        """Marks on every time series where ``expr`` returns a sample."""
        self.builder = self.builder.annotation(
            db.AnnotationQuery()
            .name(name)
            .datasource(DATASOURCE)
            .enable(True)
            .icon_color(color)
            .expr(expr)
        )
        self._titles[name] = title  # the SDK's model has no titleFormat
        return self

    def row(self, title: str) -> Board:
        self.builder = self.builder.with_row(db.Row(title).id(self._take_id()))
        return self

    def add(self, *panels: Panel) -> Board:
        for panel in panels:
            built = panel.datasource(DATASOURCE).id(self._take_id()).build()
            for i, target in enumerate(built.targets or []):
                target.ref_id = chr(ord("A") + i)  # type: ignore[attr-defined]
            self.builder = self.builder.with_panel(_Built(built))
        return self

    def _take_id(self) -> int:
        taken, self._next_id = self._next_id, self._next_id + 1
        return taken

    def json(self) -> dict[str, Any]:
        """The dashboard as Grafana's JSON model (plain data)."""
        data: dict[str, Any] = json.loads(json.dumps(self.builder.build(), cls=JSONEncoder))
        data.setdefault("annotations", {}).setdefault("list", [])
        for annotation in data["annotations"]["list"]:
            if annotation["name"] in self._titles:
                annotation["titleFormat"] = self._titles[annotation["name"]]
        return data


class _Built(Builder[T]):
    """An already built object handed back to a builder method that wants a builder."""

    def __init__(self, built: T) -> None:
        self._built = built

    def build(self) -> T:
        return self._built

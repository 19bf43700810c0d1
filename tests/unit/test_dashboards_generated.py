"""The dashboards the chart carries are exactly what dashboards/gridloop/dashboards/ builds,
and each is a well-formed Grafana dashboard whose every query is valid PromQL (checked by
promql-parser, a port of Prometheus' own parser) over metrics a real source exposes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import promql_parser
import pytest

from gridloop.dashboards import catalog, generating
from gridloop.dashboards.catalog import DASHBOARDS
from gridloop.dashboards.commands import parse_sets, parse_since
from gridloop.dashboards.queries import Target, expand, targets, variable_queries
from gridloop.dcgm import METRICS
from gridloop.errors import UsageError
from gridloop.health.metrics import Metrics
from gridloop.sim.workloads import render_agent_sandbox, render_kube_state, render_vllm, vllm_pods

CHART_DASHBOARDS = generating.default_dir()
NAMES = sorted(DASHBOARDS)


def committed(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CHART_DASHBOARDS / f"{name}.json").read_text())
    return data


def all_targets() -> list[Target]:
    return [t for name in NAMES for t in targets(name, committed(name))]


def test_the_committed_json_is_byte_identical_to_what_the_code_generates() -> None:
    assert generating.differences(CHART_DASHBOARDS) == [], (
        "charts/gridloop/dashboards/ differs from the code: run `gridloop dashboards generate`"
    )


def test_generating_twice_gives_the_same_bytes() -> None:
    assert [catalog.render(n) for n in NAMES] == [catalog.render(n) for n in NAMES]


def test_generate_writes_the_files_and_removes_one_no_code_makes(tmp_path: Path) -> None:
    (tmp_path / "gpu-health.json").write_text("{}")  # a hand-written dashboard of old

    changed = generating.write(tmp_path)

    assert "gpu-health.json" in changed
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{n}.json" for n in NAMES)
    assert generating.differences(tmp_path) == []
    (tmp_path / "queues.json").write_text(catalog.render("queues").replace("Queues", "Q"))
    assert generating.differences(tmp_path) == ["queues.json"]


@pytest.mark.parametrize("name", NAMES)
def test_each_dashboard_says_it_is_generated_and_has_a_fixed_uid(name: str) -> None:
    text = (CHART_DASHBOARDS / f"{name}.json").read_text()
    assert text.startswith('{\n  "__generated": "generated from dashboards/gridloop/dashboards/')
    assert "do not edit" in text.splitlines()[1]
    assert committed(name)["uid"] == f"gridloop-{name}"


def test_uids_are_unique_across_dashboards() -> None:
    uids = [committed(n)["uid"] for n in NAMES]
    assert len(set(uids)) == len(uids)


@pytest.mark.parametrize("name", NAMES)
def test_every_panel_and_query_uses_the_datasource_variable(name: str) -> None:
    board = committed(name)
    first = board["templating"]["list"][0]
    assert (first["name"], first["type"], first["query"]) == (
        "datasource",
        "datasource",
        "prometheus",
    )
    for panel in board["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
    for variable in board["templating"]["list"][1:]:
        assert variable["datasource"]["uid"] == "${datasource}"
        assert variable["includeAll"] and variable["allValue"] == ".*"


@pytest.mark.parametrize("name", NAMES)
def test_panel_ids_are_unique_and_grid_positions_valid(name: str) -> None:
    panels = committed(name)["panels"]
    ids = [p["id"] for p in panels]
    assert len(set(ids)) == len(ids) and min(ids) >= 1
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["w"] >= 1 and g["h"] >= 1 and g["x"] >= 0 and g["y"] >= 0, p["title"]
        assert g["x"] + g["w"] <= 24, p["title"]
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine
        refs = [t["refId"] for t in p.get("targets", [])]
        assert len(set(refs)) == len(refs), p["title"]


@pytest.mark.parametrize("target", all_targets(), ids=lambda t: t.where)
def test_every_query_parses_as_promql(target: Target) -> None:
    promql_parser.parse(expand(target.expr))


@pytest.mark.parametrize("name", NAMES)
def test_every_variable_query_parses(name: str) -> None:
    for variable, query in variable_queries(committed(name)).items():
        assert query.startswith("label_values("), variable
        selector = query.removeprefix("label_values(").rsplit(",", 1)[0]
        promql_parser.parse(expand(selector))


def metric_names(expr: str) -> set[str]:
    found: set[str] = set()

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            found.add(node.name)

    promql_parser.walk(promql_parser.parse(expand(expr)), pre_visit=visit)
    return found


def exposed_names() -> set[str]:
    """Every metric name the real and simulated sources expose (histograms as their series)."""
    texts = [
        Metrics().expose().decode(),
        render_agent_sandbox(1000.0, 0.0),
        render_kube_state(1000.0, 0.0),
        *(render_vllm(pod, 1000.0, 0.0) or "" for _ns, pod in vllm_pods()),
    ]
    names = {
        line.split("{")[0].split(" ")[0]
        for text in texts
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    kinds = {line.split()[2] for t in texts for line in t.splitlines() if line.startswith("# TYPE")}
    # a histogram with no observation yet still has these series once observed
    histograms = {
        line.split()[2] for t in texts for line in t.splitlines() if line.endswith(" histogram")
    }
    names |= {f"{h}{s}" for h in histograms for s in ("_bucket", "_count", "_sum")}
    return names | kinds | set(METRICS) | {"up"}


KUEUE_METRICS = {
    # Kueue v0.19.2's pkg/metrics/metrics.go (the real controller runs in the local cluster)
    "kueue_pending_workloads",
    "kueue_admitted_workloads_total",
    "kueue_evicted_workloads_total",
    "kueue_admission_wait_time_seconds_bucket",
    "kueue_cluster_queue_nominal_quota",
    "kueue_cluster_queue_resource_usage",
}
# kube-state-metrics' node taint family (the alert reads it; not simulated)
KSM_TAINT = {"kube_node_spec_taint"}


def test_every_metric_a_dashboard_queries_is_one_a_source_exposes() -> None:
    known = exposed_names() | KUEUE_METRICS
    unknown = {
        (t.where, name) for t in all_targets() for name in metric_names(t.expr) if name not in known
    }
    assert unknown == set()


def test_kv_cache_panel_reads_the_current_vllm_name_not_the_deprecated_one() -> None:
    exprs = " ".join(t.expr for t in targets("inference", committed("inference")))
    assert "vllm:kv_cache_usage_perc" in exprs and "gpu_cache_usage_perc" not in exprs


def test_fleet_health_selects_both_host_label_spellings() -> None:
    for t in targets("gpu-fleet-health", committed("gpu-fleet-health")):
        if "DCGM_FI_DEV_" in t.expr:
            assert t.expr.count('Hostname=~"$node"') == t.expr.count('hostname=~"$node"') >= 1, (
                t.where
            )


def test_expand_fills_grafana_variables_with_all_or_the_given_value() -> None:
    kept = 'label_replace(y, "h", "$1", "a", "(.+)")'
    expr = f'rate(x{{site=~"$site",node=~"$node"}}[$__rate_interval]) and {kept}'
    assert expand(expr, {"site": "us-east"}, "2m") == (
        f'rate(x{{site=~"us-east",node=~".*"}}[2m]) and {kept}'
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [("0m", "--since 0m: not a duration"), ("soon", "--since soon: not a duration")],
)
def test_a_bad_since_is_one_line_naming_the_flag(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_since(text)


def test_a_bad_set_is_one_line_naming_the_flag() -> None:
    assert parse_sets(["site=us-east"]) == {"site": "us-east"}
    with pytest.raises(UsageError, match="--set site: expected VAR=VALUE"):
        parse_sets(["site"])

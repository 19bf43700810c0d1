"""The chart's alert rules, rendered by the real helm, pass Prometheus' own `promtool check
rules`, and their logic (and one dashboard query's) is evaluated by `promtool test rules`,
Prometheus' rule engine over series given in the test."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gridloop.dashboards import rules
from gridloop.dashboards.fleet_health import per_gpu
from gridloop.dashboards.queries import expand
from gridloop.errors import BuildError
from gridloop.local.build.building import binary

# the real promtool, on rules rendered by helm: both from `gridloop local build`
pytestmark = pytest.mark.needs_binaries("helm", "promtool")

NEW_ALERTS = {
    "GpuFatalFaultNotQuarantined",
    "GridloopHealthNotLeading",
    "GridloopHealthBreakerTripped",
    "GridloopHealthNoCycle",
    "GridloopQueuePendingWithoutHealthyGpus",
}


def tool(name: str) -> Path:
    try:
        return binary(name)
    except BuildError as err:
        pytest.fail(f"{err}: these tests run the real {name}", pytrace=False)


@pytest.fixture(scope="module")
def rendered() -> dict[str, Any]:
    return rules.render(tool("helm"))


def exprs(rendered: dict[str, Any]) -> dict[str, str]:
    return {r["alert"]: r["expr"] for g in rendered["groups"] for r in g["rules"]}


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tool("promtool")), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
        check=False,
    )


def test_every_rule_passes_promtool_check_rules(rendered: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rendered))

    done = promtool("check", "rules", "rules.yml", cwd=tmp_path)

    assert done.returncode == 0, done.stdout + done.stderr
    assert set(rules.alert_names(rendered)) >= NEW_ALERTS


def expr_test(
    tmp_path: Path, series: dict[str, str], checks: list[tuple[str, list[dict[str, Any]]]]
) -> str:
    """Run promtool's promql_expr_test: each expression at 5m against `series`."""
    (tmp_path / "empty.yml").write_text("groups: []\n")
    spec = {
        "rule_files": ["empty.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series.items()],
                "promql_expr_test": [
                    {"expr": e, "eval_time": "5m", "exp_samples": samples} for e, samples in checks
                ],
            }
        ],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(spec, sort_keys=False))
    done = promtool("test", "rules", "test.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_fatal_fault_alerts_only_on_a_node_without_the_quarantine_taint(
    rendered: dict[str, Any], tmp_path: Path
) -> None:
    expr = exprs(rendered)["GpuFatalFaultNotQuarantined"]
    series = {
        'DCGM_FI_DEV_XID_ERRORS{node="a",gpu="3",Hostname="a"}': "79x10",
        'DCGM_FI_DEV_XID_ERRORS{node="b",gpu="0",Hostname="b"}': "79x10",
        'DCGM_FI_DEV_XID_ERRORS{node="c",gpu="0",Hostname="c"}': "13x10",  # application XID
        'DCGM_FI_DEV_ROW_REMAP_FAILURE{node="d",gpu="1",hostname="d"}': "1x10",
        'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{node="e",gpu="2",Hostname="e"}': "0 0 0 1 1 1 1 1 1 1",
        'DCGM_FI_DEV_ROW_REMAP_FAILURE{node="f",gpu="1",Hostname="f"}': "0x10",
        # kube-state-metrics: node b is quarantined already
        'kube_node_spec_taint{node="b",key="gridloop.io/gpu-unhealthy"}': "1x10",
    }
    expected = [
        {"labels": f'{{node="{n}"}}', "value": v} for n, v in (("a", 79), ("d", 1), ("e", 1))
    ]

    expr_test(tmp_path, series, [(expr, expected)])


def test_a_queue_alerts_when_work_waits_and_its_healthy_quota_is_zero(
    rendered: dict[str, Any], tmp_path: Path
) -> None:
    expr = exprs(rendered)["GridloopQueuePendingWithoutHealthyGpus"]
    pending, quota = "kueue_pending_workloads", "gridloop_health_quota_gpus"
    series = {
        f'{pending}{{cluster_queue="starved",status="inadmissible"}}': "2x10",
        f'{pending}{{cluster_queue="starved",status="active"}}': "0x10",
        f'{quota}{{cluster_queue="starved",flavor="eu-west-a100",kind="nominal"}}': "0x10",
        f'{quota}{{cluster_queue="starved",flavor="eu-west-a100",kind="configured"}}': "32x10",
        f'{pending}{{cluster_queue="busy",status="active"}}': "5x10",
        f'{quota}{{cluster_queue="busy",flavor="us-east-h100",kind="nominal"}}': "56x10",
        f'{pending}{{cluster_queue="idle",status="active"}}': "0x10",
        f'{quota}{{cluster_queue="idle",flavor="us-east-h100",kind="nominal"}}': "0x10",
    }

    expr_test(tmp_path, series, [(expr, [{"labels": '{cluster_queue="starved"}', "value": 2}])])


def test_not_leading_alerts_when_no_replica_leads_or_none_runs(
    rendered: dict[str, Any], tmp_path: Path
) -> None:
    expr = exprs(rendered)["GridloopHealthNotLeading"]
    standby = {'gridloop_health_leader{pod="a"}': "0x10", 'gridloop_health_leader{pod="b"}': "0x10"}
    leading = {'gridloop_health_leader{pod="a"}': "0x10", 'gridloop_health_leader{pod="b"}': "1x10"}

    for folder in ("standby", "leading"):
        (tmp_path / folder).mkdir()
    expr_test(tmp_path / "standby", standby, [(expr, [{"labels": "{}", "value": 0}])])
    expr_test(tmp_path / "leading", leading, [(expr, [])])


def test_fleet_health_reads_either_host_label_spelling(tmp_path: Path) -> None:
    expr = expand(per_gpu("DCGM_FI_DEV_GPU_TEMP"))
    series = {
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="old-exporter",site="s",pool="p"}': "60x10",
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",hostname="new-exporter",site="s",pool="p"}': "70x10",
    }
    expected = [
        {
            "labels": 'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="old-exporter",host="old-exporter",'
            'site="s",pool="p"}',
            "value": 60,
        },
        {
            "labels": 'DCGM_FI_DEV_GPU_TEMP{gpu="0",hostname="new-exporter",host="new-exporter",'
            'site="s",pool="p"}',
            "value": 70,
        },
    ]

    expr_test(tmp_path, series, [(expr, expected)])

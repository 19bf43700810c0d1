"""Every dashboard query returns data, and every alert rule loads and fires, against the
local cluster's real Prometheus while a scenario feeds it.

The scenario, in order (a few minutes):
1. the chart's alert rules (real `helm template`, every `for` a value sets at 0 minutes,
   and GridloopHealthNoCycle's fixed minute at 0 too) are written where the local
   Prometheus loads rules, and it reloads them (SIGHUP);
2. faults: XID 79 on every GPU node of the eu-west A100 pool, one exporter down; no
   health service runs yet, so nothing cycles and nobody leads;
3. Kueue (the real controller): a team's ClusterQueue over three pools with Jobs
   admitted and one pending, and a ClusterQueue over the eu-west A100 pool alone, made
   while the alerts of 2 go pending; then those alerts fire;
4. the health service (the real code, in this process, its /metrics on the cluster's
   health port, which Prometheus scrapes): first with an unreachable Prometheus (it holds
   back), then a dry-run pass, then the real loop. It
   quarantines the four A100 nodes, which leaves the A100-only queue no healthy GPU, and
   with a fleet limit of four its breaker trips on the next fault (ECC double-bit and a
   failed row remap on a us-east node); then the team's queue is stopped (HoldAndDrain),
   which evicts its workloads.

Metric sources: DCGM from the simulated exporters (dcgm-exporter's names and labels),
Kueue's real controller, the real health service; vLLM, the agent-sandbox
controller and kube-state-metrics are simulated (gridloop.sim.workloads), with their
upstream metric names, types and labels, because neither runs here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import threading
import time
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml
from kubernetes import client
from kueue_scenario import GROUP, VERSION, TeamQueues, gpu_job

from gridloop.dashboards import rules
from gridloop.dashboards.catalog import DASHBOARDS, dashboard
from gridloop.dashboards.queries import expand, targets, variable_queries
from gridloop.health import metrics as health_metrics
from gridloop.health.observed import STATE_LABEL
from gridloop.health.policy import Limits, Policy, QuotaLimits
from gridloop.health.reading import connect
from gridloop.health.service import HealthService
from gridloop.local.build.building import binary
from gridloop.local.ports import LOOPBACK
from gridloop.local.prometheus_config import RULES_GLOB, SCRAPE_INTERVAL

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("kueue_platform")]

SCRAPE_S = float(SCRAPE_INTERVAL.rstrip("s"))
A100_NODES = [f"eu-west-a100-{i:03d}" for i in range(4)]
BROKEN_H100 = "us-east-h100-001"
DOWN_EXPORTER = "onprem-fra-a100-007"
WINDOW = "15m"  # covers the whole scenario, so every rate sees its events
IMMEDIATE = (
    "monitoring.rules.exporterDownMinutes=0",
    "monitoring.rules.notQuarantinedMinutes=0",
    "monitoring.rules.notLeadingMinutes=0",
    "monitoring.rules.holdingMinutes=0",
    "monitoring.rules.noHealthyCapacityMinutes=0",
    "monitoring.rules.healthCycleStaleMinutes=1",
)
POLICY = dataclasses.replace(
    Policy(),
    hold_down_s=3600.0,
    scrape_interval_s=SCRAPE_S,
    limits=Limits(fleet_max_nodes=4, fleet_max_percent=100, pool_max_nodes=8, pool_max_percent=100),
    quota_limits=QuotaLimits(max_removed_gpus=256, max_removed_percent=100, window_s=3600),
)


@dataclass
class Record:
    rules: dict[str, Any] = field(default_factory=dict)
    loaded: set[str] = field(default_factory=set)
    fired: set[str] = field(default_factory=set)
    series: dict[str, int] = field(default_factory=dict)  # Target.where -> series returned
    variables: dict[str, int] = field(default_factory=dict)


class Prom:
    def __init__(self, port: int) -> None:
        self.url = f"http://{LOOPBACK}:{port}"
        self.client = connect(self.url)

    def get(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=30) as answer:
            return json.loads(answer.read())["data"]

    def firing(self) -> set[str]:
        return {
            a["labels"]["alertname"]
            for a in self.get("/api/v1/alerts")["alerts"]
            if a["state"] == "firing"
        }

    def count(self, expr: str) -> int:
        return len(self.get("/api/v1/query", query=expr)["result"])


def _gpu_quota(api: client.ApiClient, queue: str) -> int:
    spec = client.CustomObjectsApi(api).get_cluster_custom_object(
        GROUP, VERSION, "clusterqueues", queue
    )["spec"]
    return sum(
        int(r["nominalQuota"])
        for g in spec["resourceGroups"]
        for f in g["flavors"]
        for r in f["resources"]
        if r["name"] == "nvidia.com/gpu"
    )


def _reload(local_cluster: Any) -> None:
    [proc] = [p for p in local_cluster.state.processes if p.name == "prometheus"]
    os.kill(proc.pid, signal.SIGHUP)


def _starved_queue(api: client.ApiClient, namespace: str, prefix: str) -> tuple[str, str]:
    """A ClusterQueue over the eu-west A100 pool alone (32 GPUs), and its LocalQueue."""
    custom = client.CustomObjectsApi(api)
    flavor, queue = f"{prefix}-eu-west-a100", f"{prefix}-a100-only"
    custom.create_cluster_custom_object(
        GROUP, VERSION, "resourceflavors",
        {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
            "spec": {"nodeLabels": {"gridloop.io/site": "eu-west", "gridloop.io/pool": "a100"}},
        },
    )  # fmt: skip
    resources = [
        {"name": "cpu", "nominalQuota": "1000"},
        {"name": "memory", "nominalQuota": "10Ti"},
        {"name": "nvidia.com/gpu", "nominalQuota": "32"},
    ]
    custom.create_cluster_custom_object(
        GROUP, VERSION, "clusterqueues",
        {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue",
            "metadata": {"name": queue},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [{"name": flavor, "resources": resources}],
                    }
                ],
            },
        },
    )  # fmt: skip
    custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "localqueues",
        {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
            "metadata": {"name": "a100-only", "namespace": namespace},
            "spec": {"clusterQueue": queue},
        },
    )  # fmt: skip
    return flavor, queue


def _observe(prom: Prom, record: Record) -> None:
    """Every dashboard target and variable, now; the most series each returned so far."""
    record.fired |= prom.firing()
    for name in DASHBOARDS:
        board = dashboard(name)
        for t in targets(name, board):
            n = prom.count(expand(t.expr, window=WINDOW))
            record.series[t.where] = max(n, record.series.get(t.where, 0))
        for var, query in variable_queries(board).items():
            selector, label = query.removeprefix("label_values(").removesuffix(")").rsplit(",", 1)
            n = len(
                prom.get(
                    "/api/v1/label/" + label.strip() + "/values", **{"match[]": expand(selector)}
                )
            )
            record.variables[f"{name} ${var}"] = max(n, record.variables.get(f"{name} ${var}", 0))


def at_once(rendered: dict[str, Any]) -> dict[str, Any]:
    """The rendered rules with GridloopHealthNoCycle's fixed `for: 1m` at 0 too, as the
    values set every other one: the alerts fire on the first evaluation that sees them."""
    for group in rendered["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == "GridloopHealthNoCycle":
                assert rule["for"] == "1m", rule
                rule["for"] = "0m"
    return rendered


def run_scenario(local_cluster, namespace: str, sim, wait) -> Record:
    """The scenario of the module docstring; what Prometheus showed while it ran."""
    state, api = local_cluster.state, local_cluster.api
    core = local_cluster.core
    prom = Prom(state.ports.prometheus)
    record = Record(rules=at_once(rules.render(binary("helm"), IMMEDIATE)))
    rules_dir = state.dir / RULES_GLOB.split("/")[0]
    rules_dir.mkdir(exist_ok=True)
    rules_file = rules_dir / "gridloop.yml"
    prefix = f"db{uuid.uuid4().hex[:4]}"
    team = TeamQueues(api, namespace, prefix)
    stop, server = threading.Event(), None
    batch = client.BatchV1Api(api)
    try:
        # 1. the chart's rules, loaded by the real Prometheus
        rules_file.write_text(yaml.safe_dump(record.rules))
        _reload(local_cluster)
        groups = {g["name"] for g in record.rules["groups"]}
        wait(
            lambda: groups <= {g["name"] for g in prom.get("/api/v1/rules")["groups"]},
            "rules loaded",
            30,
        )
        record.loaded = {
            r["name"]
            for g in prom.get("/api/v1/rules")["groups"]
            for r in g["rules"]
            if r["health"] != "err"
        }
        # 2. faults, with no health service
        for node in A100_NODES:
            sim("--node", node, "--xid", "79")
        sim("--node", DOWN_EXPORTER, "--exporter-down")
        # 3. Kueue: a team over three pools, eleven 8-GPU Jobs (ten fit), and an A100-only
        # queue, made while the alerts of 2 go pending (the service's take a minute or two)
        team.create({"us-east": 64, "eu-west": 8, "onprem-fra": 8})
        names = [f"train-{i}" for i in range(11)]
        for name in names:
            team.submit(name)
        team.wait_placed(names, timeout=60)
        _flavor, starved = _starved_queue(api, namespace, prefix)
        wait(
            lambda: {"GpuFatalFaultNotQuarantined", "DcgmExporterDown"} <= prom.firing(),
            "fault alerts",
            60,
        )
        # a service that is gone: no cycle within healthCycleStaleMinutes (1)
        wait(
            lambda: {"GridloopHealthNoCycle", "GridloopHealthNotLeading"} <= prom.firing(),
            "no-service alerts",
            200,
        )
        record.fired |= prom.firing()
        # 4. the health service, its /metrics scraped by Prometheus: first blind (its
        # Prometheus unreachable: it holds back), then a dry-run pass, then the real loop
        metrics = health_metrics.Metrics()
        server = health_metrics.serve(metrics, LOOPBACK, state.ports.health, lambda: True)
        blind = HealthService(
            api, connect(f"http://{LOOPBACK}:1"), POLICY, namespace, metrics=metrics, log=print
        )
        wait(
            lambda: blind.cycle() and "GridloopHealthHolding" in prom.firing(), "holding alert", 60
        )
        record.fired |= prom.firing()
        prom_client = connect(prom.url)
        dry = HealthService(
            api,
            prom_client,
            dataclasses.replace(POLICY, dry_run=True),
            namespace,
            metrics=metrics,
            log=print,
        )
        for _ in range(3):
            dry.cycle()
        service = HealthService(api, prom_client, POLICY, namespace, metrics=metrics, log=print)
        threading.Thread(target=service.run, args=(1.0, stop), daemon=True).start()
        wait(
            lambda: sum(1 for n in core.list_node(label_selector=STATE_LABEL).items) == 4,
            "the four A100 nodes quarantined",
            60,
        )
        # the quota goes to zero after the taints, in the same cycle: a Job submitted
        # between the two would be admitted against the old quota and never pend
        wait(
            lambda: _gpu_quota(api, starved) == 0,
            f"{starved}'s GPU quota lowered to zero",
            60,
        )
        batch.create_namespaced_job(namespace, gpu_job("starved-0", "a100-only", 8))
        # the alert's two sides, one at a time, so a timeout names the one missing
        on_queue = f'cluster_queue="{starved}"'
        wait(
            lambda: prom.count(f"sum(kueue_pending_workloads{{{on_queue}}}) > 0"),
            f"Kueue's pending workload on {starved} in Prometheus",
            120,
        )
        wait(
            lambda: prom.count(f'gridloop_health_quota_gpus{{{on_queue},kind="nominal"}} == 0'),
            f"the health service's zero quota on {starved} in Prometheus",
            60,
        )
        wait(
            lambda: "GridloopQueuePendingWithoutHealthyGpus" in prom.firing(),
            f"{starved} alert",
            60,
        )
        record.fired |= prom.firing()
        # the breaker: a fifth node breaks with four out already
        sim("--node", BROKEN_H100, "--gpu", "1", "--ecc-dbe")
        sim("--node", BROKEN_H100, "--gpu", "2", "--row-remap-failure")
        wanted = {"GridloopHealthBreakerTripped", "GpuEccDoubleBitErrors", "GpuRowRemapFailure"}
        wait(lambda: wanted <= prom.firing(), "breaker and ECC alerts", 60)
        record.fired |= prom.firing()
        # evictions: the team's queue stops and drains
        team.custom.patch_cluster_custom_object(
            GROUP, VERSION, "clusterqueues", team.queue, {"spec": {"stopPolicy": "HoldAndDrain"}}
        )
        wait(
            lambda: prom.count("kueue_evicted_workloads_total") > 0, "an eviction in Prometheus", 60
        )
        wait(
            lambda: prom.count("gridloop_health_cycle_seconds_count") > 0,
            "health metrics scraped",
            30,
        )
        deadline = time.monotonic() + 90
        while True:
            _observe(prom, record)
            if all(record.series.values()) or time.monotonic() > deadline:
                break
            time.sleep(SCRAPE_S)
        return record
    finally:
        stop.set()
        if server is not None:
            server.shutdown()
            server.server_close()
        rules_file.unlink(missing_ok=True)
        _reload(local_cluster)
        team.delete()
        custom = client.CustomObjectsApi(api)
        for plural, name in (
            ("clusterqueues", f"{prefix}-a100-only"),
            ("resourceflavors", f"{prefix}-eu-west-a100"),
        ):
            try:
                custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
            except client.ApiException as err:
                if err.status != 404:
                    raise


def test_every_dashboard_query_has_data_and_every_alert_fires_while_the_scenario_runs(
    local_cluster, namespace, sim, eventually
) -> None:
    record = run_scenario(local_cluster, namespace, sim, eventually)

    every = {t.where for name in DASHBOARDS for t in targets(name, dashboard(name))}
    assert set(record.series) == every
    empty = sorted(where for where, n in record.series.items() if n == 0)
    assert empty == [], "queries with no series: " + "; ".join(empty)
    assert record.variables
    assert sorted(v for v, n in record.variables.items() if n == 0) == []
    alerts = set(rules.alert_names(record.rules))
    assert alerts <= record.loaded, "rules Prometheus did not load"
    assert alerts - record.fired == set(), "alerts that never fired"

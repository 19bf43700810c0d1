"""Benchmark: a fault's first Prometheus sample to a Job admitted in another region.

Everything is real but the GPUs: the local control plane with the default fleet
(examples/fleets/default.yaml, Kueue on), the real Kueue controller `gridloop local
up` runs, the simulated dcgm-exporters scraped every 5 s by Debian's Prometheus, and the
health service as its own process with the arguments `gridloop local up` gives it.

A team's ClusterQueue lists region one (us-east H100, 64 GPUs), region two (eu-west
H100, 32) and on-prem (onprem-fra A100, 64) in that order (tests/cluster/kueue_scenario.py).
Six 8-GPU Jobs run in region one. Each round:

1. the two region-one nodes with no Job get XID 79 on GPU 0 (one write of the faults
   file, as `gridloop sim inject` does);
2. t0 = the timestamp of the first Prometheus sample showing the XID on either node;
3. as soon as region one's quota is seen lowered (by 16 GPUs, to the 48 its six Jobs
   use), two 8-GPU Jobs are submitted; each is admitted by Kueue, which region is noted;
4. measured: t0 to the quota lowered, and t0 to the first new Job admitted;
5. the two Jobs are deleted, the faults cleared, and the round ends when the quota is
   back at 64 (after the hold-down).

Baseline, side by side in the same run: the same rounds with the service's quota
rebalancing off (`spec.quotas.enabled: false`), the Jobs submitted once both nodes
are quarantined. Kueue still sees 64 GPUs of quota in region one, so it admits them
there, onto the tainted nodes: the bench counts, on both sides, where the Jobs were
admitted and how many of their pods the scheduler placed on a node within 20 s.

Usage (binaries built, nothing else running on the machine):

    .venv/bin/python bench/bench_quota_failover.py [--rounds 10] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from kubernetes import client
from prometheus_api_client import PrometheusConnect

from gridloop import kube, versions
from gridloop.health.observed import TAINT_KEY
from gridloop.local import cluster, flags, ports, prometheus_config
from gridloop.local.state import State

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "cluster"))
from kueue_scenario import TeamQueues  # noqa: E402

BASE_PORT = 28500  # below the ephemeral port range (32768+); bench_health uses 28400
PYTHON = Path(sys.executable)
NAMESPACE = "bench-team"
QUOTA = {"us-east": 64, "eu-west": 32, "onprem-fra": 64}


def _policy(path: Path, rebalance: bool) -> Path:
    wide = {"maxNodes": 100, "maxPercent": 100}
    doc = {
        "apiVersion": "gridloop.io/v1alpha1",
        "kind": "HealthPolicy",
        "metadata": {"name": "bench"},
        "spec": {
            "scrapeInterval": prometheus_config.SCRAPE_INTERVAL,
            "release": {"holdDown": "5s"},
            # every round quarantines two nodes of one 8-node pool again: a short window
            # keeps the breaker and the quota removal cap from counting earlier rounds
            "limits": {"fleet": wide, "pool": wide, "window": "5s"},
            "quotas": {
                "enabled": rebalance,
                "maxRemoved": {"gpus": 1000, "percent": 100, "window": "5s"},
            },
        },
    }
    path.write_text(yaml.safe_dump(doc))
    return path


class Service:
    """The health service as its own process, as `gridloop local up` starts it."""

    def __init__(self, state: State, policy: Path, name: str) -> None:
        argv = flags.health(PYTHON, state.ports, state.kubeconfig, policy)
        self.log = open(state.dir / f"bench-health-{name}.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)
        self.log.close()


def _wait(check, what: str, timeout: float = 60.0, every: float = 0.05):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")


def _idle(core: client.CoreV1Api) -> list[str]:
    busy = {p.spec.node_name for p in core.list_namespaced_pod(NAMESPACE).items}
    nodes = core.list_node(label_selector="gridloop.io/site=us-east,gridloop.io/pool=h100")
    return sorted(n.metadata.name for n in nodes.items if n.metadata.name not in busy)


def _first_sample(prom: PrometheusConnect, nodes: set[str]) -> float | None:
    stamps = [
        float(r["value"][1])
        for r in prom.custom_query("timestamp(DCGM_FI_DEV_XID_ERRORS > 0)")
        if {r["metric"].get("Hostname"), r["metric"].get("hostname")} & nodes
    ]
    return min(stamps) if stamps else None


def _tainted(core: client.CoreV1Api, names: list[str]) -> bool:
    return all(any(t.key == TAINT_KEY for t in core.read_node(n).spec.taints or []) for n in names)


def _sim(state: State, *args: str) -> None:
    """`gridloop sim ...` as a user runs it."""
    argv = [str(PYTHON), "-m", "gridloop.cli", "sim", *args, "--state-dir", str(state.dir)]
    subprocess.run(argv, check=True, capture_output=True)


def _set_faults(state: State, nodes: list[str]) -> None:
    for node in nodes:
        _sim(state, "inject", "--node", node, "--gpu", "0", "--xid", "79")


def _clear_faults(state: State) -> None:
    _sim(state, "clear")


def one_round(
    state: State, team: TeamQueues, prom: PrometheusConnect, i: int, rebalance: bool
) -> dict[str, object]:
    core = client.CoreV1Api(kube.api_client(state.kubeconfig))
    failing = _wait(lambda: (lambda idle: idle if len(idle) == 2 else None)(_idle(core)), "2 idle")
    _set_faults(state, failing)
    t0 = _wait(lambda: _first_sample(prom, set(failing)), "the fault in Prometheus", 30)
    if rebalance:
        _wait(lambda: team.quota("us-east") == 48, "region one's quota lowered", 60)
    else:
        _wait(lambda: _tainted(core, failing), "both nodes quarantined", 60)
    lowered = time.time()
    jobs = [f"r{i}-{'on' if rebalance else 'off'}-{k}" for k in range(2)]
    for job in jobs:
        team.submit(job)
    placed = _wait(
        lambda: (lambda p: p if all(p.get(j) and p[j].flavor for j in jobs) else None)(
            team.placements()
        ),
        "the new Jobs admitted",
        60,
        every=0.02,
    )
    admitted = time.time()
    # flavors are bench-<site>-<pool>
    regions = sorted(placed[j].flavor.removeprefix("bench-").rsplit("-", 1)[0] for j in jobs)
    scheduled = _scheduled(core, jobs, within=20.0)
    for job in jobs:
        client.BatchV1Api(core.api_client).delete_namespaced_job(
            job, NAMESPACE, propagation_policy="Background"
        )
    _clear_faults(state)
    _wait(lambda: not _tainted(core, failing[:1]) and team.quota("us-east") == 64, "restore", 90)
    _wait(lambda: not any(j in team.placements() for j in jobs), "the Jobs gone", 60)
    result = {
        "failing": failing,
        "regions": regions,
        "quota_s" if rebalance else "quarantine_s": round(lowered - t0, 2),
        "admitted_s": round(admitted - t0, 2),
        "pods_scheduled": scheduled,
    }
    print(json.dumps(result), flush=True)
    return result


def _scheduled(core: client.CoreV1Api, jobs: list[str], within: float) -> int:
    """How many of the Jobs' pods the scheduler placed on a node within `within` s."""
    deadline, placed = time.monotonic() + within, 0
    while time.monotonic() < deadline:
        pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"job-name in ({','.join(jobs)})")
        placed = sum(1 for p in pods.items if p.spec.node_name)
        if placed == len(jobs):
            break
        time.sleep(0.2)
    return placed


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def run(workdir: Path, rounds: int) -> dict[str, object]:
    fleet = yaml.safe_load((REPO / "examples" / "fleets" / "default.yaml").read_text())
    fleet["kueue"] = {"enabled": True}
    fleet_file = workdir / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump(fleet))
    state_dir = workdir / "state"
    res = cluster.up(state_dir, fleet_file, BASE_PORT, say=lambda _m: None, health_service=False)
    state = res.state
    try:
        api = kube.api_client(state.kubeconfig)
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
        team = TeamQueues(api, NAMESPACE, "bench")
        team.create(QUOTA)
        prom = PrometheusConnect(f"http://{ports.LOOPBACK}:{state.ports.prometheus}")
        for k in range(6):
            team.submit(f"fill-{k}")
        _wait(lambda: len(_idle(client.CoreV1Api(api))) == 2, "six Jobs running", 60)
        out: dict[str, object] = {}
        for rebalance in (True, False):
            service = Service(
                state, _policy(workdir / f"p-{rebalance}.yaml", rebalance), str(rebalance)
            )
            try:
                time.sleep(5)
                out["rebalancing" if rebalance else "baseline"] = [
                    one_round(state, team, prom, i, rebalance) for i in range(rounds)
                ]
            finally:
                service.stop()
        return out
    finally:
        cluster.down(state_dir)


def summary(results: dict[str, object]) -> dict[str, object]:
    on = results["rebalancing"]
    off = results["baseline"]
    assert isinstance(on, list) and isinstance(off, list)
    quota = [r["quota_s"] for r in on]
    admit = [r["admitted_s"] for r in on]
    return {
        "rounds": len(on),
        "fault_to_quota_s": {"p50": statistics.median(quota), "p99": _pct(quota, 99)},
        "fault_to_admitted_elsewhere_s": {"p50": statistics.median(admit), "p99": _pct(admit, 99)},
        "rebalancing_jobs_by_region": _count(on),
        "baseline_jobs_by_region": _count(off),
        "rebalancing_pods_scheduled_within_20s": sum(r["pods_scheduled"] for r in on),
        "baseline_pods_scheduled_within_20s": sum(r["pods_scheduled"] for r in off),
        "jobs_per_side": 2 * len(on),
    }


def _count(rounds: list[dict[str, object]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rounds:
        for region in r["regions"]:  # type: ignore[attr-defined]
            out[region] = out.get(region, 0) + 1
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results: dict[str, object] = {
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores",
        "kubernetes": versions.get("kubernetes").version,
        "kueue": versions.get("kueue").version,
    }
    with tempfile.TemporaryDirectory(prefix="gridloop-bench-quota-") as tmp:
        results.update(run(Path(tmp), args.rounds))
    results["summary"] = summary(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results["summary"], indent=2))


if __name__ == "__main__":
    main()

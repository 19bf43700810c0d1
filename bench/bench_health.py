"""Benchmark: the GPU health service, from a fault's first Prometheus sample to a tainted node.

Everything is real but the GPUs: the local control plane with a generated fleet, the
simulated dcgm-exporters, Debian's Prometheus scraping every node's exporter, and the
health service as its own process, started as `gridloop local up` starts it. Prometheus
scrapes every `--scrape` seconds (default 15, the shipped policy's scrapeInterval; the
local cluster's 5 s would have the simulated exporters and Prometheus alone use up this
machine's two cores at 2,000 nodes, and the service would be measuring their queue).

1. Latency and throughput (`--nodes`, default 2,000 nodes = 16,000 GPUs), in rounds of
   `--failing` nodes (default 500) getting XID 79 on GPU 0 in one write of the faults
   file. A watch on the API server notes when each node first carries the quarantine
   taint; afterwards Prometheus is asked for the first raw sample of each node's XID
   series that shows 79. Latency = taint seen - that sample's timestamp (the scrape's
   start: it includes the scrape itself). The rounds, every one reported:
   - `unsettled`: the first, right after `local up` returned and the service answers;
   - once the cluster has settled (`settle`), Prometheus's CPU over 30 s with no health
     service, then with each configuration at its own pace on the healthy fleet
     (unless `--no-load-probe`): what the service's own reads cost Prometheus;
   - then the `--workers` configurations
     alternated (A B A B ...) `--rounds` times each: a worker count (16 as shipped; 1,
     one node action at a time, the baseline) cycling every second (the fast
     configuration, as `local up` runs it), `N@5` cycling every 5 s as the chart does
     (the fault events read alone every second between cycles, as shipped), `old:N` for
     another checkout's service (`--old-code`), or `pod` for the chart's Deployment with
     the chart's defaults (`--in-cluster`);
   - then (unless `--no-backlog`) each host-process configuration once more with the
     storm all in Prometheus before the service starts (a restart or failover in a storm):
     how fast it takes out a backlog, from its start (`backlog_round`). The other rounds'
     rate is bounded by the faults reaching Prometheus over a scrape interval;
   - then (unless `--no-slowed`) each once more while a second client loads Prometheus
     with heavy queries (`Loader`);
   - then (unless `--no-limited`) one round under the shipped breaker limits: at most
     as many nodes as they allow are taken out, the breaker trips, it is reset after.
   A new service process (or scaled-up Deployment) serves each round; the service itself
   releases the round's nodes afterwards (5 s hold-down), so later rounds reuse them.
   Breaker limits are raised for the run, so every fault is acted on. Each round also
   reports Prometheus's own query time and each cluster process's CPU.
2. One cycle's CPU time and the process's memory (`--cycle-nodes`, default 5,000 nodes
   = 40,000 GPUs): the service cycles over a healthy fleet every 5 s; its own metrics
   give the CPU time of each cycle, /proc gives its resident and peak memory. Here
   Prometheus scrapes every `--cycle-scrape` seconds (default 60): 1.35 million series
   every 15 s is more than Prometheus and the simulated exporters can take in on two
   cores, and the answers the service parses are the same size either way. Baseline in the
   same run: what reading the same data the plain way costs (the Python client's
   `list_node()` decoded into model objects, and every family's full, unfiltered
   vector from Prometheus), measured in a fresh process the same way.

Usage (binaries built, nothing else running on the machine):

    .venv/bin/python bench/bench_health.py [--nodes 2000] [--failing 500] [--rounds 3]
        [--workers 16 16@5 1 old:16 old:16@5 pod] [--old-code DIR] [--in-cluster] [--no-slowed]
        [--no-backlog] [--no-limited] [--no-load-probe]
        [--scrape 15] [--cycle-nodes 5000] [--cycle-scrape 60] [--logs DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

import yaml
from kubernetes import client, watch
from prometheus_api_client import PrometheusConnect

from gridloop import kube, versions
from gridloop.fleet import dump_fleet, generate_fleet, load_fleet, planned_nodes
from gridloop.health.listing import GPU_NODES
from gridloop.health.observed import STATE_LABEL, TAINT_KEY
from gridloop.health.plan import limit
from gridloop.local import cluster, flags, ports, prometheus_config
from gridloop.local.state import State
from gridloop.sim.faults import FaultSet
from gridloop.sim.injections import Injection
from gridloop.sim.storing import FAULTS_FILE, update_faults

BASE_PORT = 28400  # below the ephemeral port range (32768+)
PYTHON = Path(sys.executable)
LOGS: Path | None = None  # --logs: where each service's log is kept


HOLD_DOWN_S = 5  # the bench's release hold-down: a round's nodes come back for the next


def _policy(path: Path, nodes: int, scrape_s: int, shipped_limits: bool = False) -> Path:
    """The shipped defaults, with the breaker opened wide (unless `shipped_limits`), the
    run's scrape interval and a short hold-down (so the service itself releases a round's
    nodes for later rounds)."""
    wide: dict[str, object] = {"maxNodes": nodes, "maxPercent": 100}
    limits: dict[str, object] = {"fleet": wide, "pool": wide, "window": "30s"}
    if shipped_limits:
        limits = yaml.safe_load(cluster.default_health_policy().read_text())["spec"]["limits"]
    doc = {
        "apiVersion": "gridloop.io/v1alpha1",
        "kind": "HealthPolicy",
        "metadata": {"name": "bench"},
        "spec": {
            "scrapeInterval": f"{scrape_s}s",
            # every quarantine is acted on: at most the fleet in a window, and rounds reuse
            # nodes, so the window is shorter than the time between two rounds
            "limits": limits,
            "release": {"holdDown": f"{HOLD_DOWN_S}s"},
        },
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def _prometheus_settings(part: str, scrape_s: int) -> dict[str, str]:
    """Prometheus's global settings for a run, set before it starts (a reload while the
    cluster is young restarts every scrape loop, and the benchmark would measure that):
    the run's scrape interval, and with --logs, every query it answers with its timings."""
    settings = {"scrape_interval": f"{scrape_s}s", "evaluation_interval": f"{scrape_s}s"}
    if LOGS is not None:  # one JSON a line
        LOGS.mkdir(parents=True, exist_ok=True)
        settings["query_log_file"] = str(LOGS / f"prometheus-queries-{part}.log")
    return settings


class Served:
    """A health service the benchmark reads through its /metrics (`url`)."""

    url = ""
    name = "health service"

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        with urllib.request.urlopen(self.url, timeout=5) as resp:
            for line in resp.read().decode().splitlines():
                if line and not line.startswith("#"):
                    key, _, value = line.rpartition(" ")
                    out[key] = float(value)
        return out

    def wait_started(self, timeout: float = 60) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def check_alive(self) -> None:
        """Raise SystemExit if the service is gone for good (nothing to check by default)."""

    def wait_steady(self, timeout: float = 180) -> None:
        """Until it has cycled over fresh data without holding back, three times in a row."""
        deadline, good = time.monotonic() + timeout, 0
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                m = self.metrics()
            except OSError:
                m = {}
            holding = any(k.startswith("gridloop_health_holding{") and v for k, v in m.items())
            cycles = m.get("gridloop_health_cycle_seconds_count", 0)
            good = good + 1 if cycles and not holding else 0
            if good >= 3:
                return
            time.sleep(1)
        raise SystemExit(f"{self.name} never steady in {timeout}s")


class Service(Served):
    """The health service as its own process, with the arguments `gridloop local up` uses."""

    def __init__(
        self, state: State, policy: Path, workers: int, interval: float, code: Path | None = None
    ) -> None:
        argv = flags.health(PYTHON, state.ports, state.kubeconfig, policy)
        argv = [a for a in argv if not a.startswith("--interval")]
        argv += [f"--interval={interval}", f"--workers={workers}"]
        env = dict(os.environ)
        if code is None:
            argv.append("--log-cycles")
        else:  # another checkout's service (e.g. the code before a change), same Python
            roots = [code / "installer", code / "health", code / "dashboards"]
            env["PYTHONPATH"] = os.pathsep.join(str(r) for r in roots)
        name = f"bench-health-{'old-' if code else ''}{workers}.log"
        self.log = open(state.dir / name, "w")  # noqa: SIM115
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.url = f"http://{ports.LOOPBACK}:{state.ports.health}/metrics"
        self.name = f"health service (see {self.log.name})"

    def wait_started(self, timeout: float = 60) -> None:
        """Until it serves /metrics: the service has started, nothing more."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.metrics()
                return
            except OSError:
                time.sleep(0.2)
        raise SystemExit(f"health service never started in {timeout}s: see {self.log.name}")

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise SystemExit(f"health service exited {self.proc.returncode}: see {self.log.name}")

    def peak_rss_mib(self) -> tuple[int, int]:
        return memory_mib(str(self.proc.pid))

    def stop(self) -> None:
        """SIGTERM; the service finishes the cycle it is in (at 5,000 nodes on this machine,
        one can take a minute), so give it time, then kill it."""
        self.proc.terminate()
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()
        if LOGS is not None:  # the state directory goes with the run's cluster
            LOGS.mkdir(parents=True, exist_ok=True)
            shutil.copy(
                self.log.name, LOGS / f"{time.strftime('%H%M%S')}-{Path(self.log.name).name}"
            )


RELEASE = "gridloop-bench"  # --in-cluster: the chart's release and namespace
LEASE = "gridloop-health"


class PodService(Served):
    """The health service as the chart runs it (--in-cluster): its Deployment on the
    container node, gridloop's image, in-cluster config, reading Prometheus through the
    Service the chart's URL names. Scaled up for a round and down after it, so it never
    acts beside the host-process service."""

    def __init__(self, api: client.ApiClient, replicas: int) -> None:
        self.apps, self.core = client.AppsV1Api(api), client.CoreV1Api(api)
        self.leases = client.CoordinationV1Api(api)
        self.name = f"{RELEASE}-health"
        self._scale(replicas)

    def _scale(self, replicas: int) -> None:
        self.apps.patch_namespaced_deployment_scale(
            self.name, RELEASE, {"spec": {"replicas": replicas}}
        )

    def _leader(self) -> client.V1Pod | None:
        try:
            lease = self.leases.read_namespaced_lease(LEASE, RELEASE)
        except client.ApiException:
            return None
        try:
            pod = self.core.read_namespaced_pod(lease.spec.holder_identity or "-", RELEASE)
        except client.ApiException:
            return None
        return pod if pod.status.pod_ip and pod.status.phase == "Running" else None

    def wait_started(self, timeout: float = 120) -> None:
        """Until a replica leads and serves /metrics."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pod = self._leader()
            if pod is not None:
                self.url = f"http://{pod.status.pod_ip}:9464/metrics"
                self.pod = pod.metadata.name
                try:
                    self.metrics()
                    return
                except OSError:
                    pass
            time.sleep(0.5)
        raise SystemExit(f"no replica of {self.name} led within {timeout}s")

    def wait_steady(self, timeout: float = 180) -> None:
        self.wait_started()
        super().wait_steady(timeout)

    def stop(self) -> None:
        if LOGS is not None and getattr(self, "pod", None):
            LOGS.mkdir(parents=True, exist_ok=True)
            text = self.core.read_namespaced_pod_log(self.pod, RELEASE)
            (LOGS / f"{time.strftime('%H%M%S')}-pod-{self.pod}.log").write_text(text)
        self._scale(0)
        deadline = time.monotonic() + 120
        selector = "app.kubernetes.io/component=health"
        while self.core.list_namespaced_pod(RELEASE, label_selector=selector).items:
            if time.monotonic() > deadline:
                raise SystemExit(f"{self.name}'s pods still there after scaling to 0")
            time.sleep(1)
        # the next replicas have new names: no waiting out the old holder's lease
        with contextlib.suppress(client.ApiException):
            self.leases.delete_namespaced_lease(LEASE, RELEASE)


def install_chart(state: State, workdir: Path, fleet: dict, policy: Path) -> None:
    """The bundle installed with the local profile and only the health service on (the
    other components have nothing to do in this benchmark), scaled to 0 until a round
    wants it. Its policy is the run's; the rest is the chart's defaults: a cycle every 5 s,
    the fault events read alone every second between cycles, 1 CPU and 512 MiB."""
    from gridloop.bundle import bundling

    bundle = bundling.bundle(bundling.Request(out=workdir / "dist", skip=frozenset({"kaito"})))
    values = workdir / "bench-values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "fleet": fleet,
                "kueue": {"enabled": False},
                "kuberay": {"enabled": False},
                "kaito": {"enabled": False},
                "inference": {"enabled": False},
                "agentSandbox": {"enabled": False},
                "dashboards": {"enabled": False},
                "health": {
                    "replicas": 0,
                    "policy": policy.read_text(),
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                        "limits": {"cpu": "1", "memory": "512Mi"},
                    },
                },
            },
            sort_keys=False,
        )
    )
    done = subprocess.run(
        [str(PYTHON.parent / "gridloop"), "install", "--chart", str(bundle.folder),
         "--profile", "local", "-f", str(values), "--namespace", RELEASE, "--release",
         RELEASE, "--wait", "--timeout", "5m", "--kubeconfig", str(state.kubeconfig)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"gridloop install failed:\n{done.stdout}\n{done.stderr}")


class TaintWatch:
    """When each node first shows up quarantined (label and taint land in one patch)."""

    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        listed = self.core.list_node(label_selector=STATE_LABEL)
        self.before = {n.metadata.name for n in listed.items}
        self._rv = listed.metadata.resource_version
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        w = watch.Watch()
        try:
            for event in w.stream(
                self.core.list_node,
                label_selector=STATE_LABEL,
                resource_version=self._rv,
                timeout_seconds=600,
                deserialize=False,  # plain JSON: the bench should take as little CPU as it can
            ):
                now = time.time()
                node = event["object"]
                name = node["metadata"]["name"]
                taints = node.get("spec", {}).get("taints") or []
                if name not in self.seen and any(t["key"] == TAINT_KEY for t in taints):
                    self.seen[name] = now
                if self._stop.is_set():
                    w.stop()
        except Exception:
            if not self._stop.is_set():  # the cluster going down after the round is expected
                raise

    def wait_for(self, names: set[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not names <= self.seen.keys() and time.monotonic() < deadline:
            time.sleep(0.2)
        self._stop.set()


def first_fault_samples(prom: PrometheusConnect, names: set[str], since: float) -> dict[str, float]:
    """The timestamp of each node's first raw sample of XID 79 on GPU 0 after `since`."""
    span = int(time.time() - since) + 30
    out: dict[str, float] = {}
    for series in prom.custom_query(f'DCGM_FI_DEV_XID_ERRORS{{gpu="0"}}[{span}s]'):
        # `node`: the scrape's (the exporter's own host label varies with its version)
        host = series["metric"].get("node")
        if host in names:
            hits = [
                float(ts) for ts, v in series["values"] if float(v) == 79 and float(ts) >= since
            ]
            if hits:
                out[host] = min(hits)
    return out


def scrapes_done(
    prom: PrometheusConnect, samples: dict[str, float], since: float
) -> dict[str, float]:
    """When the scrape that brought each node's first fault sample had finished: the
    sample's timestamp (the scrape's start) plus that scrape's `scrape_duration_seconds`,
    which Prometheus records with the same timestamp. From then on a query can see it."""
    span = int(time.time() - since) + 30
    out: dict[str, float] = {}
    for series in prom.custom_query(f'scrape_duration_seconds{{job="dcgm-exporter"}}[{span}s]'):
        node = series["metric"].get("node")
        if node in samples:
            took = {round(float(ts), 3): float(v) for ts, v in series["values"]}
            duration = took.get(round(samples[node], 3))
            if duration is not None:
                out[node] = samples[node] + duration
    return out


def failed_scrapes(prom: PrometheusConnect, since: float) -> int:
    """How many exporter scrapes failed since `since` (`up` 0: a timeout, here)."""
    span = int(time.time() - since) + 1
    up = f'up{{job="{prometheus_config.EXPORTER_JOB}"}}[{span}s]'
    answer = prom.custom_query(f"sum(count_over_time({up}) - sum_over_time({up}))")
    return int(float(answer[0]["value"][1])) if answer else 0


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


HELD = ("all", "all-but-fault-events")  # gridloop_health_held_cycles_total's scopes


def _held(m: dict[str, float]) -> dict[str, float]:
    """Cycles held so far, by scope, from the service's metrics `m` (0 without the counter)."""
    return {k: m.get(f'gridloop_health_held_cycles_total{{scope="{k}"}}', 0.0) for k in HELD}


def _phases(m: dict[str, float]) -> dict[str, tuple[float, float]]:
    """Each cycle phase's (sum, count) so far, from the service's metrics `m`."""
    return {
        phase: (
            m.get(f'gridloop_health_cycle_phase_seconds_sum{{phase="{phase}"}}', 0.0),
            m.get(f'gridloop_health_cycle_phase_seconds_count{{phase="{phase}"}}', 0.0),
        )
        for phase in ("read", "plan", "act")
    }


def failure_round(
    state: State,
    api: client.ApiClient,
    prom: PrometheusConnect,
    names: list[str],
    service: Served,
) -> dict[str, object]:
    began = time.monotonic()
    before = service.metrics()
    phases_before, held_before = _phases(before), _held(before)
    taints = TaintWatch(api)
    chosen = set(names)
    injected = inject_xid_79(state, names)
    taints.wait_for(chosen, timeout=120 + len(names) / 5)
    time.sleep(1)  # the last samples are surely in Prometheus's answer by now
    samples = first_fault_samples(prom, chosen, injected - 1)
    latencies = [taints.seen[n] - samples[n] for n in names if n in taints.seen and n in samples]
    done = scrapes_done(prom, samples, injected - 1)
    failed = failed_scrapes(prom, injected - 1)
    from_done = [taints.seen[n] - done[n] for n in names if n in taints.seen and n in done]
    missing = sorted(chosen - taints.seen.keys())
    first = min(samples.values()) if samples else injected
    seen = sorted(taints.seen[n] for n in names if n in taints.seen)
    last = seen[-1] if seen else first
    # the fault reaches Prometheus spread over one scrape interval (each target has its own
    # scrape offset), so the overall rate is bounded by that; the peak one-second rate shows
    # how fast the service itself takes nodes out
    peak = max((sum(1 for t in seen if s <= t < s + 1) for s in seen), default=0)
    after = service.metrics()
    phases_after, held_after = _phases(after), _held(after)
    mean_phase = {
        p: round((phases_after[p][0] - phases_before[p][0]) / n, 2)
        for p in phases_after
        if (n := phases_after[p][1] - phases_before[p][1])
    }
    return {
        "failing": len(names),
        "tainted": len(chosen & taints.seen.keys()),
        "others_tainted": len(taints.seen.keys() - chosen),  # false positives, if any
        "missing": missing[:5],
        "p50_s": round(statistics.median(latencies), 2) if latencies else None,
        "p99_s": round(_pct(latencies, 99), 2) if latencies else None,
        "max_s": round(max(latencies), 2) if latencies else None,
        # the same, counted from when the scrape holding the fault had been written
        "in_prometheus_p50_s": round(statistics.median(from_done), 2) if from_done else None,
        "in_prometheus_p99_s": round(_pct(from_done, 99), 2) if from_done else None,
        "scrape_s_max": round(max(d - samples[n] for n, d in done.items()), 3) if done else None,
        "failed_scrapes": failed,  # exporter scrapes that failed (timed out) in the round
        "inject_to_first_sample_s": round(first - injected, 2),
        "nodes_per_s": round(len(latencies) / max(last - first, 1e-3), 1),
        "peak_nodes_per_s": peak,
        "cycle_phase_mean_s": mean_phase,
        # cycles that held everything, and that still acted on fresh fault events only
        "held_cycles": {k: int(held_after[k] - held_before[k]) for k in HELD},
        "_round_s": time.monotonic() - began,
    }


def inject_xid_79(state: State, names: list[str]) -> float:
    """XID 79 on GPU 0 of each of `names`, in one write of the faults file; returns when."""
    injected = time.time()
    gpus = {n: 8 for n in names}

    def inject(faults: FaultSet) -> FaultSet:
        for name in names:
            faults = faults.inject(gpus, Injection(node=name, gpu=0, xid=79), injected)
        return faults

    update_faults(state.dir / FAULTS_FILE, inject)
    return injected


def in_prometheus(prom: PrometheusConnect, names: list[str], injected: float) -> None:
    """Until Prometheus holds a fault sample of every one of `names`."""
    deadline = time.monotonic() + 120
    while len(first_fault_samples(prom, set(names), injected - 1)) < len(names):
        if time.monotonic() > deadline:
            raise SystemExit("the storm's faults never all reached Prometheus")
        time.sleep(1)


def backlog_round(
    state: State,
    api: client.ApiClient,
    prom: PrometheusConnect,
    names: list[str],
    start: Callable[[], Served],
) -> tuple[dict[str, object], Served]:
    """The storm is all in Prometheus before the service starts (a restart or a failover
    during a storm): how fast it takes out a backlog of `names`, from its start. The rate
    of the other rounds is bounded by the faults reaching Prometheus over a scrape
    interval; this one is the service's own."""
    began = time.monotonic()
    taints = TaintWatch(api)
    in_prometheus(prom, names, inject_xid_79(state, names))
    time.sleep(1)
    started = time.time()
    service = start()
    taints.wait_for(set(names), timeout=120 + len(names) / 5)
    seen = sorted(taints.seen[n] for n in names if n in taints.seen)
    peak = max((sum(1 for t in seen if s <= t < s + 1) for s in seen), default=0)
    first, last = (seen[0], seen[-1]) if seen else (started, started)
    return {
        "failing": len(names),
        "tainted": len(seen),
        "others_tainted": len(taints.seen.keys() - set(names)),
        "start_to_first_taint_s": round(first - started, 2),
        "start_to_last_taint_s": round(last - started, 2),
        "nodes_per_s": round(len(seen) / max(last - first, 1e-3), 1),
        "peak_nodes_per_s": peak,
        "_round_s": time.monotonic() - began,
    }, service


def limited_round(
    state: State,
    api: client.ApiClient,
    prom: PrometheusConnect,
    names: list[str],
    policy: Path,
    service: Served,
) -> dict[str, object]:
    """The storm under the shipped breaker limits (`policy`): the service takes out no more
    than they allow, trips the breaker, and taints nothing else. The caller resets the
    breaker (`gridloop health reset-breaker`) before, or the earlier rounds' quarantines
    would fill its window, and after, with this service stopped, as an operator would."""
    began = time.monotonic()
    spec = yaml.safe_load(policy.read_text())["spec"]["limits"]
    core = client.CoreV1Api(api)
    pools = {
        n.metadata.name: _pool(n.metadata.labels or {})
        for n in core.list_node(label_selector=GPU_NODES).items
    }
    taints = TaintWatch(api)
    in_prometheus(prom, names, inject_xid_79(state, names))
    time.sleep(5)  # every fault read by the service, and acted on or skipped
    taints.wait_for(set(), timeout=0)
    tainted = set(taints.seen)
    by_pool = per_pool(tainted, pools)
    fleet_max = limit(spec["fleet"]["maxNodes"], spec["fleet"]["maxPercent"], len(pools))
    tripped = service.metrics().get("gridloop_health_breaker_tripped", 0.0) == 1.0
    return {
        "failing": len(names),
        "tainted": len(tainted & set(names)),
        "others_tainted": len(tainted - set(names)),
        "fleet_limit": fleet_max,
        "pool_limit_nodes": spec["pool"]["maxNodes"],
        "most_in_one_pool": max(by_pool.values(), default=0),
        "breaker_tripped": tripped,
        "_round_s": time.monotonic() - began,
    }


def prometheus_load(
    state: State, workers: list[str], start: Callable[[str], Served], span_s: float = 30
) -> dict[str, float]:
    """Prometheus's CPU (cores) over `span_s` on the settled, healthy fleet: with no health
    service, then with each configuration at its own pace (the chart's pod too: Prometheus's
    CPU is what is measured). What the service's own reads cost Prometheus when nothing is
    failing."""
    none = Served()
    out = {"no service": _cpu_rate(state, none, span_s)}
    for w in workers:
        service = start(w)
        try:
            service.wait_steady()
            out[w] = _cpu_rate(state, none, span_s)
        finally:
            service.stop()
    return out


def _cpu_rate(state: State, service: Served, span_s: float) -> float:
    before = cpu_seconds(state, service).get("prometheus", 0.0)
    time.sleep(span_s)
    return round((cpu_seconds(state, service).get("prometheus", 0.0) - before) / span_s, 3)


def reset_breaker(state: State) -> None:
    """`gridloop health reset-breaker`: the breaker closed and its window emptied."""
    subprocess.run(
        [str(PYTHON.parent / "gridloop"), "health", "reset-breaker", "--kubeconfig",
         str(state.kubeconfig), "--namespace", prometheus_config.HEALTH_NAMESPACE],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip


def _pool(labels: dict[str, str]) -> str:
    return f"{labels.get('gridloop.io/site', '-')}/{labels.get('gridloop.io/pool', '-')}"


def per_pool(names: set[str], pools: dict[str, str]) -> dict[str, int]:
    """How many of `names` each pool has."""
    out: dict[str, int] = {}
    for name in names:
        out[pools.get(name, "-")] = out.get(pools.get(name, "-"), 0) + 1
    return out


def _start(
    workdir: Path, part: str, nodes: int, scrape_s: int, container_node: bool = False
) -> tuple[Path, Path, Path, cluster.UpResult]:
    """A generated fleet's cluster with exporters and Prometheus (no health service), the
    policy for the run, and Prometheus set to scrape every `scrape_s`; with
    `container_node`, a real node beside the simulated ones, for the chart's pods."""
    fleet_file = workdir / f"fleet-{nodes}.yaml"
    doc = generate_fleet(nodes)
    if container_node:
        doc["containerNodes"] = {"nodes": 1}
    fleet_file.write_text(dump_fleet(doc))
    state_dir = workdir / f"state-{part}"
    policy = _policy(workdir / f"policy-{part}.yaml", nodes, scrape_s)
    t0 = time.monotonic()
    res = cluster.up(
        state_dir,
        fleet_file,
        BASE_PORT,
        say=lambda _m: None,
        health_service=False,
        prometheus_settings=_prometheus_settings(part, scrape_s),
    )
    print(f"cluster of {nodes} nodes up in {time.monotonic() - t0:.1f}s", flush=True)
    return fleet_file, state_dir, policy, res


def settle(prom: PrometheusConnect, nodes: int, scrape_s: int, timeout: float = 600) -> float:
    """Until the cluster has settled: every exporter up, and the slowest scrape of the
    last interval within a quarter of the one before it (twice in a row). Returns how long
    that took."""
    began, deadline, last, steady = time.monotonic(), time.monotonic() + timeout, None, 0
    job = prometheus_config.EXPORTER_JOB

    def value(promql: str) -> float | None:
        answer = prom.custom_query(promql)
        return float(answer[0]["value"][1]) if answer else None

    while time.monotonic() < deadline:
        up = value(f'count(up{{job="{job}"}} == 1)') or 0
        slowest = value(f'max(max_over_time(scrape_duration_seconds{{job="{job}"}}[{scrape_s}s]))')
        if up >= nodes and slowest is not None and last is not None:
            steady = steady + 1 if abs(slowest - last) <= 0.25 * max(last, 0.1) else 0
            if steady >= 2:
                return time.monotonic() - began
        last = slowest
        time.sleep(scrape_s)
    raise SystemExit(f"the cluster never settled in {timeout:.0f}s")


class Loader:
    """A second Prometheus client loading it with heavy queries (bounded: `threads` at a
    time, each with a timeout, until stopped), to measure a storm on a slowed Prometheus."""

    QUERY = "quantile_over_time(0.99, DCGM_FI_DEV_GPU_TEMP[10m])"

    def __init__(self, url: str, threads: int = 2, timeout_s: float = 20) -> None:
        self.url, self.timeout_s = url, timeout_s
        self._stop = threading.Event()
        self.took: list[float] = []
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        for t in self._threads:
            t.start()

    def _run(self) -> None:
        query = urllib.parse.urlencode({"query": self.QUERY, "timeout": f"{self.timeout_s:.0f}s"})
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                with urllib.request.urlopen(
                    f"{self.url}/api/v1/query?{query}", timeout=self.timeout_s + 5
                ) as resp:
                    resp.read()
            except OSError:
                pass
            self.took.append(time.monotonic() - began)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        for t in self._threads:
            t.join(self.timeout_s + 10)
        return {
            "heavy_queries": len(self.took),
            "heavy_query_p50_s": round(statistics.median(self.took), 2) if self.took else 0,
        }


def engine_seconds(url: str) -> float:
    """Prometheus's own query engine time so far, every client's (its /metrics), seconds;
    NaN when a busy Prometheus does not answer in time."""
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=30) as resp:
            text = resp.read().decode()
    except OSError:
        return math.nan
    return sum(
        float(line.rpartition(" ")[2])
        for line in text.splitlines()
        if line.startswith("prometheus_engine_query_duration_seconds_sum")
        and 'slice="inner_eval"' in line
    )


TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(state: State, service: Served) -> dict[str, float]:
    """CPU time used so far by each of the cluster's processes and the host-process service
    (/proc/PID/stat utime + stime, children not included), seconds."""
    pids = {p.name: p.pid for p in state.processes}
    if isinstance(service, Service):
        pids["health-service"] = service.proc.pid
    out = {}
    for name, pid in pids.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        out[name] = (int(fields[11]) + int(fields[12])) / TICKS
    return out


def release_round(state: State, api: client.ApiClient, names: list[str], timeout: float) -> float:
    """Clear the round's faults and wait until the service has released every node (its
    own hold-down and release): the nodes serve again in a later round."""
    t0 = time.monotonic()
    update_faults(state.dir / FAULTS_FILE, lambda f: _cleared(f, names))
    core = client.CoreV1Api(api)
    left = set(names)
    while left and time.monotonic() - t0 < timeout:
        time.sleep(2)
        tainted = {
            n["metadata"]["name"]
            for n in json.loads(
                core.list_node(label_selector=STATE_LABEL, _preload_content=False).data
            )["items"]
            if any(t["key"] == TAINT_KEY for t in (n.get("spec") or {}).get("taints") or [])
        }
        left &= tainted
    if left:
        raise SystemExit(
            f"{len(left)} nodes not released in {timeout:.0f}s, e.g. {sorted(left)[:3]}"
        )
    return time.monotonic() - t0


def _cleared(faults: FaultSet, names: list[str]) -> FaultSet:
    for name in names:
        faults = faults.clear(node=name)
    return faults


FAST_INTERVAL_S = 1.0  # the fast configuration's cycle interval (local up's)


def configuration(spec: str, old_code: Path | None) -> tuple[int, Path | None, float]:
    """`16` (this checkout's service, 16 workers, a cycle every second), `16@5` (a cycle
    every 5 s, the chart's default, the fault events read alone every second between
    cycles as shipped) or `old:16` (--old-code's): the worker count, the code, the
    interval."""
    spec, _, interval = spec.partition("@")
    code, _, workers = spec.rpartition(":")
    if code and old_code is None:
        raise SystemExit(f"--workers {spec}: needs --old-code")
    return int(workers), old_code if code else None, float(interval or FAST_INTERVAL_S)


def run_latency(
    workdir: Path,
    nodes: int,
    failing: int,
    workers: list[str],
    scrape_s: int,
    rounds: int,
    slowed: bool,
    old_code: Path | None = None,
    in_cluster: bool = False,
    backlog: bool = True,
    limited: bool = True,
    load_probe: bool = True,
) -> dict:
    """Rounds of `failing` nodes at once: the first right after the cluster and the service
    start (nothing settled), then, once the cluster has settled, the `workers`
    configurations alternated (A B A B ...) `rounds` times each, then (`slowed`) each once
    more with Prometheus loaded by a second client. A new service process every round;
    every round is reported."""
    fleet_file, state_dir, policy, res = _start(workdir, "latency", nodes, scrape_s, in_cluster)
    api = kube.api_client(res.state.kubeconfig)
    if in_cluster:
        t0 = time.monotonic()
        install_chart(res.state, workdir, yaml.safe_load(fleet_file.read_text()), policy)
        print(f"chart installed in {time.monotonic() - t0:.0f}s", flush=True)
        with contextlib.suppress(client.ApiException):  # the host process's namespace
            client.CoreV1Api(api).create_namespace(
                {"metadata": {"name": prometheus_config.HEALTH_NAMESPACE}}
            )
    limited_policy = _policy(workdir / "policy-limited.yaml", nodes, scrape_s, shipped_limits=True)
    prom_url = f"http://{ports.LOOPBACK}:{res.state.ports.prometheus}"
    prom = PrometheusConnect(url=prom_url)
    pool = [p.name for p in planned_nodes(load_fleet(fleet_file))]
    random.Random(7).shuffle(pool)  # rounds take turns over every pool's nodes
    plan = [("unsettled", workers[0])]
    plan += [("settled", w) for _ in range(rounds) for w in workers]
    plan += [("backlog", w) for w in workers if w != "pod"] if backlog else []
    plan += [("slowed", w) for w in workers] if slowed else []
    plan += [("limited", "16")] if limited else []
    out: dict[str, object] = {"nodes": nodes, "scrape_interval_s": scrape_s, "rounds": []}

    def launch(w: str) -> Served:
        if w == "pod":
            return PodService(api, replicas=2)
        count, code, interval = configuration(w, old_code)
        return Service(res.state, policy, workers=count, interval=interval, code=code)

    settled_after = None
    try:
        for kind, w in plan:
            if kind != "unsettled" and settled_after is None:
                settled_after = settle(prom, nodes, scrape_s)
                out["settled_after_s"] = round(settled_after, 1)
                print(f"cluster settled after {settled_after:.0f}s more", flush=True)
                if load_probe:
                    load = prometheus_load(res.state, workers, launch)
                    out["prometheus_cores_healthy_fleet"] = load
                    print(f"Prometheus's CPU, cores: {json.dumps(load)}", flush=True)
            names, pool = pool[:failing], pool[failing:]
            service: Served

            def report(
                row: dict[str, object], kind: str = kind, w: str = w, names: list[str] = names
            ) -> None:
                """Say the round, then wait for the service to release its nodes."""
                row["round_s"] = round(row.pop("_round_s"), 1)  # type: ignore[arg-type]
                row.update({"kind": kind, "workers": w})
                print(json.dumps(row), flush=True)
                out["rounds"].append(row)  # type: ignore[union-attr]
                row["released_in_s"] = round(
                    release_round(res.state, api, names, 120 + failing / 5), 1
                )

            if kind == "limited":
                reset_breaker(res.state)  # the earlier rounds' quarantines out of its window
                service = Service(res.state, limited_policy, workers=16, interval=FAST_INTERVAL_S)
                try:
                    service.wait_steady()
                    row = limited_round(res.state, api, prom, names, limited_policy, service)
                finally:
                    service.stop()
                reset_breaker(res.state)
                service = launch("16")  # the usual service releases the round's nodes
                try:
                    service.wait_steady()
                    report(row)
                    pool += names
                finally:
                    service.stop()
                continue
            if kind == "backlog":
                row, service = backlog_round(
                    res.state,
                    api,
                    prom,
                    names,
                    lambda w=w: launch(w),  # type: ignore[misc]
                )
                try:
                    report(row)
                    pool += names
                finally:
                    service.stop()
                continue
            service = launch(w)
            loader = None
            try:
                if kind == "unsettled":
                    service.wait_started()
                else:
                    service.wait_steady()
                engine, cpu = engine_seconds(prom_url), cpu_seconds(res.state, service)
                loader = Loader(prom_url) if kind == "slowed" else None
                if loader:
                    time.sleep(5)  # its queries under way
                row = failure_round(res.state, api, prom, names, service)
                after = cpu_seconds(res.state, service)
                # where the machine's two cores went during the round, busiest first
                used = {k: round(after[k] - cpu[k], 1) for k in after if k in cpu}
                row["cpu_s"] = dict(sorted(used.items(), key=lambda kv: -kv[1])[:6])
                spent = engine_seconds(prom_url) - engine
                row["prometheus_engine_s"] = None if math.isnan(spent) else round(spent, 1)
                if loader:
                    row.update(loader.stop())
                    loader = None
                report(row)
                pool += names
            finally:
                if loader:
                    loader.stop()
                service.stop()
    finally:
        cluster.down(state_dir, purge=True)
    return out


def plain_read(kubeconfig: str, prometheus: str, families: str) -> None:
    """The baseline, in its own process: read the cycle's data the plain way, report cost."""
    api = kube.api_client(Path(kubeconfig))
    prom = PrometheusConnect(url=prometheus)
    queries = json.loads(families)
    cpu, wall = time.process_time(), time.monotonic()
    nodes = client.CoreV1Api(api).list_node(label_selector=GPU_NODES).items
    answers = {f: prom.custom_query(q) for f, q in queries.items()}
    samples = sum(len(a) for a in answers.values())
    print(
        json.dumps(
            {
                "cpu_s": round(time.process_time() - cpu, 2),
                "wall_s": round(time.monotonic() - wall, 2),
                "nodes": len(nodes),
                "samples": samples,
                "peak_rss_mib": memory_mib("self")[1],
            }
        )
    )


def memory_mib(pid: str) -> tuple[int, int]:
    """(resident, peak resident) of a process, MiB, from /proc/PID/status."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) // 1024
    return fields["VmRSS"], fields["VmHWM"]


def _unfiltered(policy_path: Path) -> dict[str, str]:
    """The same families as the service asks for, without the filters: every GPU's series."""
    from gridloop.health.policy_loading import load_policy
    from gridloop.health.signals import PRESENCE, queries

    out = {}
    for family, promql in queries(load_policy(policy_path), prometheus_config.EXPORTER_JOB).items():
        for suffix in (" > 0", " != 0"):
            promql = promql.removesuffix(suffix)
        if family == "presence":  # the plain way: both halves, each in full
            out["up"] = f'up{{job="{prometheus_config.EXPORTER_JOB}"}}'
            out["present"] = PRESENCE
        else:
            out[family] = promql
    return out


def run_cycle(workdir: Path, nodes: int, scrape_s: int, cycles: int) -> dict:
    _fleet, state_dir, policy, res = _start(workdir, "cycle", nodes, scrape_s)
    try:
        service = Service(res.state, policy, workers=16, interval=5.0)
        try:
            service.wait_steady(timeout=600)
            per_cycle, start, began = [], service.metrics(), time.monotonic()
            while len(per_cycle) < cycles:
                before = service.metrics()["gridloop_health_cycle_seconds_count"]
                time.sleep(0.5)
                m = service.metrics()
                if m["gridloop_health_cycle_seconds_count"] > before:
                    per_cycle.append(m["gridloop_health_cycle_cpu_seconds"])
            end, span = service.metrics(), time.monotonic() - began
            rss, hwm = service.peak_rss_mib()
        finally:
            service.stop()
        n = (
            end["gridloop_health_cycle_seconds_count"]
            - start["gridloop_health_cycle_seconds_count"]
        )
        wall = end["gridloop_health_cycle_seconds_sum"] - start["gridloop_health_cycle_seconds_sum"]
        plain = subprocess.run(
            [
                str(PYTHON),
                __file__,
                "--plain-read",
                str(res.state.kubeconfig),
                f"http://{ports.LOOPBACK}:{res.state.ports.prometheus}",
                json.dumps(_unfiltered(policy)),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        baseline = json.loads(plain.stdout.strip().splitlines()[-1])
    finally:
        cluster.down(state_dir, purge=True)
    return {
        "nodes": nodes,
        "gpus": nodes * 8,
        "scrape_interval_s": scrape_s,
        "cycles": len(per_cycle),
        "cycle_cpu_s_p50": round(statistics.median(per_cycle), 3),
        "cycle_cpu_s_max": round(max(per_cycle), 3),
        "cycle_wall_s_mean": round(wall / max(n, 1), 3),
        # everything the process did meanwhile, the node watch between cycles included
        "process_cpu_s_per_s": round(
            (end["process_cpu_seconds_total"] - start["process_cpu_seconds_total"]) / span, 3
        ),
        "rss_mib": rss,
        "peak_rss_mib": hwm,
        "plain_read": baseline,
    }


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--plain-read":
        plain_read(*sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--failing", type=int, default=500, help="nodes failing at once")
    parser.add_argument(
        "--workers",
        nargs="+",
        default=["16", "1"],
        help="configurations, alternated: workers (a cycle every second), workers@5 (every "
        "5 s, the chart's pace), old:workers for --old-code's service, or pod (with "
        "--in-cluster: the chart's Deployment with its defaults, 2 replicas, 16 workers)",
    )
    parser.add_argument(
        "--in-cluster",
        action="store_true",
        help="add a container node and install the chart's health service (`pod`)",
    )
    parser.add_argument(
        "--old-code",
        type=Path,
        help="another checkout (e.g. `git worktree add` of the code before)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="settled rounds per configuration")
    parser.add_argument(
        "--no-slowed", action="store_true", help="skip the rounds on a loaded Prometheus"
    )
    parser.add_argument(
        "--no-backlog", action="store_true", help="skip the rounds with the storm in first"
    )
    parser.add_argument(
        "--no-limited", action="store_true", help="skip the round under the shipped limits"
    )
    parser.add_argument(
        "--no-load-probe",
        action="store_true",
        help="skip measuring Prometheus's CPU with and without each service, once settled",
    )
    parser.add_argument("--scrape", type=int, default=15, help="scrape interval, seconds")
    parser.add_argument("--cycle-nodes", type=int, default=5000, help="0: skip")
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument(
        "--cycle-scrape",
        type=int,
        default=60,
        help="scrape interval at --cycle-nodes, seconds (1.35M series on this machine's cores)",
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--logs", type=Path, help="keep each health service's log here")
    args = parser.parse_args()
    global LOGS
    LOGS = args.logs
    results: dict[str, object] = {
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores",
        "kubernetes": versions.get("kubernetes").version,
    }
    with tempfile.TemporaryDirectory(prefix="gridloop-bench-health-") as tmp:
        if args.nodes:
            results["latency"] = run_latency(
                Path(tmp),
                args.nodes,
                args.failing,
                args.workers,
                args.scrape,
                args.rounds,
                not args.no_slowed,
                args.old_code,
                args.in_cluster,
                not args.no_backlog,
                not args.no_limited,
                not args.no_load_probe,
            )
        if args.cycle_nodes:
            results["cycle"] = run_cycle(
                Path(tmp), args.cycle_nodes, args.cycle_scrape, args.cycles
            )
            print(json.dumps(results["cycle"]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

"""The health service's own metrics, and the /metrics, /healthz, /readyz server.

Its decisions are visible here (and as Events): actions by type and whether
they were applied, planned only or failed, nodes quarantined, breaker state,
cycle time (wall and CPU), the age of the newest DCGM sample, why a cycle held
back, the DCGM-named series it ignored, and the process's own CPU and memory.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gridloop.health.observed import IGNORED_REASONS


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.actions = Counter(
            "gridloop_health_actions",
            "Actions planned, by type and outcome",
            ["action", "outcome"],
            registry=r,
        )
        self.quarantined = Gauge(
            "gridloop_health_quarantined_nodes",
            "Nodes currently quarantined by gridloop",
            registry=r,
        )
        self.breaker = Gauge(
            "gridloop_health_breaker_tripped", "1 while the circuit breaker is tripped", registry=r
        )
        self.cycle = Histogram(
            "gridloop_health_cycle_seconds",
            "Wall time of one cycle",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.phase = Histogram(
            "gridloop_health_cycle_phase_seconds",
            "Wall time of each part of a cycle: read (nodes and Prometheus), plan "
            "(breaker record and plan()), act (node patches and Events), quota (Kueue "
            "queues read, quota planned and patched)",
            ["phase"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.cycle_cpu = Gauge(
            "gridloop_health_cycle_cpu_seconds",
            "CPU time the last cycle took (all its threads; not the node watch's)",
            registry=r,
        )
        self.staleness = Gauge(
            "gridloop_health_prometheus_staleness_seconds",
            "Age of the newest DCGM sample (-1: none)",
            registry=r,
        )
        self.hold = Gauge(
            "gridloop_health_holding", "1 while the last cycle held back", ["reason"], registry=r
        )
        self.held = Counter(
            "gridloop_health_held_cycles",
            "Cycles that held back: scope=all (no quarantine, no release) or "
            "scope=all-but-fault-events (fresh fault events still quarantined)",
            ["scope"],
            registry=r,
        )
        self.ignored = Counter(
            "gridloop_health_ignored_series",
            "DCGM-named series read as no node's, counted once per background read, by "
            "reason: other-scrape (another scrape job's or namespace's, never read), no-node "
            "(the exporter's without the node label its scrape attaches), host-mismatch (its "
            "own host label names another node than the one its target ran on)",
            ["reason"],
            registry=r,
        )
        for reason in IGNORED_REASONS:  # each at 0 from the start: rate() and alerts see it
            self.ignored.labels(reason)
        self.dry_run = Gauge("gridloop_health_dry_run", "1 when running in dry-run", registry=r)
        self.leader = Gauge("gridloop_health_leader", "1 while this replica leads", registry=r)
        # the quota rebalancer (quotas.py)
        self.flavor_gpus = Gauge(
            "gridloop_health_flavor_gpus",
            "GPUs on the nodes behind each Kueue ResourceFlavor, by state (total, healthy)",
            ["flavor", "state"],
            registry=r,
        )
        self.quota = Gauge(
            "gridloop_health_quota_gpus",
            "Each ClusterQueue's GPU nominalQuota per flavor after the cycle, and the quota "
            "it was configured with",
            ["cluster_queue", "flavor", "kind"],
            registry=r,
        )
        self.quota_changes = Counter(
            "gridloop_health_quota_changes",
            "GPU quota changes: lowered, restored, capped (a decrease cut short by the "
            "window limit); outcome applied, planned (dry-run) or failed",
            ["change", "outcome"],
            registry=r,
        )
        self.quota_removed = Gauge(
            "gridloop_health_quota_removed_gpus",
            "GPU quota taken away within the removal window",
            registry=r,
        )
        self.quota_held = Gauge(
            "gridloop_health_quota_holding",
            "1 per reason the rebalancer is changing no quota, or some of it: the health "
            "plan holds, the breaker is tripped, Kueue cannot be read or is not installed, "
            "a ClusterQueue it cannot read",
            ["reason"],
            registry=r,
        )
        ProcessCollector(registry=r)  # process_cpu_seconds_total, process_resident_memory_bytes

    def expose(self) -> bytes:
        return generate_latest(self.registry)


def serve(
    metrics: Metrics,
    host: str,
    port: int,
    ready: Callable[[], bool],
    alive: Callable[[], bool] = lambda: True,
) -> ThreadingHTTPServer:
    """Serve in a daemon thread; returns the server (its `server_port` is the bound port).
    `/healthz` is 503 once `alive()` says the loop is stuck (liveness.py)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                body, ctype, code = metrics.expose(), CONTENT_TYPE_LATEST, 200
            elif self.path == "/healthz":
                ok = alive()
                body, ctype, code = (
                    (b"ok\n" if ok else b"stuck: no cycle for too long\n"),
                    "text/plain",
                    (200 if ok else 503),
                )
            elif self.path == "/readyz":
                ok = ready()
                body, ctype, code = (
                    (b"ok\n" if ok else b"not ready\n"),
                    "text/plain",
                    (200 if ok else 503),
                )
            else:
                body, ctype, code = b"not found\n", "text/plain", 404
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return  # scrapes every few seconds would drown the log

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="health-http", daemon=True).start()
    return server

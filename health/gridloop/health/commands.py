"""`gridloop health run | reset-breaker | status`: the service's command line.

The policy file is read and validated before anything talks to a cluster or
to Prometheus: a bad file is one line naming the field, exit code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from kubernetes import client

from gridloop import kube, names, resources
from gridloop.errors import UsageError
from gridloop.health import breaker as breakers
from gridloop.health import prometheus_access
from gridloop.health import status_configmap as status
from gridloop.health.acting import EVENT_WORKERS, WORKERS
from gridloop.health.policy import Policy
from gridloop.health.policy_loading import load_policy

DEFAULT_POLICY = resources.health_policy()
# seconds between the light reads of the fault events between cycles (service.run); a fault
# waits for one of these, not for the interval
FAULT_READ_S = 1.0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    health = sub.add_parser("health", help="the GPU health service")
    verbs = health.add_subparsers(dest="verb", metavar="VERB", required=True)

    def common(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument(
            "--kubeconfig",
            type=Path,
            default=None,
            help="default: in-cluster, else $KUBECONFIG or ~/.kube/config",
        )
        p.add_argument(
            "--namespace",
            default=names.DEFAULT_NAMESPACE,
            help="where the status ConfigMap and the Lease live",
        )
        return p

    p = common(verbs.add_parser("run", help="watch DCGM metrics and quarantine failing nodes"))
    p.add_argument("--prometheus-url", required=True)
    prometheus_access.add_flags(p)
    p.add_argument("--config", type=Path, default=DEFAULT_POLICY, help="the health policy file")
    p.add_argument(
        "--exporter-job",
        default=names.EXPORTER_JOB,
        help="Prometheus job of the DCGM exporter targets",
    )
    p.add_argument(
        "--exporter-namespace",
        default="",
        help="the namespace label of the DCGM exporter targets (an in-cluster Prometheus "
        "attaches it); default: the job alone",
    )
    p.add_argument("--interval", type=float, default=5.0, help="seconds between cycles")
    p.add_argument(
        "--fault-read-interval",
        type=float,
        default=FAULT_READ_S,
        help="seconds between reads of the fault events alone (XID, ECC DBE, failed scrapes) "
        "between cycles; one that shows a new event starts a cycle at once "
        f"(default {FAULT_READ_S:g}; at most --interval)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=WORKERS,
        help=f"node actions carried out at once (default {WORKERS}; 1: one at a time)",
    )
    p.add_argument(
        "--listen", default="127.0.0.1:9464", help="address for /metrics, /healthz and /readyz"
    )
    p.add_argument(
        "--identity",
        default=f"{socket.gethostname()}-{os.getpid()}",
        help="this replica's name in the leader Lease",
    )
    p.add_argument("--no-leader-election", action="store_true")
    p.add_argument("--dry-run", action="store_true", help="decide and log, change nothing")
    p.add_argument("--once", action="store_true", help="run one cycle, print it, exit")
    p.add_argument(
        "--log-cycles",
        action="store_true",
        help="log one line per cycle: its phases, the baseline's age, what it planned",
    )
    p.set_defaults(func=cmd_run)

    p = common(verbs.add_parser("reset-breaker", help="resume quarantines after a trip"))
    p.set_defaults(func=cmd_reset)

    p = common(verbs.add_parser("status", help="breaker state and the last cycle"))
    p.add_argument("--output", "-o", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_status)


def api_client(kubeconfig: Path | None, connections: int = 0) -> client.ApiClient:
    """In a pod, its ServiceAccount; elsewhere `kubeconfig`, $KUBECONFIG or ~/.kube/config
    (also what the chart's hook pods use: gridloop.selftest, gridloop.hooks). One
    connection per concurrent node action and Event sender, so none is opened and thrown
    away."""
    return kube.api_client(kubeconfig, pool=connections + 2, named="--kubeconfig")


def _listen(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"--listen {value!r}: expected HOST:PORT")
    return host, int(port)


def cmd_run(args: argparse.Namespace) -> int:
    policy: Policy = load_policy(args.config)  # before any cluster call
    if args.dry_run:
        policy = dataclasses.replace(policy, dry_run=True)
    if args.interval <= 0:
        raise UsageError(f"--interval {args.interval}: must be positive")
    if args.fault_read_interval <= 0:
        raise UsageError(f"--fault-read-interval {args.fault_read_interval}: must be positive")
    if not 1 <= args.workers <= 256:
        raise UsageError(f"--workers {args.workers}: must be between 1 and 256")
    host, port = _listen(args.listen)

    from gridloop.health.leadership import Lease
    from gridloop.health.metrics import Metrics, serve
    from gridloop.health.reading import connect
    from gridloop.health.service import HealthService
    from gridloop.health.watching import NodeCache

    access = prometheus_access.from_args(args, args.prometheus_url)
    api = api_client(args.kubeconfig, connections=args.workers + EVENT_WORKERS)
    prom = connect(args.prometheus_url, access)
    metrics = Metrics()
    log = _logger()
    nodes = None if args.once else NodeCache(api, policy.opt_out_label, log).start()
    service = HealthService(
        api,
        prom,
        policy,
        args.namespace,
        args.exporter_job,
        metrics,
        log=log,
        workers=args.workers,
        nodes=nodes,
        background_events=not args.once,
        instance=args.identity,
        log_cycles=args.log_cycles,
        background_baseline=not args.once,
        exporter_namespace=args.exporter_namespace,
    )
    if args.once:
        report = service.cycle()
        for o in report.outcomes:
            print(f"{type(o.action).__name__}: {o.action} applied={o.applied} {o.detail}")
        return 0
    ready = threading.Event()
    from gridloop.health import liveness

    def alive() -> bool:
        return liveness.alive(service.heartbeat, time.monotonic(), args.interval)

    try:
        server = serve(metrics, host, port, ready.is_set, alive)
    except OSError as err:
        raise UsageError(f"--listen {args.listen}: {err.strerror}") from err
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    lease = None if args.no_leader_election else Lease(api, args.namespace, args.identity)
    log(
        f"health service started: {args.prometheus_url}, every {args.interval}s "
        f"(fault events every {min(args.fault_read_interval, args.interval):g}s), "
        f"metrics on {host}:{server.server_port}, dry-run={policy.dry_run}"
    )
    ready.set()
    service.run(args.interval, stop, lease, args.fault_read_interval)
    server.shutdown()
    return 0


def _logger() -> Callable[[str], None]:
    def log(message: str) -> None:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        print(f"{stamp} {message}", flush=True)

    return log


def cmd_reset(args: argparse.Namespace) -> int:
    core = client.CoreV1Api(api_client(args.kubeconfig))
    before = status.load(core, args.namespace).breaker
    # the quota removal window is cleared too: the operator has looked at the fleet
    status.save(core, args.namespace, breakers.reset(before), {"resetBy": "gridloop health"})
    print(
        "breaker reset"
        + (f" (was tripped: {before.reason})" if before.tripped else " (it was not tripped)")
    )
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    core = client.CoreV1Api(api_client(args.kubeconfig))
    saved = status.load(core, args.namespace)
    b = saved.breaker
    removed = sum(r.gpus for r in saved.removals)
    info = {
        "breaker": {"tripped": b.tripped, "reason": b.reason, "quarantinesInWindow": len(b.recent)},
        "quota": {"gpusRemovedInWindow": removed},
    }
    if args.output == "json":
        print(json.dumps(info, indent=2))
    else:
        state = f"TRIPPED ({b.reason})" if b.tripped else "closed"
        print(f"breaker: {state}; quarantines in window: {len(b.recent)}")
        print(f"quota: {removed} GPUs of quota taken away in the window")
    return 0

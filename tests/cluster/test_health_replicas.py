"""The health service as processes: Prometheus going away, and two replicas with one leader."""

from __future__ import annotations

import dataclasses
import re
import signal
import subprocess
import sys
import textwrap
import urllib.request

import pytest
from kubernetes import client

from gridloop.health.policy import Policy
from gridloop.health.reading import connect
from gridloop.health.service import HealthService
from gridloop.local import processes

# the control plane, kwok and the GPU-health processes: no container node needed
pytestmark = [pytest.mark.cluster, pytest.mark.kwok_cluster]

POLICY_YAML = textwrap.dedent("""\
    apiVersion: gridloop.io/v1alpha1
    kind: HealthPolicy
    spec:
      scrapeInterval: 5s
      release: {holdDown: 3s}
      limits:
        fleet: {maxNodes: 50, maxPercent: 100}
        pool: {maxNodes: 50, maxPercent: 100}
    """)


def _quarantine_events(local_cluster, node: str) -> int:
    return len(
        local_cluster.core.list_namespaced_event(
            "default", field_selector=f"involvedObject.name={node},reason=GPUQuarantined"
        ).items
    )


def test_prometheus_stopped_mid_run_means_zero_actions_then_it_resumes(
    local_cluster, namespace, sim, eventually, tainted, settle
):
    state = local_cluster.state
    prom_proc = next(p for p in state.processes if p.name == "prometheus")
    url = f"http://127.0.0.1:{state.ports.prometheus}"
    policy = dataclasses.replace(Policy(), hold_down_s=3.0, scrape_interval_s=5.0)
    service = HealthService(
        local_cluster.api,
        connect(url),
        policy,
        namespace,
        log=lambda _m: None,
    )
    settle(service)

    processes.stop(prom_proc)
    try:
        sim("--node", "us-east-h100-006", "--gpu", "0", "--xid", "79")
        reports = [service.cycle() for _ in range(3)]
        assert all(r.held and "cannot read Prometheus" in r.held for r in reports)
        assert all(len(r.outcomes) == 1 for r in reports)  # the Hold, and nothing else
        assert tainted() == set()
        held = service.metrics.hold.collect()[0].samples
        assert [s.labels["reason"] for s in held if s.value == 1] == ["cannot read Prometheus"]
    finally:
        restarted = processes.start(
            "prometheus", list(prom_proc.argv), state.dir / "logs" / "prometheus.log", state.dir
        )
        state.processes[state.processes.index(prom_proc)] = restarted
        state.save()
    eventually(
        lambda: service.cycle() and "us-east-h100-006" in tainted(),
        "the quarantine once Prometheus is back",
        60,
    )


def _replica(local_cluster, namespace: str, policy_file, name: str, log):
    argv = [
        sys.executable,
        "-m",
        "gridloop.cli",
        "health",
        "run",
        f"--kubeconfig={local_cluster.kubeconfig}",
        f"--prometheus-url=http://127.0.0.1:{local_cluster.state.ports.prometheus}",
        f"--config={policy_file}",
        f"--namespace={namespace}",
        "--interval=1",
        "--listen=127.0.0.1:0",  # a fixed port may be some connection's ephemeral port
        f"--identity={name}",
    ]
    out = log.open("w")
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)


def _is_leader(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            return b"gridloop_health_leader 1.0" in resp.read()
    except OSError:
        return False


def test_two_replicas_one_leader_and_a_failover_without_duplicate_actions(
    local_cluster, namespace, sim, eventually, tmp_path, tainted
):
    policy_file = tmp_path / "health.yaml"
    policy_file.write_text(POLICY_YAML)
    logs = {n: tmp_path / f"{n}.log" for n in ("replica-a", "replica-b")}
    procs = {n: _replica(local_cluster, namespace, policy_file, n, log) for n, log in logs.items()}

    def metrics_port(name: str) -> int | None:
        found = re.search(r"metrics on 127\.0\.0\.1:(\d+)", logs[name].read_text())
        return int(found.group(1)) if found else None

    replicas = {
        n: eventually(lambda n=n: metrics_port(n), f"{n} to serve metrics", 30) for n in logs
    }
    coord = client.CoordinationV1Api(local_cluster.api)
    try:

        def leader() -> str | None:
            try:
                return coord.read_namespaced_lease(
                    "gridloop-health", namespace
                ).spec.holder_identity
            except client.ApiException:
                return None

        first = eventually(leader, "a replica to take the lease", 30)
        follower = next(n for n in replicas if n != first)
        eventually(
            lambda: _is_leader(replicas[first]) and not _is_leader(replicas[follower]),
            "exactly one replica to report itself leader",
            15,
        )

        sim("--node", "us-east-h100-004", "--gpu", "1", "--xid", "79")
        eventually(lambda: "us-east-h100-004" in tainted(), "quarantine", 30)

        procs[first].send_signal(signal.SIGKILL)
        procs[first].wait()
        sim("--node", "us-east-h100-003", "--gpu", "1", "--xid", "79")
        eventually(
            lambda: leader() == follower,
            f"the follower to take over ({(tmp_path / f'{follower}.log').read_text()})",
            40,
        )
        eventually(lambda: "us-east-h100-003" in tainted(), "quarantine", 30)

        assert _quarantine_events(local_cluster, "us-east-h100-004") == 1
        assert _quarantine_events(local_cluster, "us-east-h100-003") == 1
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(timeout=15)

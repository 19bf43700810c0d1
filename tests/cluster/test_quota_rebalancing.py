"""Kueue quota follows healthy GPUs: real Kueue, real Prometheus, the real health service.

Each test gives a team a ClusterQueue over three pools in failover order (region one's
H100s, region two's H100s, the on-prem A100s: kueue_scenario.py), runs a HealthService
(the real code, in this process, in a thread like the deployed loop) against the local
cluster's Prometheus and the chart's Kueue pod (installed for the module), and submits
8-GPU Jobs that Kueue admits or keeps pending for real. Simulated pods run for an hour,
so the quota they hold stays held.
"""

from __future__ import annotations

import dataclasses
import socket
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from fleet_reset import SCRAPE_S
from kueue_scenario import POLICY, QUOTA, TeamQueues

from gridloop.health import status_configmap as status
from gridloop.health.observed import Breaker
from gridloop.health.queues import CONFIGURED, MANUAL
from gridloop.health.reading import connect
from gridloop.health.service import HealthService
from gridloop.sim.faults import FaultSet
from gridloop.sim.injections import Injection
from gridloop.sim.storing import FAULTS_FILE, update_faults

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("kueue_platform")]


def _service(local_cluster, namespace, policy=POLICY, url=None) -> HealthService:
    url = url or f"http://127.0.0.1:{local_cluster.state.ports.prometheus}"
    return HealthService(local_cluster.api, connect(url), policy, namespace, log=print)


@pytest.fixture
def team(local_cluster, namespace) -> Iterator[TeamQueues]:
    queues = TeamQueues(local_cluster.api, namespace, f"qt{uuid.uuid4().hex[:4]}")
    yield queues
    queues.delete()


@pytest.fixture
def cordon(local_cluster) -> Iterator[Callable[[str], None]]:
    """Cordon a node as a person would; uncordoned again after the test."""
    done: list[str] = []

    def cordon_node(name: str) -> None:
        local_cluster.core.patch_node(name, {"spec": {"unschedulable": True}})
        done.append(name)

    yield cordon_node
    for name in done:
        local_cluster.core.patch_node(name, {"spec": {"unschedulable": False}})


def _fault_visible(local_cluster, nodes: set[str], since: float) -> float:
    """When Prometheus first showed XID 79 on every one of `nodes` (epoch seconds): the
    latest of their first raw samples after `since`. Prometheus scrapes each node's
    exporter at its own offset within the interval, so two nodes can be a scrape apart."""
    prom = connect(f"http://127.0.0.1:{local_cluster.state.ports.prometheus}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        span = int(time.time() - since) + 10
        first: dict[str, float] = {}
        for series in prom.custom_query(f"DCGM_FI_DEV_XID_ERRORS[{span}s]"):
            host = series["metric"].get("Hostname") or series["metric"].get("hostname")
            hits = [float(t) for t, v in series["values"] if float(v) == 79 and float(t) >= since]
            if host in nodes and hits:
                first[host] = min([*hits, first.get(host, float("inf"))])
        if set(first) == nodes:
            return max(first.values())
        time.sleep(0.2)
    pytest.fail(f"no XID 79 sample for each of {sorted(nodes)} in Prometheus within 30s")


def _xid_79(local_cluster, nodes: list[str]) -> None:
    """XID 79 on GPU 0 of each node at once, as `gridloop sim inject` writes it."""
    at = time.time()

    def inject(faults: FaultSet) -> FaultSet:
        for node in nodes:
            faults = faults.inject({n: 8 for n in nodes}, Injection(node, gpu=0, xid=79), at)
        return faults

    update_faults(local_cluster.state.dir / FAULTS_FILE, inject)


def _jobs_by_node(local_cluster, namespace: str) -> dict[str, str]:
    """node -> the team's Job whose pod runs there."""
    return {
        p.spec.node_name: p.metadata.labels["job-name"]
        for p in local_cluster.core.list_namespaced_pod(namespace).items
        if p.spec.node_name
    }


def _idle_nodes(local_cluster, namespace: str, site: str, pool: str) -> list[str]:
    """The site's nodes running none of the team's pods."""
    core = local_cluster.core
    busy = {p.spec.node_name for p in core.list_namespaced_pod(namespace).items}
    selector = f"gridloop.io/site={site},gridloop.io/pool={pool}"
    return sorted(
        n.metadata.name
        for n in core.list_node(label_selector=selector).items
        if n.metadata.name not in busy
    )


def _fill(team: TeamQueues, prefix: str, count: int, site: str) -> None:
    names = [f"{prefix}-{i}" for i in range(count)]
    for name in names:
        team.submit(name)
    placed = team.wait_placed(names)
    assert {n: p.flavor for n, p in placed.items()} == {n: team.flavor_of(site) for n in names}


def test_a_region_losing_gpus_loses_their_quota_so_work_falls_over_and_comes_back(
    local_cluster, namespace, team, sim, eventually, settle, tainted, looping, gridloop
):
    service = _service(local_cluster, namespace)
    settle(service)
    team.create(QUOTA)
    looping(service)

    # region one full: eight 8-GPU jobs, one on each of its eight nodes
    _fill(team, "us-east", 8, "us-east")
    eventually(lambda: len(_jobs_by_node(local_cluster, namespace)) == 8, "8 pods scheduled")
    running = _jobs_by_node(local_cluster, namespace)
    failing = sorted(running)[:2]

    # two of its nodes lose a GPU each (XID 79: fallen off the bus), which ends the jobs
    # running there (here the test ends them, then writes both faults at once; `sim`
    # clears them after the test)
    killed = [running[node] for node in failing]
    team.finish(killed)
    injected = time.time()
    _xid_79(local_cluster, failing)
    fault_seen = _fault_visible(local_cluster, set(failing), injected)
    eventually(lambda: team.quota("us-east") == 48, "us-east's quota to drop by 16 GPUs", 30)
    assert set(failing) <= tainted()
    # 48 of us-east's 64 configured GPUs are in use: without the lowered quota Kueue would
    # admit the next jobs there, onto the two tainted nodes
    team.submit("after-fault-0")
    team.submit("after-fault-1")
    placed = team.wait_placed(["after-fault-0", "after-fault-1"])
    admitted = time.time()
    assert {p.flavor for p in placed.values()} == {team.flavor_of("eu-west")}
    print(
        f"fault visible in Prometheus to the Jobs admitted in eu-west: {admitted - fault_seen:.1f}s"
    )
    assert admitted - fault_seen <= 10, f"{admitted - fault_seen:.1f}s from fault to admission"
    assert team.quota("eu-west") == 32 and team.quota("onprem-fra") == 64

    # region two fills up too: the next job goes on-prem
    _fill(team, "eu-west", 2, "eu-west")
    _fill(team, "spill", 1, "onprem-fra")

    # the faults clear: after the hold-down the nodes and their quota come back
    gridloop("sim", "clear", "--state-dir", str(local_cluster.state.dir))
    eventually(
        lambda: team.quota("us-east") == 64,
        "us-east's quota restored",
        timeout=3 * SCRAPE_S + POLICY.hold_down_s + 10,
    )
    assert not set(failing) & tainted()
    assert CONFIGURED not in (team.cluster_queue()["metadata"].get("annotations") or {})
    _fill(team, "back", 2, "us-east")

    # nothing lost: every job still there is admitted or pending with a reason from Kueue,
    # and the only ones gone are the two the fault killed
    placements = team.placements()
    assert sorted(placements) == sorted(set(team.submitted) - set(killed))
    assert all(p.flavor or p.reason for p in placements.values())
    assert sum(1 for p in placements.values() if p.flavor) == len(team.submitted) - 2


def test_with_prometheus_unreachable_quotas_do_not_move(
    local_cluster, namespace, team, cordon, eventually
):
    team.create(QUOTA)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    blind = _service(local_cluster, namespace, url=f"http://127.0.0.1:{closed}")
    node = _idle_nodes(local_cluster, namespace, "us-east", "h100")[0]
    cordon(node)  # eight GPUs out of service, for everyone to see but Prometheus

    for _ in range(3):
        assert blind.cycle().held
    assert team.quota("us-east") == 64
    exposed = blind.metrics.expose().decode()
    assert 'gridloop_health_quota_holding{reason="cannot read Prometheus"} 1.0' in exposed

    # the same cordon, seen with Prometheus answering, does move it: the test can fail
    seeing = _service(local_cluster, namespace)
    eventually(lambda: seeing.cycle() and team.quota("us-east") == 56, "quota lowered by 8")


def test_a_tripped_breaker_freezes_quotas_until_it_is_reset(
    local_cluster, namespace, team, cordon, eventually, gridloop
):
    team.create(QUOTA)
    service = _service(local_cluster, namespace)
    status.save(local_cluster.core, namespace, Breaker(tripped=True, reason="test"), {})
    cordon(_idle_nodes(local_cluster, namespace, "us-east", "h100")[0])

    for _ in range(3):
        service.cycle()
    assert team.quota("us-east") == 64

    reset = gridloop(
        "health",
        "reset-breaker",
        "--namespace",
        namespace,
        "--kubeconfig",
        str(local_cluster.kubeconfig),
    )
    assert reset.returncode == 0, reset.stderr
    eventually(lambda: service.cycle() and team.quota("us-east") == 56, "quota lowered by 8")


def test_an_operator_s_manual_quota_is_kept_through_a_fault_and_a_recovery(
    local_cluster, namespace, team, sim, eventually, settle, tainted, gridloop
):
    service = _service(local_cluster, namespace)
    settle(service)
    manual = f"{team.flavor_of('us-east')}=40"
    team.create(QUOTA, annotations={MANUAL: manual})
    eventually(lambda: service.cycle() and team.quota("us-east") == 40, "the manual quota")

    node = _idle_nodes(local_cluster, namespace, "us-east", "h100")[0]
    sim("--node", node, "--gpu", "2", "--xid", "79")
    eventually(lambda: service.cycle() and node in tainted(), f"{node} quarantined", 30)
    for _ in range(2):
        service.cycle()
    assert team.quota("us-east") == 40

    gridloop("sim", "clear", "--state-dir", str(local_cluster.state.dir))
    eventually(
        lambda: service.cycle() and node not in tainted(),
        f"{node} released",
        timeout=3 * SCRAPE_S + POLICY.hold_down_s + 10,
    )
    assert team.quota("us-east") == 40
    assert team.cluster_queue()["metadata"]["annotations"][MANUAL] == manual


def test_dry_run_says_what_it_would_change_and_changes_nothing(
    local_cluster, namespace, team, cordon, eventually
):
    team.create(QUOTA)
    said: list[str] = []
    dry = HealthService(
        local_cluster.api,
        connect(f"http://127.0.0.1:{local_cluster.state.ports.prometheus}"),
        dataclasses.replace(POLICY, dry_run=True),
        namespace,
        log=said.append,
    )
    cordon(_idle_nodes(local_cluster, namespace, "us-east", "h100")[0])

    planned = f"quota lowered {team.queue}/{team.flavor_of('us-east')} (dry-run)"
    eventually(lambda: dry.cycle() and any(line.startswith(planned) for line in said), planned)

    assert team.quota("us-east") == 64
    assert CONFIGURED not in (team.cluster_queue()["metadata"].get("annotations") or {})
    events = local_cluster.core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={team.queue}"
    )
    assert events.items == []

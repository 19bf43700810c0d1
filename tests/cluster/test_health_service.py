"""The health service end to end: simulated dcgm-exporters -> real Prometheus -> nodes.

Each test drives its own HealthService (the real code, in this process) with a
short hold-down and its own namespace for the status ConfigMap, against the
cluster's real Prometheus, which scrapes the simulated exporters every 5 s.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time

import pytest
from fleet_reset import QUICK_POLICY, SCRAPE_S
from prometheus_api_client import PrometheusConnect

from gridloop.health import status_configmap as status
from gridloop.health.actions import Hold, Quarantine, Skip, Warn
from gridloop.health.policy import Limits
from gridloop.health.reading import connect
from gridloop.health.service import HealthService

# the control plane, kwok and the GPU-health processes: no container node needed
pytestmark = [pytest.mark.cluster, pytest.mark.kwok_cluster]

POLICY = QUICK_POLICY
NODE = "eu-west-a100-002"


def _service(local_cluster, namespace, policy=POLICY, url=None) -> HealthService:
    url = url or f"http://127.0.0.1:{local_cluster.state.ports.prometheus}"
    return HealthService(
        local_cluster.api,
        connect(url),
        policy,
        namespace,
        log=lambda _m: None,
    )


def test_xid_79_quarantines_that_node_within_two_scrape_intervals_and_nothing_else(
    local_cluster, namespace, sim, eventually, tainted, settle
):
    service = _service(local_cluster, namespace)
    settle(service)
    assert tainted() == set()

    injected = time.monotonic()
    sim("--node", NODE, "--gpu", "3", "--xid", "79")
    eventually(
        lambda: service.cycle() and NODE in tainted(),
        f"{NODE} to be quarantined",
        timeout=2 * SCRAPE_S + 3,
    )
    took = time.monotonic() - injected

    node = local_cluster.core.read_node(NODE)
    assert node.spec.unschedulable is True
    assert "xid-79 on GPU 3" in node.metadata.annotations["health.gridloop.io/reason"]
    assert tainted() == {NODE}
    assert took <= 2 * SCRAPE_S + 3


def _cycles(service: HealthService) -> int:
    """How many cycles the service has completed (its own histogram's count)."""
    samples = service.metrics.cycle.collect()[0].samples
    return int(next(s.value for s in samples if s.name.endswith("_count")))


def test_between_cycles_a_new_fault_event_starts_the_next_cycle_and_a_quiet_read_none(
    local_cluster, namespace, sim, eventually, tainted, settle
):
    # cycles ten minutes apart: only the light fault read between them (every second) can
    # take the node out before the test's deadline, and a read with nothing new acts not
    service = _service(local_cluster, namespace)
    settle(service)
    stop = threading.Event()
    runner = threading.Thread(target=service.run, args=(600.0, stop, None, 1.0), daemon=True)
    runner.start()
    try:
        eventually(lambda: _cycles(service) == 1, "the first cycle", 30)
        time.sleep(2 * SCRAPE_S)  # reads every second, nothing new in them
        assert _cycles(service) == 1

        sim("--node", NODE, "--gpu", "3", "--xid", "79")
        eventually(lambda: NODE in tainted(), f"{NODE} quarantined", timeout=2 * SCRAPE_S + 5)
        # the cycle that quarantined it (2, started by the read that showed the fault) is
        # followed at once by one more, by design (a storm's next nodes wait for a read, not
        # an interval: service.run), and then quiet reads start none
        eventually(lambda: _cycles(service) >= 3, "the cycle after the quarantine", 10)
        time.sleep(2 * SCRAPE_S)
        assert _cycles(service) == 3
        assert tainted() == {NODE}
    finally:
        stop.set()
        runner.join(30)
    assert not runner.is_alive()


def test_an_exporter_outage_warns_and_quarantines_nothing(
    local_cluster, namespace, sim, eventually, tainted, settle
):
    service = _service(local_cluster, namespace)
    settle(service)
    sim("--node", NODE, "--exporter-down")

    def warned() -> bool:
        return any(
            isinstance(o.action, Warn) and o.action.node == NODE for o in service.cycle().outcomes
        )

    eventually(warned, "a warning about the down exporter", timeout=3 * SCRAPE_S)
    assert tainted() == set()


def test_a_quarantined_node_whose_scrape_fails_is_an_exporter_down_not_a_healthy_node(
    local_cluster, namespace, sim, eventually, tainted, settle
):
    # the service takes Prometheus to scrape every minute, so it trusts its background read
    # (up: 1) for that long: the failed scrape is known from the cycle's own read alone
    minute = dataclasses.replace(POLICY, scrape_interval_s=60.0)
    service = _service(local_cluster, namespace, policy=minute)
    settle(service)
    sim("--node", NODE, "--gpu", "0", "--xid", "79")
    eventually(lambda: service.cycle() and NODE in tainted(), "quarantine", timeout=3 * SCRAPE_S)

    sim("--node", NODE, "--exporter-down")  # the exporter answers 503: its XID series go stale
    prom = PrometheusConnect(url=f"http://127.0.0.1:{local_cluster.state.ports.prometheus}")
    eventually(
        lambda: prom.custom_query(f'up{{node="{NODE}"}} == 0'),
        "the failed scrape in Prometheus",
        timeout=3 * SCRAPE_S,
    )
    kept = service.slow.answers()
    assert not isinstance(kept, str) and kept.exporter_up.get(NODE) is True  # from before
    actions = [o.action for o in service.cycle().outcomes]

    # not marked healthy (its hold-down would start): the node's one action is the warning
    assert [a for a in actions if getattr(a, "node", None) == NODE] == [
        Warn(NODE, "DCGM exporter is down: GPU health unknown, not acting")
    ]
    assert NODE in tainted()


def test_a_node_is_released_after_the_hold_down_once_its_gpu_is_healthy(
    local_cluster, namespace, sim, eventually, gridloop, tainted, settle
):
    service = _service(local_cluster, namespace)
    settle(service)
    sim("--node", NODE, "--gpu", "1", "--row-remap-failure")
    eventually(
        lambda: service.cycle() and NODE in tainted(),
        "quarantine",
        timeout=3 * SCRAPE_S,
    )

    gridloop("sim", "clear", "--state-dir", str(local_cluster.state.dir), "--node", NODE)

    eventually(
        lambda: service.cycle() and NODE not in tainted(),
        "release",
        timeout=3 * SCRAPE_S + POLICY.hold_down_s,
    )
    assert not local_cluster.core.read_node(NODE).spec.unschedulable


def test_prometheus_unreachable_means_no_action_and_says_why(
    local_cluster, namespace, sim, tainted
):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    sim("--node", NODE, "--gpu", "0", "--xid", "79")

    service = _service(local_cluster, namespace, url=f"http://127.0.0.1:{closed}")
    report = service.cycle()

    assert [type(o.action) for o in report.outcomes] == [Hold]
    assert report.held and "cannot read Prometheus" in report.held
    assert tainted() == set()
    held = service.metrics.held.labels
    assert (held("all")._value.get(), held("all-but-fault-events")._value.get()) == (1, 0)


def _everything_but_status(local_cluster) -> dict[str, object]:
    """Nodes as the health service could change them (kwok's heartbeats only touch status)."""
    api = local_cluster.api
    out = {}
    for node in local_cluster.core.list_node().items:
        plain = api.sanitize_for_serialization(node)
        meta = {
            k: v
            for k, v in plain["metadata"].items()
            if k not in ("resourceVersion", "managedFields")
        }
        out[node.metadata.name] = (meta, plain["spec"])
    return out


def test_dry_run_over_a_fault_storm_leaves_every_node_byte_for_byte_unchanged(
    local_cluster, namespace, sim, eventually, tainted
):
    storm = sorted(n.metadata.name for n in local_cluster.core.list_node().items)[:6]
    for node in storm:
        sim("--node", node, "--xid", "79")
    dry = _service(local_cluster, namespace, dataclasses.replace(POLICY, dry_run=True))
    before = _everything_but_status(local_cluster)

    def would_quarantine_all() -> bool:
        planned = {o.action.node for o in dry.cycle().outcomes if isinstance(o.action, Quarantine)}
        return planned == set(storm)

    eventually(would_quarantine_all, "dry-run to plan every quarantine", 3 * SCRAPE_S)
    assert _everything_but_status(local_cluster) == before
    written = {
        cm.metadata.name for cm in local_cluster.core.list_namespaced_config_map(namespace).items
    }
    assert status.NAME not in written  # not even the status record


def _quarantined_soon(service, tainted, node, eventually) -> None:
    eventually(
        lambda: service.cycle() and node in tainted(),
        f"{node} to be quarantined",
        timeout=3 * SCRAPE_S,
    )


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param(("--gpu", "5", "--ecc-dbe"), id="ecc-double-bit"),
        pytest.param(("--gpu", "5", "--row-remap-failure"), id="row-remap-failure"),
        pytest.param(("--gpu", "5", "--vanish"), id="gpu-fell-off-the-bus"),
    ],
)
def test_memory_and_bus_faults_quarantine(
    local_cluster, namespace, sim, eventually, fault, tainted, settle
):
    service = _service(local_cluster, namespace)
    settle(service)
    sim("--node", NODE, *fault)
    _quarantined_soon(service, tainted, NODE, eventually)
    assert tainted() == {NODE}


def test_an_application_xid_once_is_not_a_quarantine(
    local_cluster, namespace, sim, eventually, tainted, settle
):
    service = _service(local_cluster, namespace)
    settle(service)
    fresh = "us-east-h100-007"  # no other test injects here: its XID history is empty
    sim("--node", fresh, "--gpu", "2", "--xid", "13")

    # three scrape intervals later the XID is in Prometheus and nothing was done
    deadline = time.monotonic() + 3 * SCRAPE_S
    while time.monotonic() < deadline:
        service.cycle()
        time.sleep(0.5)
    prom = PrometheusConnect(url=f"http://127.0.0.1:{local_cluster.state.ports.prometheus}")
    seen = prom.custom_query(f'DCGM_FI_DEV_XID_ERRORS{{node="{fresh}",gpu="2"}}')
    assert seen and seen[0]["value"][1] == "13"
    reasons = {
        n: local_cluster.core.read_node(n).metadata.annotations.get("health.gridloop.io/reason")
        for n in tainted()
    }
    assert reasons == {}


def test_a_node_cordoned_by_hand_is_untouched_and_an_opted_out_node_too(
    local_cluster, namespace, sim, eventually, tainted, settle
):
    cordoned, exempt = "eu-west-h100-000", "eu-west-h100-001"
    core = local_cluster.core
    core.patch_node(cordoned, {"spec": {"unschedulable": True}})
    core.patch_node(exempt, {"metadata": {"labels": {POLICY.opt_out_label: "true"}}})
    try:
        service = _service(local_cluster, namespace)
        settle(service)
        for node in (cordoned, exempt, NODE):
            sim("--node", node, "--gpu", "0", "--xid", "79")
        _quarantined_soon(service, tainted, NODE, eventually)

        assert tainted() == {NODE}
        assert not (core.read_node(exempt).spec.unschedulable)
        assert not [
            k
            for k in core.read_node(cordoned).metadata.annotations or {}
            if k.startswith("health.gridloop.io/")
        ]
    finally:
        core.patch_node(cordoned, {"spec": {"unschedulable": False}})
        core.patch_node(exempt, {"metadata": {"labels": {POLICY.opt_out_label: None}}})


def test_a_manual_uncordon_is_respected_until_a_new_fault(
    local_cluster, namespace, sim, eventually, tainted, settle
):
    service = _service(local_cluster, namespace)
    settle(service)
    sim("--node", NODE, "--gpu", "4", "--xid", "79")
    _quarantined_soon(service, tainted, NODE, eventually)

    local_cluster.core.patch_node(NODE, {"spec": {"unschedulable": False}})
    eventually(
        lambda: service.cycle() and NODE not in tainted(),
        "gridloop to stand down",
        timeout=2 * SCRAPE_S,
    )
    for _ in range(5):  # the same fault, still reported, does not bring it back
        service.cycle()
    assert NODE not in tainted()

    sim("--node", NODE, "--gpu", "6", "--row-remap-failure")
    _quarantined_soon(service, tainted, NODE, eventually)


def test_restarting_the_service_mid_incident_repeats_nothing(
    local_cluster, namespace, sim, eventually, tainted, settle
):
    first = _service(local_cluster, namespace)
    settle(first)
    sim("--node", NODE, "--gpu", "3", "--xid", "79")
    _quarantined_soon(first, tainted, NODE, eventually)

    restarted = _service(local_cluster, namespace)  # a new process knows only the cluster
    actions = [o.action for _ in range(3) for o in restarted.cycle().outcomes]

    assert not [a for a in actions if isinstance(a, Quarantine)]
    events = local_cluster.core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={NODE},reason=GPUQuarantined"
    ).items
    assert len([e for e in events if e.metadata.creation_timestamp]) >= 1


def test_a_fault_storm_in_one_pool_trips_the_breaker_and_a_reset_resumes(
    local_cluster, namespace, sim, eventually, gridloop, tainted, settle
):
    pool = [f"onprem-fra-a100-{i:03d}" for i in range(8)]  # 8 nodes; 60% is 5
    limits = Limits(
        fleet_max_nodes=50, fleet_max_percent=100, pool_max_nodes=2, pool_max_percent=100
    )
    service = _service(local_cluster, namespace, dataclasses.replace(POLICY, limits=limits))
    settle(service)
    for node in pool[:5]:
        sim("--node", node, "--gpu", "1", "--xid", "79")

    eventually(
        lambda: service.cycle() and status.load(local_cluster.core, namespace).breaker.tripped,
        "the breaker to trip",
        timeout=3 * SCRAPE_S,
    )
    for _ in range(3):
        service.cycle()

    assert len(tainted() & set(pool)) == 2
    assert "pool onprem-fra/a100" in status.load(local_cluster.core, namespace).breaker.reason
    events = local_cluster.core.list_namespaced_event(
        namespace, field_selector="reason=GPUQuarantineBreakerTripped"
    ).items
    assert events
    assert service.metrics.breaker._value.get() == 1

    reset = gridloop(
        "health",
        "reset-breaker",
        "--kubeconfig",
        str(local_cluster.kubeconfig),
        "--namespace",
        namespace,
    )
    assert reset.returncode == 0 and "was tripped" in reset.stdout
    # quarantines resume: a fault in another pool is taken out; the pool's three others
    # wait, since two of its nodes, its limit, are out, and nothing trips again
    other = "us-east-h100-004"
    sim("--node", other, "--gpu", "0", "--xid", "79")
    eventually(lambda: service.cycle() and other in tainted(), f"{other} quarantined", 3 * SCRAPE_S)
    waiting = [o.action for o in service.cycle().outcomes if isinstance(o.action, Skip)]
    assert sorted(a.node for a in waiting) == sorted(set(pool[:5]) - tainted()), waiting
    assert all("pool onprem-fra/a100 has 2 of 2 nodes quarantined" in a.reason for a in waiting)
    assert len(tainted() & set(pool)) == 2
    assert not status.load(local_cluster.core, namespace).breaker.tripped


def test_a_flapping_gpu_is_quarantined_once_and_not_released_while_it_flaps(
    local_cluster, namespace, sim, eventually, gridloop, tainted, settle
):
    # a hold-down longer than a scrape interval, so a returning fault is seen within it
    policy = dataclasses.replace(POLICY, hold_down_s=3 * SCRAPE_S)
    service = _service(local_cluster, namespace, policy)
    settle(service)
    state, node = str(local_cluster.state.dir), "us-east-h100-001"  # no other test uses it

    def released_events() -> int:
        return len(
            local_cluster.core.list_namespaced_event(
                "default", field_selector=f"involvedObject.name={node},reason=GPUReleased"
            ).items
        )

    before = released_events()
    sim("--node", node, "--gpu", "7", "--xid", "79")
    _quarantined_soon(service, tainted, node, eventually)

    def healthy_since() -> str | None:
        notes = local_cluster.core.read_node(node).metadata.annotations or {}
        return notes.get("health.gridloop.io/healthy-since")

    for _ in range(2):  # clear, the hold-down starts; the fault returns, it starts over
        gridloop("sim", "clear", "--state-dir", state, "--node", node)
        eventually(
            lambda: service.cycle() and healthy_since(), "the hold-down to start", 3 * SCRAPE_S
        )
        sim("--node", node, "--gpu", "7", "--xid", "79")
        eventually(
            lambda: service.cycle() and not healthy_since(), "the hold-down to reset", 3 * SCRAPE_S
        )
        assert node in tainted()

    assert released_events() == before
    gridloop("sim", "clear", "--state-dir", state, "--node", node)
    eventually(
        lambda: service.cycle() and node not in tainted(),
        "release once it is stable",
        3 * SCRAPE_S + policy.hold_down_s + 5,
    )

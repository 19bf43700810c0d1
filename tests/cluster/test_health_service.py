"""The health service end to end: simulated dcgm-exporters -> real Prometheus -> nodes.

Each test drives its own HealthService (the real code, in this process) with a
short hold-down and its own namespace for the status ConfigMap, against the
cluster's real Prometheus, which scrapes the simulated exporters every 5 s.
"""

from __future__ import annotations

import dataclasses
import socket
import time

import pytest
from prometheus_api_client import PrometheusConnect

from gridloop.health import status
from gridloop.health.actions import Hold, Quarantine, Warn
from gridloop.health.observed import STATE_LABEL, TAINT_KEY
from gridloop.health.policy import Limits, Policy
from gridloop.health.service import HealthService
from gridloop.local.flags import SCRAPE_INTERVAL

pytestmark = pytest.mark.cluster

SCRAPE_S = float(SCRAPE_INTERVAL.rstrip("s"))
POLICY = dataclasses.replace(
    Policy(),
    hold_down_s=3.0,
    scrape_interval_s=SCRAPE_S,
    limits=Limits(
        fleet_max_nodes=50, fleet_max_percent=100, pool_max_nodes=50, pool_max_percent=100
    ),
)
NODE = "eu-west-a100-002"


@pytest.fixture
def sim(local_cluster, gridloop):
    """Inject faults with the CLI; every fault is cleared and every node put back after."""
    state = str(local_cluster.state.dir)

    def inject(*args: str) -> None:
        result = gridloop("sim", "inject", "--state-dir", state, *args)
        assert result.returncode == 0, result.stderr

    yield inject
    gridloop("sim", "clear", "--state-dir", state)
    core = local_cluster.core
    for node in core.list_node(label_selector=f"{STATE_LABEL}").items:
        notes = {
            k: None for k in node.metadata.annotations or {} if k.startswith("health.gridloop.io/")
        }
        taints = [t for t in node.spec.taints or [] if t.key != TAINT_KEY]
        core.patch_node(
            node.metadata.name,
            {
                "metadata": {"labels": {STATE_LABEL: None}, "annotations": notes},
                "spec": {"unschedulable": False, "taints": taints or None},
            },
        )


def _service(local_cluster, namespace, policy=POLICY, url=None) -> HealthService:
    url = url or f"http://127.0.0.1:{local_cluster.state.ports.prometheus}"
    return HealthService(
        local_cluster.api,
        PrometheusConnect(url=url, retry=None),
        policy,
        namespace,
        log=lambda _m: None,
    )


def _tainted(local_cluster) -> set[str]:
    return {
        n.metadata.name
        for n in local_cluster.core.list_node().items
        if any(t.key == TAINT_KEY for t in n.spec.taints or [])
    }


def _settled(service: HealthService, eventually) -> None:
    """Wait until Prometheus shows a fresh, healthy fleet (a previous test's faults may
    still be in its last samples); a dry-run twin looks, so nothing is acted on."""
    twin = HealthService(
        service.core.api_client,
        service.prom,
        dataclasses.replace(service.policy, dry_run=True),
        service.namespace,
        log=lambda _m: None,
    )

    def clean() -> bool:
        report = twin.cycle()
        return report.held is None and not report.outcomes

    eventually(clean, "fresh, fault-free DCGM samples in Prometheus", 60)


def test_xid_79_quarantines_that_node_within_two_scrape_intervals_and_nothing_else(
    local_cluster, namespace, sim, eventually
):
    service = _service(local_cluster, namespace)
    _settled(service, eventually)
    assert _tainted(local_cluster) == set()

    injected = time.monotonic()
    sim("--node", NODE, "--gpu", "3", "--xid", "79")
    eventually(
        lambda: service.cycle() and NODE in _tainted(local_cluster),
        f"{NODE} to be quarantined",
        timeout=2 * SCRAPE_S + 3,
    )
    took = time.monotonic() - injected

    node = local_cluster.core.read_node(NODE)
    assert node.spec.unschedulable is True
    assert "xid-79 on GPU 3" in node.metadata.annotations["health.gridloop.io/reason"]
    assert _tainted(local_cluster) == {NODE}
    assert took <= 2 * SCRAPE_S + 3


def test_an_exporter_outage_warns_and_quarantines_nothing(
    local_cluster, namespace, sim, eventually
):
    service = _service(local_cluster, namespace)
    _settled(service, eventually)
    sim("--node", NODE, "--exporter-down")

    def warned() -> bool:
        return any(
            isinstance(o.action, Warn) and o.action.node == NODE for o in service.cycle().outcomes
        )

    eventually(warned, "a warning about the down exporter", timeout=3 * SCRAPE_S)
    assert _tainted(local_cluster) == set()


def test_a_node_is_released_after_the_hold_down_once_its_gpu_is_healthy(
    local_cluster, namespace, sim, eventually, gridloop
):
    service = _service(local_cluster, namespace)
    _settled(service, eventually)
    sim("--node", NODE, "--gpu", "1", "--row-remap-failure")
    eventually(
        lambda: service.cycle() and NODE in _tainted(local_cluster),
        "quarantine",
        timeout=3 * SCRAPE_S,
    )

    gridloop("sim", "clear", "--state-dir", str(local_cluster.state.dir), "--node", NODE)

    eventually(
        lambda: service.cycle() and NODE not in _tainted(local_cluster),
        "release",
        timeout=3 * SCRAPE_S + POLICY.hold_down_s,
    )
    assert not local_cluster.core.read_node(NODE).spec.unschedulable


def test_prometheus_unreachable_means_no_action_and_says_why(local_cluster, namespace, sim):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    sim("--node", NODE, "--gpu", "0", "--xid", "79")

    report = _service(local_cluster, namespace, url=f"http://127.0.0.1:{closed}").cycle()

    assert [type(o.action) for o in report.outcomes] == [Hold]
    assert report.held and "cannot read Prometheus" in report.held
    assert _tainted(local_cluster) == set()


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
    local_cluster, namespace, sim, eventually
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

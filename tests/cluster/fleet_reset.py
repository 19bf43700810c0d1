"""Putting the simulated fleet back after faults: the quarantines undone, and a wait for
Prometheus to show no fault any more (its last samples outlive a `sim clear`); the quick
policy the tests that drive their own service run it with."""

from __future__ import annotations

import dataclasses
import time

import pytest
from kubernetes import client

from gridloop.health.observed import STATE_LABEL, TAINT_KEY
from gridloop.health.policy import Limits, Policy
from gridloop.health.service import HealthService
from gridloop.local.prometheus_config import SCRAPE_INTERVAL

SCRAPE_S = float(SCRAPE_INTERVAL.rstrip("s"))
# a short hold-down, the local scrape interval, the breaker's limits out of the way
QUICK_POLICY = dataclasses.replace(
    Policy(),
    hold_down_s=3.0,
    scrape_interval_s=SCRAPE_S,
    limits=Limits(
        fleet_max_nodes=50, fleet_max_percent=100, pool_max_nodes=50, pool_max_percent=100
    ),
)


def put_back(core: client.CoreV1Api) -> None:
    """Every node gridloop quarantined put back as it was: label, notes, taint, cordon."""
    for node in core.list_node(label_selector=STATE_LABEL).items:
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


def still_to_do(service: HealthService) -> str:
    """What a dry-run twin of `service` would do now, in one line ('' when nothing): what
    a wait for a fault-free fleet names when it gives up."""
    twin = HealthService(
        service.core.api_client,
        service.prom,
        dataclasses.replace(service.policy, dry_run=True),
        service.namespace,
        log=lambda _m: None,
    )
    report = twin.cycle()
    said = [repr(o.action)[:200] for o in report.outcomes[:5]]
    if len(report.outcomes) > 5:
        said.append(f"... {len(report.outcomes) - 5} more")
    if report.held is not None:
        said.append(f"held: {report.held}")
    return "; ".join(said)


def until_fault_free(service: HealthService, timeout: float, pause: float) -> None:
    """Wait until a dry-run twin of `service` sees nothing to do; fail naming what it still
    would do when `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while to_do := still_to_do(service):
        if time.monotonic() > deadline:
            pytest.fail(f"Prometheus still shows faults after {timeout:.0f}s: {to_do}")
        time.sleep(pause)

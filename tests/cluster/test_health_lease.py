"""Leader election's Lease against the real API server: how often a leader writes it."""

from __future__ import annotations

import datetime as dt

import pytest
from kubernetes import client

from gridloop.health.leadership import Lease

# the control plane, kwok and the GPU-health processes: no container node needed
pytestmark = [pytest.mark.cluster, pytest.mark.kwok_cluster]

T0 = dt.datetime(2027, 1, 15, 8, 0, 0, tzinfo=dt.UTC)


def _version(local_cluster, namespace: str) -> str:
    api = client.CoordinationV1Api(local_cluster.api)
    return api.read_namespaced_lease("gridloop-health", namespace).metadata.resource_version


def test_a_leader_renews_every_two_seconds_not_every_cycle_and_others_wait_out_the_lease(
    local_cluster, namespace
):
    leader = Lease(local_cluster.api, namespace, "replica-a")
    other = Lease(local_cluster.api, namespace, "replica-b")

    assert leader.hold(T0)
    written = _version(local_cluster, namespace)
    assert leader.hold(T0 + dt.timedelta(seconds=1.5))
    assert _version(local_cluster, namespace) == written  # no write within the retry period

    assert leader.hold(T0 + dt.timedelta(seconds=2.5))
    assert _version(local_cluster, namespace) != written  # renewed after it
    assert not other.hold(T0 + dt.timedelta(seconds=10))  # the lease lasts 15 s from then
    assert other.hold(T0 + dt.timedelta(seconds=18))
    assert not leader.hold(T0 + dt.timedelta(seconds=19))  # read again: it lost the lease

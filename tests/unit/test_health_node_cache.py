"""The node cache's one rule: it keeps the newest version of each node it was offered."""

from __future__ import annotations

from kubernetes import client

from gridloop.health.observed import MANAGER, QUARANTINED_AT, QUARANTINED_BY
from gridloop.health.watching import NodeCache

OPT_OUT = "gridloop.io/health-opt-out"


def node(version: int, *, quarantined: bool = False, gpu: bool = True) -> dict:
    notes = {QUARANTINED_BY: MANAGER, QUARANTINED_AT: "2026-11-30T01:00:00.000000Z"}
    return {
        "metadata": {
            "name": "n1",
            "resourceVersion": str(version),
            "labels": {"nvidia.com/gpu.present": "true"} if gpu else {},
            "annotations": notes if quarantined else {},
        },
        "spec": {"unschedulable": quarantined},
    }


def cache() -> NodeCache:
    return NodeCache(client.ApiClient(), OPT_OUT, log=lambda _m: None)  # never started


def test_a_late_older_event_never_overwrites_a_newer_node():
    c = cache()
    c.offer(node(101, quarantined=True))  # the executor's patch answer
    c.offer(node(100))  # the watch delivering the heartbeat from before it

    view = c.get("n1")
    assert view is not None and view.record is not None and view.unschedulable


def test_a_newer_version_replaces_the_view():
    c = cache()
    c.offer(node(100, quarantined=True))
    c.offer(node(102))

    view = c.get("n1")
    assert view is not None and view.record is None


def test_a_node_that_lost_its_gpu_label_leaves_the_cache():
    c = cache()
    c.offer(node(100))
    c.offer(node(101, gpu=False))

    assert c.get("n1") is None


def test_views_are_withheld_until_the_first_list_has_landed():
    c = cache()
    c.offer(node(100))

    assert c.views() is None

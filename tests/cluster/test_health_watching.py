"""The health service's node cache against the real API server's list and watch."""

from __future__ import annotations

import pytest

from gridloop.health.watching import NodeCache

# the control plane, kwok and the GPU-health processes: no container node needed
pytestmark = [pytest.mark.cluster, pytest.mark.kwok_cluster]

OPT_OUT = "gridloop.io/health-opt-out"
NODE = "eu-west-a100-002"


def test_the_cache_lists_the_fleet_then_follows_changes(local_cluster, eventually):
    cache = NodeCache(local_cluster.api, OPT_OUT, log=lambda _m: None).start()
    try:
        assert cache.wait_synced(30)
        views = cache.views()
        gpu_nodes = local_cluster.core.list_node(label_selector="nvidia.com/gpu.present=true")
        assert views is not None and set(views) == {n.metadata.name for n in gpu_nodes.items}

        local_cluster.core.patch_node(NODE, {"metadata": {"labels": {OPT_OUT: "true"}}})
        eventually(lambda: cache.get(NODE).opted_out, "the watch to deliver the opt-out label")

        local_cluster.core.patch_node(NODE, {"metadata": {"labels": {OPT_OUT: None}}})
        eventually(lambda: not cache.get(NODE).opted_out, "the watch to deliver its removal")
    finally:
        cache.stop()
        local_cluster.core.patch_node(NODE, {"metadata": {"labels": {OPT_OUT: None}}})

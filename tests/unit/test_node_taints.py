"""The taint changes `local up` makes on nodes an older gridloop left: add the GPU taint
once, drop the container nodes' old one, and keep every other taint as it is."""

from __future__ import annotations

from gridloop.fleet import GPU_TAINT
from gridloop.local.node_taints import with_taint, without_key

QUARANTINE = {"key": "gridloop.io/gpu-unhealthy", "value": "true", "effect": "NoSchedule"}
OLD = {"key": "gridloop.io/container-node", "value": "true", "effect": "NoSchedule"}


def test_the_gpu_taint_is_added_beside_the_others_once() -> None:
    add = with_taint(GPU_TAINT)

    assert add([QUARANTINE]) == [QUARANTINE, GPU_TAINT]
    assert add([QUARANTINE, GPU_TAINT]) == [QUARANTINE, GPU_TAINT]
    # a taint with the key but another value is the cluster's own: left as it is
    other = {"key": "nvidia.com/gpu", "value": "shared", "effect": "NoSchedule"}
    assert add([other]) == [other]


def test_the_old_container_node_taint_goes_and_the_rest_stays() -> None:
    drop = without_key("gridloop.io/container-node")

    assert drop([OLD, QUARANTINE]) == [QUARANTINE]
    assert drop([QUARANTINE]) == [QUARANTINE]
    assert drop([OLD]) == []

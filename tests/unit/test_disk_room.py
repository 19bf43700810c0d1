"""Whether a local cluster's disk has room for its container nodes, said before `up` starts."""

from __future__ import annotations

from pathlib import Path

from test_container_configs import kubelet

from gridloop.chart import readiness
from gridloop.local.container import disk_room
from gridloop.local.container.disk_room import GIB

WHERE = Path("/tmp/state")
TOTAL = 250 * GIB  # the kubelets evict below 5 GiB free (2%)


def test_a_disk_below_the_eviction_floor_plus_the_platform_images_is_refused() -> None:
    said = disk_room.refusal(WHERE, 6 * GIB, TOTAL)
    assert said == (
        "6.0 GiB free on the filesystem of /tmp/state (250.0 GiB): the container nodes' "
        "kubelets evict every pod below 5.0 GiB free (2%) and their images need about "
        "2.0 GiB more: free some space first"
    )
    assert disk_room.refusal(WHERE, 7 * GIB, TOTAL) is None


def test_room_for_the_platform_but_not_a_served_model_is_a_note_not_a_refusal() -> None:
    free = 15 * GIB  # what stop 31's CI most likely started with (the vLLM pull takes ~12)
    assert disk_room.refusal(WHERE, free, TOTAL) is None
    note = disk_room.shortfall_for_models(WHERE, free, TOTAL)
    assert note is not None
    assert note.startswith("15.0 GiB free on the filesystem of /tmp/state: a model served")
    assert disk_room.shortfall_for_models(WHERE, 17 * GIB, TOTAL) is None


def test_the_floor_is_the_one_the_kubelets_evict_at() -> None:
    evicts = kubelet()["evictionHard"]

    assert evicts["nodefs.available"] == evicts["imagefs.available"] == "2%"
    assert disk_room.eviction_bytes(100 * GIB) == 2 * GIB


def test_pods_cannot_be_ready_on_a_node_under_pressure_and_the_wait_says_which() -> None:
    def node(name: str, **conditions: str) -> dict:
        listed = [{"type": kind, "status": status} for kind, status in conditions.items()]
        return {"metadata": {"name": name}, "status": {"conditions": listed}}

    nodes = [
        node("system-000", Ready="True", DiskPressure="True", MemoryPressure="False"),
        node("gpu-001", Ready="True", DiskPressure="False"),
        node("kwok-002"),
    ]

    assert readiness.pressured(nodes) == [
        "node system-000 has DiskPressure: its kubelet evicts pods and admits no new ones"
    ]

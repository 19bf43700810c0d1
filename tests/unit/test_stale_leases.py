"""Which leader Leases `local up` releases before a stopped cluster's nodes start again:
those held by the pods that stopped with it, and nothing else."""

from __future__ import annotations

from gridloop.local.container.stale_leases import HeldLease, held_by

PODS = ("kueue-controller-manager-7d9f8-x2x4q", "gridloop-health-5c6b7-abcde")


def test_a_controller_runtime_holder_is_its_pods_name_then_an_id() -> None:
    kueue = HeldLease(
        "kueue-system", "c1f6bfd2.kueue.x-k8s.io", "kueue-controller-manager-7d9f8-x2x4q_1b2c-3d"
    )
    assert held_by([kueue], PODS) == [kueue]


def test_the_health_services_holder_is_its_pods_name() -> None:
    health = HeldLease("gridloop-system", "gridloop-health", "gridloop-health-5c6b7-abcde")
    assert held_by([health], PODS) == [health]


def test_leases_held_by_anything_else_or_by_nobody_stay() -> None:
    others = [
        HeldLease("kube-system", "apiserver-abc", "apiserver-abc_9f8e"),  # the API server
        HeldLease("team-a", "their-controller", "a-laptop_77aa"),  # a process off the nodes
        HeldLease("kueue-system", "c1f6bfd2.kueue.x-k8s.io", ""),  # released already
        HeldLease("team-a", "prefix", "kueue-controller-manager-7d9f8"),  # not a pod's name
    ]
    assert held_by(others, PODS) == []


def test_node_heartbeats_stay_even_when_a_pod_is_named_like_their_node() -> None:
    heartbeat = HeldLease("kube-node-lease", "system-000", "system-000")
    assert held_by([heartbeat], ["system-000"]) == []

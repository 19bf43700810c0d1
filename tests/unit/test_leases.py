"""Which leader Leases gridloop releases: those held by the pods that stopped with a local
cluster (`local up`), or by a removed pod of the release's Deployments (`install`); no other."""

from __future__ import annotations

from gridloop.leases import HeldLease, held_by, left_by

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


DEPLOYMENTS = [
    ("kueue-system", "kueue-controller-manager"),
    ("gridloop-system", "kuberay-operator"),
]


def test_a_lease_a_removed_pod_of_the_releases_deployment_left_is_released() -> None:
    kuberay = HeldLease(
        "gridloop-system", "ray-operator-leader", "kuberay-operator-75c9cd6867-zpvfr_1954d855"
    )
    assert left_by([kuberay], DEPLOYMENTS, pods=[]) == [kuberay]


def test_a_lease_whose_holder_runs_or_is_not_the_releases_stays() -> None:
    running = HeldLease(
        "kueue-system", "c1f6bfd2.kueue.x-k8s.io", "kueue-controller-manager-697464974f-nprml_b4"
    )
    others = [
        HeldLease("team-a", "theirs", "kuberay-operator-75c9cd6867-zpvfr_1"),  # another namespace
        HeldLease("gridloop-system", "theirs", "my-operator-5d-x_1"),  # another Deployment's
        HeldLease("gridloop-system", "ray-operator-leader", ""),  # released already
    ]
    pods = [("kueue-system", "kueue-controller-manager-697464974f-nprml")]

    assert left_by([running, *others], DEPLOYMENTS, pods) == []

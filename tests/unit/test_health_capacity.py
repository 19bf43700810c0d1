"""Healthy GPU capacity per ResourceFlavor: what is really there to admit work onto."""

from __future__ import annotations

import dataclasses

import pytest

from gridloop.health.actions import Acknowledge, Quarantine, Release
from gridloop.health.capacity import Flavor, FlavorCapacity, bad_gpus, capacity
from gridloop.health.observed import GpuReading, NodeView, Observed, Record
from gridloop.health.policy import Policy, Signals

H100_LABELS = {"gridloop.io/gpu": "h100", "topology.kubernetes.io/region": "us-east"}
H100 = Flavor("us-east-h100", H100_LABELS)
A100 = Flavor("us-east-a100", {**H100_LABELS, "gridloop.io/gpu": "a100"})
RECORD = Record(1000.0, frozenset({"GPU-n1-3:xid-79"}))


def node(name: str, labels: dict[str, str] | None = None, **kw) -> NodeView:
    """An 8-GPU node, labelled for us-east-h100 unless told otherwise."""
    return NodeView(name, "us-east/h100", 8, labels=H100_LABELS if labels is None else labels, **kw)


def fleet(*views: NodeView, count: int = 4) -> dict[str, NodeView]:
    """`count` healthy h100 nodes n0.., with `views` replacing nodes of the same name."""
    out = {f"n{i}": node(f"n{i}") for i in range(count)}
    out.update({v.name: v for v in views})
    return out


def h100(nodes: dict[str, NodeView], actions=(), bad=None) -> FlavorCapacity:
    return capacity([H100], nodes, list(actions), bad or {})[H100.name]


def test_a_healthy_fleet_is_all_capacity():
    assert h100(fleet()) == FlavorCapacity(
        "us-east-h100", total=32, healthy=32, nodes=4, healthy_nodes=4
    )


@pytest.mark.parametrize(
    ("view", "actions"),
    [
        pytest.param(node("n1", ready=False), [], id="not-ready"),
        pytest.param(node("n1", unschedulable=True), [], id="cordoned-by-someone-else"),
        pytest.param(
            node("n1", unschedulable=True, record=RECORD), [], id="quarantined-by-gridloop"
        ),
        pytest.param(
            node("n1", record=RECORD), [], id="uncordoned-by-a-person-not-yet-acknowledged"
        ),
        pytest.param(
            node("n1"),
            [Quarantine("n1", frozenset({"GPU-n1-3:xid-79"}), ("GPU-n1-3",), "xid-79")],
            id="quarantined-this-cycle",
        ),
        pytest.param(
            node("n1", ready=False, unschedulable=True, record=RECORD),
            [Release("n1")],
            id="released-but-not-ready",
        ),
    ],
)
def test_a_node_out_of_service_counts_no_gpus(view, actions):
    cap = h100(fleet(view), actions)
    assert (cap.total, cap.healthy, cap.nodes, cap.healthy_nodes) == (32, 24, 4, 3)


@pytest.mark.parametrize(
    ("view", "actions"),
    [
        pytest.param(
            node("n1", unschedulable=True, record=RECORD), [Release("n1")], id="released-this-cycle"
        ),
        pytest.param(
            node("n1", record=RECORD),
            [Acknowledge("n1", RECORD.faults)],
            id="uncordoned-by-a-person-this-cycle",
        ),
        pytest.param(node("n1", opted_out=True), [], id="opted-out-is-still-in-service"),
    ],
)
def test_a_node_back_in_service_counts_all_its_gpus(view, actions):
    assert h100(fleet(view), actions).healthy == 32


def test_a_release_of_another_node_does_not_put_this_one_back():
    quarantined = node("n1", unschedulable=True, record=RECORD)
    assert h100(fleet(quarantined), [Release("n2")]).healthy == 24


def test_a_node_with_two_bad_gpus_counts_six_of_eight():
    cap = h100(fleet(count=1), bad={"n0": 2})
    assert (cap.total, cap.healthy, cap.healthy_nodes) == (8, 6, 1)


def test_bad_gpus_never_count_below_zero():
    assert h100(fleet(count=2), bad={"n0": 9}).healthy == 8


def test_bad_gpus_on_a_node_already_out_are_not_subtracted_twice():
    cordoned = node("n1", unschedulable=True)
    assert h100(fleet(cordoned, count=2), bad={"n1": 3}).healthy == 8


def test_a_node_counts_only_for_the_flavors_whose_labels_it_has_all_of():
    nodes = {
        "h": node("h"),
        "a": node(
            "a", labels={"gridloop.io/gpu": "a100", "topology.kubernetes.io/region": "us-east"}
        ),
        "west": node(
            "west", labels={"gridloop.io/gpu": "h100", "topology.kubernetes.io/region": "us-west"}
        ),
        "bare": node("bare", labels={}),
    }
    caps = capacity([H100, A100], nodes, [], {})
    assert {name: (c.total, c.nodes) for name, c in caps.items()} == {
        "us-east-h100": (8, 1),
        "us-east-a100": (8, 1),
    }


def test_a_node_matching_several_flavors_counts_for_each():
    region = Flavor("us-east-any", {"topology.kubernetes.io/region": "us-east"})
    caps = capacity([H100, region], fleet(count=2), [], {"n0": 1})
    assert caps["us-east-h100"].healthy == caps["us-east-any"].healthy == 15


def test_a_flavor_no_node_matches_has_total_zero():
    assert capacity([A100], fleet(), [], {})["us-east-a100"] == FlavorCapacity(
        "us-east-a100", total=0, healthy=0, nodes=0, healthy_nodes=0
    )


# bad_gpus: what the exporter says this cycle


def readings(name: str, count: int = 8, **faulty: object) -> dict[str, GpuReading]:
    """`count` healthy GPUs; keyword fields apply to GPUs 2 and 3 (e.g. xid=79)."""
    out = {f"GPU-{name}-{i}": GpuReading(f"GPU-{name}-{i}", str(i)) for i in range(count)}
    for i in (2, 3) if faulty else ():
        out[f"GPU-{name}-{i}"] = dataclasses.replace(out[f"GPU-{name}-{i}"], **faulty)
    return out


def observed(gpus: dict[str, dict[str, GpuReading]], up: dict[str, bool] | None = None) -> Observed:
    return Observed(
        nodes={n: node(n) for n in gpus},
        gpus=gpus,
        exporter_up=up if up is not None else dict.fromkeys(gpus, True),
        newest_sample_age_s=5.0,
    )


@pytest.mark.parametrize(
    ("gpus", "up", "policy", "expected"),
    [
        pytest.param({"n0": readings("n0")}, None, Policy(), {}, id="healthy"),
        pytest.param({"n0": readings("n0", xid=79)}, None, Policy(), {"n0": 2}, id="two-faulty"),
        pytest.param(
            {"n0": readings("n0", xid=13)}, None, Policy(), {}, id="single-application-xid"
        ),
        pytest.param({"n0": readings("n0", count=7)}, None, Policy(), {"n0": 1}, id="one-vanished"),
        pytest.param(
            {"n0": readings("n0", count=7, ecc_dbe_increase=1.0)},
            None,
            Policy(),
            {"n0": 3},
            id="faulty-plus-vanished",
        ),
        pytest.param(
            {"n0": readings("n0", count=7)},
            None,
            Policy(signals=Signals(vanished_gpu=False)),
            {},
            id="vanished-not-checked",
        ),
        pytest.param(
            {"n0": readings("n0", xid=79), "n1": {}},
            {"n0": False, "n1": False},
            Policy(),
            {},
            id="exporter-down-is-unknown-not-bad",
        ),
    ],
)
def test_bad_gpus(gpus, up, policy, expected):
    assert bad_gpus(observed(gpus, up), policy) == expected


def test_bad_gpus_feed_capacity_end_to_end():
    obs = observed({"n0": readings("n0", xid=79), "n1": readings("n1")})
    assert capacity([H100], obs.nodes, [], bad_gpus(obs, Policy()))["us-east-h100"].healthy == 14

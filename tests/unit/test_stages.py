"""kwok's Stage objects: nodes stay Ready, a simulated failure sticks, Job pods complete."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from gridloop.local import flags
from gridloop.local.kwok.stages import DURATION_ANNOTATION, NOT_READY_LABEL, kwok_config

STAGE_NAMES = [
    "node-initialize",
    "node-heartbeat",
    "node-not-ready",
    "pod-ready",
    "pod-complete",
    "pod-delete",
]


def documents(parallelism: int = 16) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(kwok_config(parallelism)))


def stage(name: str) -> dict[str, Any]:
    (found,) = [d for d in documents() if d["kind"] == "Stage" and d["metadata"]["name"] == name]
    return found


def expressions(name: str) -> list[dict[str, Any]]:
    exprs: list[dict[str, Any]] = stage(name)["spec"]["selector"]["matchExpressions"]
    return exprs


def not_ready_label_operators(name: str) -> list[tuple[str, list[str] | None]]:
    return [
        (e["operator"], e.get("values"))
        for e in expressions(name)
        if e["key"] == f'.metadata.labels["{NOT_READY_LABEL}"]'
    ]


def seconds(duration: str) -> int:
    m = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", duration)
    assert m and duration, f"unparsed duration {duration!r}"
    return int(m.group(1) or 0) * 60 + int(m.group(2) or 0)


# A node reduced to the three facts the node stages select on; None means absent.
def node_facts(
    label: str | None, ready: str | None, phase: str | None = "Running"
) -> dict[str, str | None]:
    return {"label": label, "ready": ready, "phase": phase}


def fact_for(key: str, node: dict[str, str | None]) -> str | None:
    if NOT_READY_LABEL in key:
        return node["label"]
    if 'type == "Ready"' in key:
        return node["ready"]
    if key == ".status.phase":
        return node["phase"]
    raise AssertionError(f"node stage selects on an unmodelled key {key!r}")


def selects(name: str, node: dict[str, str | None]) -> bool:
    """Label-selector semantics, as kwok applies them: NotIn matches an absent value."""
    for expr in expressions(name):
        value, op = fact_for(expr["key"], node), expr["operator"]
        ok = {
            "In": value is not None and value in expr.get("values", []),
            "NotIn": value is None or value not in expr.get("values", []),
            "Exists": value is not None,
            "DoesNotExist": value is None,
        }[op]
        if not ok:
            return False
    return True


def test_config_is_one_kwok_configuration_then_the_stages_in_order() -> None:
    docs = documents()

    assert docs[0]["apiVersion"] == "config.kwok.x-k8s.io/v1alpha1"
    assert docs[0]["kind"] == "KwokConfiguration"
    assert [d["kind"] for d in docs[1:]] == ["Stage"] * len(STAGE_NAMES)
    assert [d["metadata"]["name"] for d in docs[1:]] == STAGE_NAMES
    assert {d["apiVersion"] for d in docs[1:]} == {"kwok.x-k8s.io/v1alpha1"}


@pytest.mark.parametrize("parallelism", [1, 16, 64])
def test_parallelism_applies_to_nodes_and_pods(parallelism: int) -> None:
    options = documents(parallelism)[0]["options"]

    assert options["nodePlayStageParallelism"] == parallelism
    assert options["podPlayStageParallelism"] == parallelism


def test_heartbeats_travel_in_node_status_not_leases() -> None:
    assert documents()[0]["options"]["nodeLeaseDurationSeconds"] == 0


@pytest.mark.parametrize(
    ("name", "kind"),
    [(name, "Node" if name.startswith("node-") else "Pod") for name in STAGE_NAMES],
)
def test_each_stage_acts_on_its_kind_in_the_core_group(name: str, kind: str) -> None:
    assert stage(name)["spec"]["resourceRef"] == {"apiGroup": "v1", "kind": kind}


@pytest.mark.parametrize("name", ["node-initialize", "node-heartbeat"])
def test_healthy_node_stages_skip_nodes_with_the_not_ready_label(name: str) -> None:
    assert not_ready_label_operators(name) == [("DoesNotExist", None)]


def test_node_not_ready_requires_the_label_set_to_true() -> None:
    assert not_ready_label_operators("node-not-ready") == [("In", ["true"])]


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        (node_facts(label=None, ready=None, phase=None), ["node-initialize"]),
        (node_facts(label=None, ready="True"), ["node-heartbeat"]),
        (node_facts(label=None, ready="Unknown"), ["node-initialize"]),
        (node_facts(label="true", ready="True"), ["node-not-ready"]),
        (node_facts(label="true", ready="False"), []),
        (node_facts(label=None, ready="False"), ["node-initialize"]),
    ],
    ids=[
        "new-node-is-initialised",
        "ready-node-heartbeats",
        "node-gone-unknown-is-reinitialised",
        "labelled-ready-node-is-failed",
        "failed-node-stays-failed",
        "label-removed-node-recovers",
    ],
)
def test_node_stage_that_applies_to_a_node(
    node: dict[str, str | None], expected: list[str]
) -> None:
    node_stages = [name for name in STAGE_NAMES if name.startswith("node-")]

    assert [name for name in node_stages if selects(name, node)] == expected


def test_node_not_ready_sets_ready_false() -> None:
    template = stage("node-not-ready")["spec"]["next"]["statusTemplate"]

    assert 'status: "False"' in template
    assert "SimulatedFailure" in template


def test_unchanged_status_is_posted_every_five_minutes_like_a_kubelet() -> None:
    delay = stage("node-heartbeat")["spec"]["delay"]

    # kwok waits a random time between durationMilliseconds and jitterDurationMilliseconds
    assert delay["durationMilliseconds"] == 5 * 60 * 1000
    assert 5 * 60 * 1000 < delay["jitterDurationMilliseconds"] <= 6 * 60 * 1000


def test_heartbeat_arrives_within_the_controller_manager_grace_period() -> None:
    spec = stage("node-heartbeat")["spec"]
    delay = spec["delay"]
    longest_ms = max(delay["durationMilliseconds"], delay.get("jitterDurationMilliseconds", 0))

    # with no Lease, a node whose status is older than the grace period turns Unknown;
    # a minute of room for kwok falling behind at 5,000 nodes
    assert longest_ms + 60_000 <= seconds(flags.NODE_MONITOR_GRACE) * 1000
    assert spec["immediateNextStage"] is True


def test_pod_complete_selects_only_running_job_pods() -> None:
    exprs = expressions("pod-complete")

    assert {"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": ["Job"]} in (
        exprs
    )
    assert {"key": ".status.phase", "operator": "In", "values": ["Running"]} in exprs
    assert {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"} in exprs


def test_pod_complete_waits_for_the_duration_annotation() -> None:
    spec = stage("pod-complete")["spec"]

    assert spec["delay"]["durationMilliseconds"] == 0
    assert spec["delay"]["durationFrom"] == {
        "expressionFrom": f'.metadata.annotations["{DURATION_ANNOTATION}"]'
    }
    assert "phase: Succeeded" in spec["next"]["statusTemplate"]


def test_pod_delete_removes_deleted_pods_and_their_finalizers() -> None:
    spec = stage("pod-delete")["spec"]

    assert spec["selector"]["matchExpressions"] == [
        {"key": ".metadata.deletionTimestamp", "operator": "Exists"}
    ]
    assert spec["next"] == {"finalizers": {"empty": True}, "delete": True}

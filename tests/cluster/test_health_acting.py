"""The health service's executor against the real API server: what a quarantine leaves."""

from __future__ import annotations

import pytest
from kubernetes import client

from gridloop.fleet import GPU_TAINT
from gridloop.health.acting import EventSender, Executor
from gridloop.health.actions import Acknowledge, Quarantine, Release
from gridloop.health.listing import node_view
from gridloop.health.observed import MANAGER, STATE_LABEL, TAINT_KEY

# the control plane, kwok and the GPU-health processes: no container node needed
pytestmark = [pytest.mark.cluster, pytest.mark.kwok_cluster]

FAULTS = frozenset({"GPU-x-3:xid-79"})


@pytest.fixture
def gpu_node(local_cluster):
    """A fleet node this test may quarantine; put back as it was afterwards."""
    name, core = "onprem-fra-a100-006", local_cluster.core
    yield name
    # the GPU taint every simulated node carries, and nothing else
    core.patch_node(name, {"spec": {"unschedulable": False, "taints": [dict(GPU_TAINT)]}})
    annotations = core.read_node(name).metadata.annotations or {}
    core.patch_node(
        name,
        {
            "metadata": {
                "labels": {STATE_LABEL: None},
                "annotations": {
                    k: None for k in annotations if k.startswith("health.gridloop.io/")
                },
            }
        },
    )


def _plain(local_cluster, name):
    api = local_cluster.api
    return api.sanitize_for_serialization(client.CoreV1Api(api).read_node(name))


def _quarantine(name: str, **kw) -> Quarantine:
    return Quarantine(
        node=name, faults=FAULTS, gpus=("GPU-x-3",), reason="xid-79 on GPU 3 (GPU-x-3)", **kw
    )


def test_quarantine_taints_cordons_records_and_leaves_an_event(local_cluster, gpu_node):
    [outcome] = Executor(local_cluster.api, instance="health-7d9f-a").apply([_quarantine(gpu_node)])

    assert outcome.applied
    node = _plain(local_cluster, gpu_node)
    assert node["spec"]["unschedulable"] is True
    assert {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert node["metadata"]["labels"][STATE_LABEL] == "quarantined"
    notes = node["metadata"]["annotations"]
    assert notes["health.gridloop.io/reason"] == "xid-79 on GPU 3 (GPU-x-3)"
    assert notes["health.gridloop.io/gpus"] == "GPU-x-3"
    assert notes["health.gridloop.io/quarantined-by"] == MANAGER
    assert MANAGER in {m["manager"] for m in node["metadata"]["managedFields"]}
    events = local_cluster.core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={gpu_node},reason=GPUQuarantined"
    ).items
    newest = max(events, key=lambda e: e.first_timestamp)
    assert "xid-79" in newest.message
    assert (newest.reporting_component, newest.reporting_instance) == (MANAGER, "health-7d9f-a")

    view = node_view(node, "gridloop.io/health-opt-out")
    assert view.record is not None and view.record.faults == FAULTS
    assert view.unschedulable


def test_release_removes_only_what_gridloop_added(local_cluster, gpu_node, eventually):
    foreign = {"key": "example.com/maintenance", "value": "x", "effect": "NoSchedule"}
    theirs = [dict(GPU_TAINT), foreign]
    local_cluster.core.patch_node(gpu_node, {"spec": {"taints": theirs}})
    executor = Executor(local_cluster.api)
    executor.apply([_quarantine(gpu_node, no_execute=True)])

    executor.apply([Release(gpu_node)])

    node = _plain(local_cluster, gpu_node)
    assert node["spec"].get("unschedulable") in (None, False)
    # the node lifecycle controller drops its own node.kubernetes.io/unschedulable taint
    # once it sees the uncordon; gridloop leaves that taint to its owner
    eventually(
        lambda: _plain(local_cluster, gpu_node)["spec"]["taints"] == theirs,
        "only the GPU and the foreign taint to remain",
    )
    assert STATE_LABEL not in node["metadata"]["labels"]
    assert not [
        k for k in node["metadata"].get("annotations", {}) if k.startswith("health.gridloop.io/")
    ]
    assert node_view(node, "gridloop.io/health-opt-out").record is None


def test_dry_run_sends_nothing_at_all(local_cluster, gpu_node):
    before = _plain(local_cluster, gpu_node)["metadata"]["resourceVersion"]

    [outcome] = Executor(local_cluster.api, dry_run=True).apply([_quarantine(gpu_node)])

    assert not outcome.applied and "dry-run" in outcome.detail
    assert _plain(local_cluster, gpu_node)["metadata"]["resourceVersion"] == before


def test_acknowledging_a_manual_uncordon_drops_the_taint_and_remembers_the_faults(
    local_cluster, gpu_node
):
    executor = Executor(local_cluster.api)
    executor.apply([_quarantine(gpu_node)])
    local_cluster.core.patch_node(gpu_node, {"spec": {"unschedulable": False}})

    executor.apply([Acknowledge(gpu_node, FAULTS)])

    node = _plain(local_cluster, gpu_node)
    assert not [t for t in node["spec"].get("taints") or [] if t["key"] == TAINT_KEY]
    assert node["spec"].get("unschedulable") in (None, False)
    view = node_view(node, "gridloop.io/health-opt-out")
    assert view.record is None and view.acknowledged == FAULTS


def _pod(name: str, node: str, gpus: int, labels: dict[str, str] | None = None) -> dict:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "x", "resources": resources}],
        },
    }


def test_drain_evicts_gpu_pods_but_not_others_nor_those_a_budget_protects(
    local_cluster, gpu_node, namespace, eventually
):
    core = local_cluster.core
    core.create_namespaced_pod(namespace, _pod("trainer", gpu_node, 8))
    core.create_namespaced_pod(namespace, _pod("sidecar", gpu_node, 0))
    core.create_namespaced_pod(namespace, _pod("guarded", gpu_node, 1, {"app": "guarded"}))
    client.PolicyV1Api(local_cluster.api).create_namespaced_pod_disruption_budget(
        namespace,
        {
            "metadata": {"name": "guarded"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )

    def all_running_and_budget_known() -> bool:
        pods = core.list_namespaced_pod(namespace).items
        pdb = client.PolicyV1Api(local_cluster.api).read_namespaced_pod_disruption_budget(
            "guarded", namespace
        )
        return (
            len(pods) == 3
            and all(p.status.phase == "Running" for p in pods)
            and pdb.status.current_healthy == 1
        )

    eventually(all_running_and_budget_known, "pods Running and the budget observed")

    [outcome] = Executor(local_cluster.api).apply([_quarantine(gpu_node, drain=True)])

    assert outcome.detail == "evicted 1 GPU pods"
    eventually(
        lambda: (
            {p.metadata.name for p in core.list_namespaced_pod(namespace).items}
            == {"sidecar", "guarded"}
        ),
        "trainer to be evicted and gone",
    )


def test_actions_run_side_by_side_and_a_refused_one_does_not_stop_the_others(
    local_cluster, gpu_node
):
    missing = "no-such-node-anywhere"
    actions = [_quarantine(missing), _quarantine(gpu_node), Release(node=missing)]

    refused, done, refused_too = Executor(local_cluster.api, workers=3).apply(actions)

    assert done.applied and not done.failed
    assert refused.failed and not refused.applied and refused.action == actions[0]
    assert refused.detail.startswith("failed: 404 ") and missing in refused.detail
    assert refused_too.failed and refused_too.action == actions[2]
    assert TAINT_KEY in {t["key"] for t in _plain(local_cluster, gpu_node)["spec"]["taints"]}


def _basis(node: dict, version: str | None = None) -> dict:
    """What the node watch keeps of a node, as Executor's `basis` hands it over."""
    meta = {"name": node["metadata"]["name"]}
    meta["resourceVersion"] = version or node["metadata"]["resourceVersion"]
    return {"metadata": meta, "spec": {"taints": node["spec"].get("taints") or []}}


class _CountingReads(client.CoreV1Api):
    def __init__(self, api):
        super().__init__(api)
        self.reads = 0

    def read_node(self, name, **kw):
        self.reads += 1
        return super().read_node(name, **kw)


@pytest.mark.parametrize(
    ("copy", "reads"),
    [
        pytest.param("current", 0, id="current-copy-no-read"),
        pytest.param("stale", 1, id="stale-copy-conflict-then-read"),
    ],
)
def test_a_patch_is_built_from_the_watch_copy_and_a_stale_copy_is_read_again(
    local_cluster, gpu_node, copy, reads
):
    node = _plain(local_cluster, gpu_node)
    basis = _basis(node, version="1" if copy == "stale" else None)
    executor = Executor(local_cluster.api, basis=lambda _name: basis)
    executor.core = counting = _CountingReads(local_cluster.api)

    [outcome] = executor.apply([_quarantine(gpu_node)])

    assert outcome.applied and counting.reads == reads
    assert TAINT_KEY in {t["key"] for t in _plain(local_cluster, gpu_node)["spec"]["taints"]}


def test_events_sent_in_the_background_all_arrive_by_close(local_cluster, gpu_node):
    sender = EventSender(local_cluster.core, log=lambda _m: None, instance="health-7d9f-b")
    executor = Executor(local_cluster.api, events=sender)

    [outcome] = executor.apply([_quarantine(gpu_node)])
    sender.close()

    assert outcome.applied
    events = local_cluster.core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={gpu_node},reason=GPUQuarantined"
    ).items
    assert [
        e
        for e in events
        if "xid-79" in e.message
        and e.source.component == MANAGER
        and e.reporting_instance == "health-7d9f-b"
    ]

"""The install's pure parts: phases, adoption marks, readiness, Helm's record, purge rules."""

from __future__ import annotations

import base64
import gzip
import json

import pytest

from gridloop.chart import objects, planning, purging, readiness, releases
from gridloop.chart.diagnosis import Existing
from gridloop.chart.objects import Ref

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "clusterqueues.kueue.x-k8s.io"},
    "spec": {
        "group": "kueue.x-k8s.io",
        "scope": "Cluster",
        "names": {"kind": "ClusterQueue", "plural": "clusterqueues"},
        "conversion": {
            "strategy": "Webhook",
            "webhook": {"clientConfig": {"service": {"namespace": "kueue", "name": "hooks"}}},
        },
    },
}
SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "hooks", "namespace": "kueue"},
}
HOOKS = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingWebhookConfiguration",
    "metadata": {"name": "kueue"},
    "webhooks": [{"clientConfig": {"service": {"namespace": "kueue", "name": "hooks"}}}],
}
QUEUE = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "q"}}
DEPLOY = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "health"}}
RAYJOB = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "j"}}


def test_components_leave_out_crds_custom_resources_and_webhook_configurations() -> None:
    docs = [SERVICE, HOOKS, QUEUE, DEPLOY, RAYJOB]
    kinds = set(objects.crd_kinds([CRD])) | objects.custom_kinds(docs)

    assert objects.components(docs, kinds) == [SERVICE, DEPLOY]
    assert objects.custom_resources(docs, kinds) == [QUEUE, RAYJOB]


def test_only_webhook_services_this_rendering_runs_are_waited_for() -> None:
    assert objects.webhook_services([CRD, HOOKS, SERVICE], "gridloop-system") == [
        ("kueue", "hooks")
    ]
    assert objects.webhook_services([CRD, HOOKS], "gridloop-system") == [], "someone else's"


def test_adopted_objects_carry_helms_ownership_marks_and_the_input_is_untouched() -> None:
    marked = objects.adoptable(DEPLOY, "gridloop", "gridloop-system")

    assert marked["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "Helm"}
    assert marked["metadata"]["annotations"] == {
        "meta.helm.sh/release-name": "gridloop",
        "meta.helm.sh/release-namespace": "gridloop-system",
    }
    assert "labels" not in DEPLOY["metadata"]


def test_objects_without_a_namespace_go_to_the_release_namespace() -> None:
    elsewhere = {**DEPLOY, "metadata": {"name": "op", "namespace": "default"}}

    groups = objects.by_namespace([DEPLOY, elsewhere, QUEUE], "gridloop-system")

    assert groups == {"gridloop-system": [DEPLOY, QUEUE], "default": [elsewhere]}


def test_one_line_json_documents_and_yaml_ones_both_parse() -> None:
    text = objects.dump([CRD]) + "---\n# Source: x\nkind: ConfigMap\napiVersion: v1\n"
    text += "metadata: {name: c}\ndata:\n  a: |\n    line\n"

    parsed = objects.parse(text)

    assert parsed[0] == CRD
    assert parsed[1]["data"]["a"] == "line\n", "a block scalar keeps its last newline"


def test_live_objects_may_hold_more_than_was_applied_but_not_other_values() -> None:
    live = {"spec": {"a": 1, "b": [{"x": 1, "default": True}], "extra": 2}}

    assert objects.contains(live, {"spec": {"a": 1, "b": [{"x": 1}]}})
    assert not objects.contains(live, {"spec": {"a": 2}})
    assert not objects.contains(live, {"spec": {"b": [{"x": 1}, {"x": 2}]}})
    assert not objects.contains(live, {"spec": {"missing": None}})


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [("16384Gi", "16Ti", True), ("500m", "0.5", True), ("1k", "1000", True),
     ("1Ki", "1000", False), ("2Gi", "2G", False), ("v1", "v1", True), ("abc", "abd", False)],
)  # fmt: skip
def test_a_quantity_equals_its_canonical_form(a: str, b: str, same: bool) -> None:
    assert objects.contains({"q": a}, {"q": b}) is same


def _deployment(want: int, **status: int) -> dict:
    return {
        "metadata": {"generation": 2},
        "spec": {"replicas": want},
        "status": {"observedGeneration": 2, **status},
    }


@pytest.mark.parametrize(
    ("obj", "why"),
    [
        (None, "not found"),
        ({**_deployment(1), "status": {"observedGeneration": 1}}, "not yet seen by its controller"),
        (_deployment(2, updatedReplicas=1, replicas=2, availableReplicas=2), "1/2 updated"),
        (_deployment(1, updatedReplicas=1, replicas=2, availableReplicas=1), "1 old replicas"),
        (_deployment(1, updatedReplicas=1, replicas=1, availableReplicas=0), "0/1 ready"),
        (_deployment(1, updatedReplicas=1, replicas=1, availableReplicas=1), ""),
        (_deployment(0), ""),
    ],
)
def test_a_deployment_is_ready_as_kubectl_rollout_status_says(obj, why: str) -> None:
    assert readiness.state("Deployment", obj).startswith(why)


def test_a_daemonset_is_ready_when_every_scheduled_pod_is_available() -> None:
    status = {"observedGeneration": 1, "desiredNumberScheduled": 3, "updatedNumberScheduled": 3}
    ds = {"metadata": {"generation": 1}, "status": {**status, "numberAvailable": 2}}

    assert readiness.state("DaemonSet", ds) == "2/3 ready"
    ds["status"]["numberAvailable"] = 3
    assert readiness.state("DaemonSet", ds) == ""


def test_not_ready_names_each_workload_and_why() -> None:
    states = {
        Ref("apps/v1", "Deployment", "ns", "a"): "0/1 ready",
        Ref("apps/v1", "DaemonSet", "ns", "b"): "",
    }

    assert readiness.not_ready(states) == "Deployment ns/a (0/1 ready)"


@pytest.mark.parametrize(
    ("text", "secs"), [("90s", 90), ("5m", 300), ("1h30m", 5400), ("1.5s", 1.5)]
)
def test_go_durations_read_as_seconds(text: str, secs: float) -> None:
    assert readiness.seconds(text) == secs


def test_endpoints_serve_when_one_is_ready() -> None:
    assert readiness.serving([{"endpoints": [{"conditions": {"ready": True}}]}])
    assert not readiness.serving([{"endpoints": [{"conditions": {"ready": False}}]}])
    assert not readiness.serving([])


def test_helms_release_record_round_trips_through_its_encoding() -> None:
    record = {"name": "gridloop", "info": {"status": "pending-upgrade"}, "version": 3}
    helm = base64.b64encode(gzip.compress(json.dumps(record).encode())).decode()
    as_api_returns_it = base64.b64encode(helm.encode()).decode()

    assert releases.decode(as_api_returns_it) == record
    assert releases.decode(releases.encode(record)) == record


def test_purge_refuses_while_other_custom_resources_exist_unless_forced() -> None:
    mine = Existing("ClusterQueue", "", "default", "gridloop", "gridloop-system")
    user = Existing("ClusterQueue", "", "research")
    left = purging.others([mine, user], "gridloop", "gridloop-system")

    assert left == [user]
    refused = purging.refusal(["clusterqueues.kueue.x-k8s.io"], left, force=False, confirmed=True)
    assert refused.startswith("--purge: 1 custom resources not from this release still exist:")
    assert "ClusterQueue research" in refused and "--force" in refused
    assert purging.refusal(["c"], left, force=True, confirmed=False).endswith("pass --yes)")
    assert purging.refusal(["c"], left, force=True, confirmed=True) == ""


def test_purge_touches_only_the_crds_gridloop_applied() -> None:
    managers = {"a.x.io": ["gridloop", "kube-apiserver"], "b.y.io": ["kubectl"]}

    assert purging.gridloops(managers, "gridloop") == ["a.x.io"]


def test_the_plan_reads_which_controllers_the_values_turn_on() -> None:
    values = planning.merged_values(
        {"kueue": {"enabled": True}, "kuberay": {"enabled": True}},
        [],
        ["kueue.enabled=false"],
    )

    assert planning.enabled(values) == {
        "kueue": False,
        "kuberay": True,
        "kaito": False,
        "agentSandbox": False,
        "dcgmExporter": False,
    }
    assert planning.min_kubernetes({"kubeVersion": ">=1.30.0-0"}) == "v1.30.0"


def test_an_object_another_controls_is_not_counted_as_left_behind() -> None:
    """agent-sandbox v1.0.3's warm pool owns its Sandboxes (controller: true): they go with
    the pool; an object merely referencing an owner, or none, is counted."""
    pool = {"kind": "SandboxWarmPool", "name": "default", "controller": True}
    assert purging.controlled({"ownerReferences": [pool]})
    assert not purging.controlled({"ownerReferences": [{**pool, "controller": False}]})
    assert not purging.controlled({"ownerReferences": []})
    assert not purging.controlled({})

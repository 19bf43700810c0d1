"""An install applies the chart's CRDs only when the cluster does not hold them exactly as
gridloop applied them: each carries its chart copy's digest, and must be Established."""

from __future__ import annotations

import copy

from gridloop.chart.crd_marks import DIGEST, as_applied, digest, marked

QUEUES = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {
        "name": "clusterqueues.kueue.x-k8s.io",
        "annotations": {"controller-gen.kubebuilder.io/version": "v0.18.0"},
    },
    "spec": {"group": "kueue.x-k8s.io", "versions": [{"name": "v1beta2", "served": True}]},
}
ESTABLISHED = {"conditions": [{"type": "Established", "status": "True"}]}


def on_cluster(crd: dict, status: dict | None = None) -> dict:
    """The CRD as the API server returns it after gridloop applied it."""
    return {**marked(crd), "status": status or ESTABLISHED}


def test_a_crd_as_gridloop_applied_it_and_established_is_not_applied_again() -> None:
    assert as_applied([QUEUES], {"clusterqueues.kueue.x-k8s.io": on_cluster(QUEUES)})


def test_the_mark_keeps_the_chart_copys_annotations_and_leaves_the_copy_as_it_was() -> None:
    before = copy.deepcopy(QUEUES)
    annotations = marked(QUEUES)["metadata"]["annotations"]

    assert annotations == {**QUEUES["metadata"]["annotations"], DIGEST: digest(QUEUES)}
    assert before == QUEUES


def test_a_crd_the_chart_changed_since_is_applied_again() -> None:
    older = copy.deepcopy(QUEUES)
    newer = copy.deepcopy(QUEUES)
    newer["spec"]["versions"].append({"name": "v1beta3", "served": True})
    dropped = copy.deepcopy(QUEUES)
    dropped["metadata"]["annotations"] = {}

    for chart in (newer, dropped):
        assert not as_applied([chart], {"clusterqueues.kueue.x-k8s.io": on_cluster(older)})


def test_a_missing_unmarked_or_not_yet_established_crd_is_applied() -> None:
    name = "clusterqueues.kueue.x-k8s.io"
    unmarked = {**QUEUES, "status": ESTABLISHED}  # applied by someone else
    pending = on_cluster(QUEUES, {"conditions": [{"type": "Established", "status": "False"}]})

    for live in (None, unmarked, pending):
        assert not as_applied([QUEUES], {name: live})


def test_the_digest_is_of_the_content_not_of_its_key_order() -> None:
    reordered = dict(reversed(list(QUEUES.items())))
    assert digest(reordered) == digest(QUEUES)

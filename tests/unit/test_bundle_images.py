"""images.txt lists every image the bundle runs: pod templates and the chart's values."""

from __future__ import annotations

import pytest

from gridloop.bundle import images


def _pod(*images_: str, init: str = "") -> dict[str, object]:
    spec: dict[str, object] = {
        "containers": [{"name": f"c{i}", "image": im} for i, im in enumerate(images_)]
    }
    if init:
        spec["initContainers"] = [{"name": "init", "image": init}]
    return spec


def _template(kind: str, pod: dict[str, object]) -> dict[str, object]:
    return {"apiVersion": "apps/v1", "kind": kind, "spec": {"template": {"spec": pod}}}


@pytest.mark.parametrize(
    "kind", ["Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job", "ReplicationController"]
)
def test_containers_and_init_containers_of_a_pod_template_are_listed(kind: str) -> None:
    doc = _template(kind, _pod("quay.io/kuberay/operator:v1.5.0", init="busybox:1.36"))

    assert images.in_manifests([doc]) == {"quay.io/kuberay/operator:v1.5.0", "busybox:1.36"}


def test_a_cron_jobs_job_template_is_searched() -> None:
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "spec": {"jobTemplate": {"spec": {"template": {"spec": _pod("cleaner:1", init="i:2")}}}},
    }

    assert images.in_manifests([cron]) == {"cleaner:1", "i:2"}


def test_a_bare_pod_and_ephemeral_containers_count_too() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "spec": {**_pod("a:1"), "ephemeralContainers": [{"name": "debug", "image": "debug:1"}]},
    }

    assert images.in_manifests([pod]) == {"a:1", "debug:1"}


def test_objects_without_pods_name_no_images() -> None:
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"image": "not-a-container:1"}}
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition"}
    empty = {"apiVersion": "apps/v1", "kind": "Deployment", "spec": None}

    assert images.in_manifests([config_map, crd, empty]) == set()


def test_values_images_as_maps_strings_and_with_the_chart_app_version_as_default_tag() -> None:
    values = {
        "health": {
            "image": {"repository": "ghcr.io/gridloop/health", "tag": "", "pullPolicy": "x"}
        },
        "sim": {"image": {"registry": "ghcr.io/", "repository": "gridloop/sim", "tag": "0.2.0"}},
        "pinned": {"image": {"repository": "r/p", "tag": "1", "digest": "sha256:abc"}},
        "sidecars": [{"name": "s", "image": "docker.io/library/busybox:1.36"}],
        "templated": {"image": "{{ .Values.registry }}/x:1"},
        "unrelated": {"image": {"pullPolicy": "IfNotPresent"}},
    }

    assert images.in_values(values, default_tag="0.1.0") == {
        "ghcr.io/gridloop/health:0.1.0",
        "ghcr.io/gridloop/sim:0.2.0",
        "r/p@sha256:abc",
        "docker.io/library/busybox:1.36",
    }


def test_values_that_are_not_a_mapping_name_no_images() -> None:
    assert images.in_values(None) == set()
    assert images.in_values({"image": {"repository": "bare"}}) == {"bare"}


def test_listing_is_sorted_unique_one_per_line() -> None:
    assert images.listing(["b:1", "a:2", "b:1"]) == "a:2\nb:1\n"
    assert images.listing([]) == ""

"""The bundle's edits to upstream: Kueue manages Jobs and Ray, operators run pinned images."""

from __future__ import annotations

import copy

import pytest
import yaml

from gridloop.bundle import adjustments
from gridloop.bundle.manifests import ManifestProblem
from gridloop.bundle.sources import ImagePin, source_for
from gridloop.versions import Component

UPSTREAM_CONFIG = """\
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
manageJobsWithoutQueueName: false
integrations:
  frameworks:
  - "batch/job"
  - "pod"
"""


def _config_map(config: str = UPSTREAM_CONFIG) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
        "data": {"controller_manager_config.yaml": config},
    }


def _deployment(name: str, container: str, image: str) -> dict[str, object]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {"containers": [{"name": container, "image": image}]}}},
    }


def _frameworks(docs: list[dict[str, object]]) -> list[str]:
    data = docs[0]["data"]
    assert isinstance(data, dict)
    config = yaml.safe_load(data["controller_manager_config.yaml"])
    return list(config["integrations"]["frameworks"])


def test_kueue_gets_jobs_and_ray_integrations_added_after_upstreams_own() -> None:
    wanted = ("batch/job", "ray.io/rayjob", "ray.io/raycluster")

    docs = adjustments.enable_kueue_frameworks([_config_map()], wanted)

    assert _frameworks(docs) == ["batch/job", "pod", "ray.io/rayjob", "ray.io/raycluster"]


def test_the_rest_of_kueues_config_is_kept_and_the_input_is_left_alone() -> None:
    original = [_config_map()]
    before = copy.deepcopy(original)

    docs = adjustments.enable_kueue_frameworks(original, ("ray.io/rayjob",))

    config = yaml.safe_load(docs[0]["data"]["controller_manager_config.yaml"])
    assert config["manageJobsWithoutQueueName"] is False
    assert config["kind"] == "Configuration"
    assert original == before


def test_a_config_without_integrations_gets_them() -> None:
    docs = adjustments.enable_kueue_frameworks(
        [_config_map("kind: Configuration\n")], ("batch/job",)
    )

    assert _frameworks(docs) == ["batch/job"]


@pytest.mark.parametrize(
    ("docs", "message"),
    [
        ([], "no ConfigMap 'kueue-manager-config'"),
        ([{**_config_map(), "data": {}}], "has no controller_manager_config.yaml"),
        ([_config_map("- a list\n")], "is not a mapping"),
    ],
    ids=["no-config-map", "no-config-key", "config-not-a-mapping"],
)
def test_a_kueue_config_that_moved_is_an_error_not_a_silent_skip(
    docs: list[dict[str, object]], message: str
) -> None:
    with pytest.raises(ManifestProblem, match=message):
        adjustments.enable_kueue_frameworks(docs, ("batch/job",))


def test_the_operator_image_is_pinned_to_the_versions_file_release() -> None:
    pin = ImagePin(
        "Deployment", "kueue-controller-manager", "manager", "registry.k8s.io/k:{version}"
    )
    staged = _deployment("kueue-controller-manager", "manager", "staging/kueue:main")

    docs = adjustments.pin_image([staged], pin, "v0.17.1")

    assert docs[0]["spec"]["template"]["spec"]["containers"][0]["image"] == (
        "registry.k8s.io/k:v0.17.1"
    )
    assert staged["spec"]["template"]["spec"]["containers"][0]["image"] == "staging/kueue:main"


def test_a_missing_image_target_is_an_error() -> None:
    pin = ImagePin("Deployment", "kuberay-operator", "kuberay-operator", "q/op:{version}")

    with pytest.raises(ManifestProblem, match="no container 'kuberay-operator'"):
        adjustments.pin_image([_deployment("kuberay-operator", "other", "x")], pin, "v1.5.0")


def test_kueues_source_asks_for_both_edits() -> None:
    kueue = Component("kueue", "v0.17.1", "sigs.k8s.io/kueue")
    docs = [_deployment("kueue-controller-manager", "manager", "x:main"), _config_map()]

    deployment, config_map = adjustments.adjust(source_for("kueue"), kueue, docs)

    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == (
        "registry.k8s.io/kueue/kueue:v0.17.1"
    )
    assert {"batch/job", "ray.io/rayjob", "ray.io/raycluster"} <= set(_frameworks([config_map]))

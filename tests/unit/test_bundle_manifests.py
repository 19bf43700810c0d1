"""Upstream manifests as data: CRDs and Namespaces survive an uninstall, CRDs go to crds/."""

from __future__ import annotations

import pytest
import yaml

from gridloop.bundle import manifests
from gridloop.bundle.manifests import ManifestProblem

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "clusterqueues.kueue.x-k8s.io"},
}
NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}}
DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "kueue-controller-manager", "namespace": "kueue-system"},
}


def test_every_crd_and_namespace_is_annotated_keep_and_nothing_else_is() -> None:
    files = manifests.layout("kueue", [NAMESPACE, CRD, DEPLOYMENT])

    crd, namespace, deployment = files["crds/kueue.yaml"][0], *files["upstream/kueue/kueue.yaml"]
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert namespace["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert "annotations" not in deployment["metadata"]


def test_keep_is_added_to_the_annotations_upstream_already_has() -> None:
    annotated = {**CRD, "metadata": {"name": "x", "annotations": {"controller-gen": "v0.19"}}}
    empty = {**CRD, "metadata": {"name": "y", "annotations": None}}

    assert manifests.kept(annotated)["metadata"]["annotations"] == {
        "controller-gen": "v0.19",
        "helm.sh/resource-policy": "keep",
    }
    assert manifests.kept(empty)["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert (
        "annotations" in annotated["metadata"]
        and "helm.sh/resource-policy" not in (annotated["metadata"]["annotations"])
    ), "the input is left alone"


def test_crds_go_to_helms_crd_folder_and_the_rest_keeps_upstream_order() -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "webhook"}}
    other_crd = {**CRD, "metadata": {"name": "workloads.kueue.x-k8s.io"}}

    files = manifests.layout("kueue", [NAMESPACE, CRD, DEPLOYMENT, other_crd, service])

    assert list(files) == ["crds/kueue.yaml", "upstream/kueue/kueue.yaml"]
    assert [manifests.name_of(d) for d in files["crds/kueue.yaml"]] == [
        "clusterqueues.kueue.x-k8s.io",
        "workloads.kueue.x-k8s.io",
    ]
    assert [d["kind"] for d in files["upstream/kueue/kueue.yaml"]] == [
        "Namespace",
        "Deployment",
        "Service",
    ]


def test_a_component_without_crds_gets_no_crd_file() -> None:
    assert list(manifests.layout("kuberay", [DEPLOYMENT])) == ["upstream/kuberay/kuberay.yaml"]


CONFIG = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kueue-manager-config"}}


def test_an_object_the_chart_renders_goes_to_bases_not_to_the_emitted_file() -> None:
    files = manifests.layout(
        "kueue", [NAMESPACE, CONFIG, DEPLOYMENT], bases=[("ConfigMap", "kueue-manager-config")]
    )

    assert files["upstream/kueue/bases/configmap-kueue-manager-config.yaml"] == [CONFIG]
    assert [d["kind"] for d in files["upstream/kueue/kueue.yaml"]] == ["Namespace", "Deployment"]


def test_a_base_upstream_does_not_have_is_an_error() -> None:
    with pytest.raises(ManifestProblem, match="no ConfigMap 'kueue-manager-config'"):
        manifests.layout("kueue", [DEPLOYMENT], bases=[("ConfigMap", "kueue-manager-config")])


def test_parse_skips_empty_documents_and_flattens_lists() -> None:
    text = (
        "---\n"
        + yaml.safe_dump(CRD)
        + "---\n---\n"
        + yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [NAMESPACE, DEPLOYMENT]})
    )

    docs = manifests.parse(text, "kueue.yaml")

    assert [d["kind"] for d in docs] == ["CustomResourceDefinition", "Namespace", "Deployment"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: [unclosed\n", "kueue.yaml: line 2 invalid YAML"),
        ("just a string\n", "kueue.yaml: document 1 is not a Kubernetes object"),
        ("apiVersion: v1\nmetadata: {}\n", "kueue.yaml: document 1 is not a Kubernetes object"),
    ],
    ids=["invalid-yaml", "a-string", "no-kind"],
)
def test_a_bad_manifest_is_one_line_naming_the_file(text: str, message: str) -> None:
    with pytest.raises(ManifestProblem) as caught:
        manifests.parse(text, "kueue.yaml")

    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_dump_round_trips_and_writes_embedded_files_as_blocks() -> None:
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kueue-manager-config"},
        "data": {"controller_manager_config.yaml": "apiVersion: v1\nkind: Configuration\n"},
    }

    text = manifests.dump([CRD, config_map])

    assert text.startswith("---\n")
    assert "controller_manager_config.yaml: |\n    apiVersion: v1\n" in text
    assert manifests.parse(text, "x") == [CRD, config_map]


def test_crd_files_are_one_json_line_per_object_and_read_back_the_same() -> None:
    described = {
        **CRD,
        "spec": {"description": 'quota: <b>"ünïcode"</b>\n\tindented', "versions": [1, 2.5]},
    }
    files = manifests.layout("kueue", [described, DEPLOYMENT, {**CRD, "metadata": {"name": "b"}}])

    text = manifests.dump_file("crds/kueue.yaml", files["crds/kueue.yaml"])

    assert text.isascii()
    assert text.splitlines()[:2] == [
        "---",
        "# CustomResourceDefinition clusterqueues.kueue.x-k8s.io",
    ]
    assert len(text.splitlines()) == 6, "three lines per CRD: separator, comment, object"
    assert manifests.parse(text, "crds/kueue.yaml") == files["crds/kueue.yaml"]
    rest = manifests.dump_file("upstream/kueue/kueue.yaml", files["upstream/kueue/kueue.yaml"])
    assert rest == manifests.dump([DEPLOYMENT]), "everything else stays readable YAML"


def test_an_object_given_again_replaces_the_first_in_its_place_as_a_second_apply_would() -> None:
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "c"}}
    first = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "c"}, "spec": 1}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "c"},
    }
    again = {**first, "spec": 2}
    other_namespace = {**first, "metadata": {"name": "c", "namespace": "elsewhere"}}

    applied = manifests.as_applied([account, first, role, again, other_namespace])

    assert applied == [account, again, role, other_namespace]

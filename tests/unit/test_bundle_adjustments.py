"""The bundle's edits to upstream: pinned images, and what ties each component to the chart.

KubeRay lands in the release namespace and Kueue restarts when the config the chart
renders changes. (The DCGM exporter is the chart's own template: nothing to edit.)
"""

from __future__ import annotations

import copy
import re

import pytest
from chart_files import CHART

from gridloop.bundle import adjustments
from gridloop.bundle.adjustments import CONFIG_CHECKSUM, PLACEHOLDERS, RELEASE_NAMESPACE
from gridloop.bundle.manifests import Doc, ManifestProblem
from gridloop.bundle.sources import ImagePin, source_for
from gridloop.versions import Component


def _workload(
    name: str, container: str, image: str = "x", kind: str = "Deployment", **pod: object
) -> Doc:
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {
            "template": {"spec": {"containers": [{"name": container, "image": image}], **pod}}
        },
    }


def _in(namespace: str, doc: Doc) -> Doc:
    return {**doc, "metadata": {**doc["metadata"], "namespace": namespace}}


def _pod(doc: Doc) -> Doc:
    return doc["spec"]["template"]["spec"]


# --- images ---


def test_the_operator_image_is_pinned_to_the_versions_file_release() -> None:
    pin = ImagePin(
        "Deployment", "kueue-controller-manager", "manager", "registry.k8s.io/k:{version}"
    )
    staged = _workload("kueue-controller-manager", "manager", "staging/kueue:main")

    docs = adjustments.pin_image([staged], pin, "v0.17.1")

    assert _pod(docs[0])["containers"][0]["image"] == "registry.k8s.io/k:v0.17.1"
    assert _pod(staged)["containers"][0]["image"] == "staging/kueue:main"


def test_a_missing_image_target_is_an_error() -> None:
    pin = ImagePin("Deployment", "kuberay-operator", "kuberay-operator", "q/op:{version}")

    with pytest.raises(ManifestProblem, match="no container 'kuberay-operator'"):
        adjustments.pin_image([_workload("kuberay-operator", "other")], pin, "v1.5.0")


# --- KubeRay: into the release namespace ---

KUBERAY = [
    _in("default", {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "op"}}),
    _in("default", _workload("kuberay-operator", "kuberay-operator")),
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "op"},
        "roleRef": {"kind": "ClusterRole", "name": "op"},
        "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": "default"}],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "op"},
    },
]


def test_kuberay_objects_and_the_accounts_they_bind_move_to_the_release_namespace() -> None:
    before = copy.deepcopy(KUBERAY)

    account, deployment, binding, role = adjustments.into_release_namespace(KUBERAY, "default")

    assert account["metadata"]["namespace"] == RELEASE_NAMESPACE
    assert deployment["metadata"]["namespace"] == RELEASE_NAMESPACE
    assert binding["subjects"][0]["namespace"] == RELEASE_NAMESPACE
    assert "namespace" not in binding["metadata"] and role == KUBERAY[3]
    assert before == KUBERAY, "the input is left alone"


def test_a_reference_to_the_old_namespace_the_bundle_cannot_move_is_an_error() -> None:
    hidden = _in("default", _workload("op", "op"))
    _pod(hidden)["containers"][0]["env"] = [{"name": "X", "namespace": "default"}]

    with pytest.raises(ManifestProblem, match=r"containers\[0\]\.env\[0\]\.namespace"):
        adjustments.into_release_namespace([hidden], "default")


def test_nothing_in_the_namespace_to_move_is_an_error() -> None:
    with pytest.raises(ManifestProblem, match="no object in namespace 'default'"):
        adjustments.into_release_namespace([_in("ray", _workload("op", "op"))], "default")


# --- Kueue restarts when its config changes ---

MOUNTS_CONFIG = {"volumes": [{"name": "c", "configMap": {"name": "kueue-manager-config"}}]}


def test_the_workload_mounting_the_config_carries_its_checksum() -> None:
    manager = _workload("kueue-controller-manager", "manager", **MOUNTS_CONFIG)
    other = _workload("other", "other")

    annotated, untouched = adjustments.restart_on_config_change(
        [manager, other], "kueue-manager-config"
    )

    assert annotated["spec"]["template"]["metadata"]["annotations"] == {
        "gridloop.io/config-checksum": CONFIG_CHECKSUM
    }
    assert untouched == other and "metadata" not in manager["spec"]["template"]


def test_a_config_nobody_mounts_is_an_error() -> None:
    with pytest.raises(
        ManifestProblem, match="no workload mounts ConfigMap 'kueue-manager-config'"
    ):
        adjustments.restart_on_config_change([_workload("m", "m")], "kueue-manager-config")


# --- what each source asks for ---


def test_kueue_is_pinned_on_a_rendering_and_tied_to_its_chart_rendered_config() -> None:
    kueue = Component("kueue", "v0.17.1", "sigs.k8s.io/kueue")
    source = source_for("kueue")
    docs = [_workload("kueue-controller-manager", "manager", "x:main", **MOUNTS_CONFIG)]

    (deployment,) = adjustments.integrate(source, adjustments.pin(source, kueue, docs))

    assert _pod(deployment)["containers"][0]["image"] == "registry.k8s.io/kueue/kueue:v0.17.1"
    assert CONFIG_CHECKSUM in deployment["spec"]["template"]["metadata"]["annotations"].values()
    assert source.chart_rendered == (("ConfigMap", "kueue-manager-config"),)


def test_kuberay_is_integrated_from_any_origin() -> None:
    (moved,) = adjustments.integrate(source_for("kuberay"), [KUBERAY[1]])

    assert moved["metadata"]["namespace"] == RELEASE_NAMESPACE


# --- readiness ---


def _probed(readiness: dict[str, object] | None, liveness: dict[str, object]) -> Doc:
    doc = _workload("kueue-controller-manager", "manager")
    container = _pod(doc)["containers"][0]
    if readiness is not None:
        container["readinessProbe"] = readiness
    container["livenessProbe"] = liveness
    return doc


def test_a_controller_is_probed_for_readiness_from_its_start_every_two_seconds() -> None:
    """As Kueue v0.19.2 ships it: first look at 5 s, then every 10 s (its webhook served at
    5 s and the pod was Ready at 12 s). The liveness probe, which restarts, is upstream's."""
    http = {"httpGet": {"path": "/readyz", "port": 8081}, "failureThreshold": 3}
    liveness = {"httpGet": {"path": "/healthz", "port": 8081}, "initialDelaySeconds": 15}
    doc = _probed({**http, "initialDelaySeconds": 5, "periodSeconds": 10}, liveness)
    before = copy.deepcopy(doc)

    (done,) = adjustments.ready_when_ready([doc])

    container = _pod(done)["containers"][0]
    assert container["readinessProbe"] == {**http, "periodSeconds": 2}
    assert container["livenessProbe"] == liveness
    assert doc == before


@pytest.mark.parametrize(
    "readiness",
    [
        None,
        {"tcpSocket": {"port": 53}, "periodSeconds": 2},
        {"exec": {"command": ["true"]}, "periodSeconds": 1},
    ],
    ids=["no-probe", "already-quick", "quicker"],
)
def test_a_quick_or_absent_readiness_probe_is_left_alone(readiness) -> None:
    doc = _probed(readiness, {"tcpSocket": {"port": 1}})

    assert adjustments.ready_when_ready([doc]) == [doc]


def test_the_placeholders_are_the_ones_templates_upstream_yaml_fills_in() -> None:
    """The exporter's counters ConfigMap placeholder went with the exporter's release file."""
    template = (CHART / "templates" / "upstream.yaml").read_text()

    assert PLACEHOLDERS == (RELEASE_NAMESPACE, CONFIG_CHECKSUM)
    assert set(re.findall(r"\$\{GRIDLOOP_[A-Z_]+\}", template)) == set(PLACEHOLDERS)


@pytest.mark.parametrize(
    ("args", "on"),
    [
        (["--extensions"], True),
        (["--extensions=true"], True),
        (["--extensions=false"], False),
        ([], False),
    ],
    ids=["bare", "true", "false", "absent"],
)
def test_the_flag_the_charts_objects_need_is_on_or_the_bundle_fails(
    args: list[str], on: bool
) -> None:
    container = {"name": "c", "image": "x", "args": args}
    docs = [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d"},
            "spec": {"template": {"spec": {"containers": [container]}}},
        }
    ]

    if on:
        adjustments.check_flag(docs, "d", "c", "--extensions", "where")
    else:
        with pytest.raises(ManifestProblem, match="without --extensions, which the chart"):
            adjustments.check_flag(docs, "d", "c", "--extensions", "where")


# --- a securityContext where upstream ships none ---


def test_a_controller_shipped_without_a_security_context_gets_a_locked_down_one() -> None:
    bare = _workload("agent-sandbox-controller", "c", initContainers=[{"name": "i"}])
    original = copy.deepcopy(bare)

    (locked,) = adjustments.locked_down([bare])

    pod = _pod(locked)
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    for container in [*pod["containers"], *pod["initContainers"]]:
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }
    assert bare == original  # the input is left alone


def test_upstreams_own_security_context_is_kept_as_it_is() -> None:
    own = {"runAsUser": 1000}  # less than the defaults: upstream's choice, not the bundle's
    doc = _workload("kueue", "manager", securityContext=own)
    _pod(doc)["containers"][0]["securityContext"] = {"readOnlyRootFilesystem": False}

    (kept,) = adjustments.locked_down([doc])

    assert _pod(kept)["securityContext"] == own
    assert _pod(kept)["containers"][0]["securityContext"] == {"readOnlyRootFilesystem": False}


def test_every_origin_gets_it_mirrors_included() -> None:
    name = "agent-sandbox-controller"
    controller = _workload(name, name)
    _pod(controller)["containers"][0]["args"] = ["--extensions"]
    (integrated,) = adjustments.integrate(source_for("agent-sandbox"), [controller])
    assert _pod(integrated)["securityContext"]["runAsNonRoot"] is True

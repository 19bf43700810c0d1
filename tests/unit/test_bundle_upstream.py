"""The real Kueue, KubeRay and agent-sandbox renderings from their pinned Go modules:
Kueue's and KubeRay's kustomized by the built kubectl, agent-sandbox's release files read
in the order its release script writes them.

Needs the Go module proxy (or Go's module cache) and the kubectl that
`gridloop local build` makes; without that kubectl these tests fail, and say
how to build it. The rendering cache is a temporary folder, so each run
renders for real.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from chart_files import CHART

from gridloop import versions
from gridloop.bundle import bundling, caching, charting, fetching
from gridloop.bundle.sources import COMPONENTS, source_for
from gridloop.errors import BuildError
from gridloop.local.addons import sandbox_installing
from gridloop.local.build import building
from gridloop.versions import Component

# the bundle renders Kueue and KubeRay with kubectl, built by `gridloop local build`
needs_kubectl = pytest.mark.needs_binaries("kubectl")

KEEP = "helm.sh/resource-policy"
KUEUE_CRDS = {
    "clusterqueues.kueue.x-k8s.io",
    "localqueues.kueue.x-k8s.io",
    "resourceflavors.kueue.x-k8s.io",
    "workloads.kueue.x-k8s.io",
    "cohorts.kueue.x-k8s.io",
}
KUBERAY_CRDS = {"rayclusters.ray.io", "rayjobs.ray.io", "rayservices.ray.io"}
SANDBOX_CRDS = {
    "sandboxes.agents.x-k8s.io",
    "sandboxclaims.extensions.agents.x-k8s.io",
    "sandboxtemplates.extensions.agents.x-k8s.io",
    "sandboxwarmpools.extensions.agents.x-k8s.io",
}
# the CRDs are megabytes: libyaml reads them in a fraction of the pure-Python time
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[bundling.Result]:
    versions.load.cache_clear()
    try:
        building.binary("kubectl")
    except BuildError as err:
        pytest.fail(f"rendering Kueue and KubeRay needs the built kubectl: {err}")
    tmp = tmp_path_factory.mktemp("bundle")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(caching, "folder", lambda comp: tmp / "cache" / f"{comp.name}-{comp.version}")
        patch.setattr(charting, "REPO_CHART", tmp / "no-chart")
        skip = frozenset(COMPONENTS) - {"kueue", "kuberay", "agent-sandbox"}
        first = bundling.bundle(bundling.Request(out=tmp / "dist", skip=skip))
        again = bundling.bundle(bundling.Request(out=tmp / "again", skip=skip))
        assert [got.origin for got in first.components] == ["rendered"] * 3
        assert [got.origin for got in again.components] == ["cached"] * 3
        yield first


def _docs(result: bundling.Result, path: str) -> list[dict[str, object]]:
    text = (result.folder / path).read_text()
    return [d for d in yaml.load_all(text, Loader=LOADER) if d]


def _named(docs: list[dict[str, object]], kind: str, name: str) -> dict:
    for doc in docs:
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"no {kind} {name} among {len(docs)} objects")


@needs_kubectl
def test_every_crd_is_bundled_and_kept(bundled: bundling.Result) -> None:
    kueue = _docs(bundled, "crds/kueue.yaml")
    kuberay = _docs(bundled, "crds/kuberay.yaml")
    sandbox = _docs(bundled, "crds/agent-sandbox.yaml")

    assert {d["metadata"]["name"] for d in kueue} >= KUEUE_CRDS
    assert {d["metadata"]["name"] for d in kuberay} >= KUBERAY_CRDS
    assert {d["metadata"]["name"] for d in sandbox} == SANDBOX_CRDS
    for crd in kueue + kuberay + sandbox:
        assert crd["kind"] == "CustomResourceDefinition"
        assert crd["metadata"]["annotations"][KEEP] == "keep"


@needs_kubectl
def test_no_crd_hides_outside_the_crd_files(bundled: bundling.Result) -> None:
    for component in ("kueue", "kuberay", "agent-sandbox"):
        rest = _docs(bundled, f"upstream/{component}/{component}.yaml")
        assert rest and all(d["kind"] != "CustomResourceDefinition" for d in rest)


@needs_kubectl
def test_kueue_runs_the_released_image_in_its_own_namespace(bundled: bundling.Result) -> None:
    kueue: Component = versions.get("kueue")
    rest = _docs(bundled, "upstream/kueue/kueue.yaml")

    deployment = _named(rest, "Deployment", "kueue-controller-manager")
    namespace = _named(rest, "Namespace", "kueue-system")

    images = [c["image"] for c in deployment["spec"]["template"]["spec"]["containers"]]
    assert f"registry.k8s.io/kueue/kueue:{kueue.version}" in images
    assert deployment["metadata"]["namespace"] == "kueue-system"
    assert namespace["metadata"]["annotations"][KEEP] == "keep"


@needs_kubectl
def test_kueues_config_is_bundled_as_the_base_the_chart_renders_from(
    bundled: bundling.Result,
) -> None:
    (config_map,) = _docs(bundled, "upstream/kueue/bases/configmap-kueue-manager-config.yaml")
    emitted = _docs(bundled, "upstream/kueue/kueue.yaml")

    config = yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
    schema = json.loads((CHART / "values.schema.json").read_text())
    known = schema["properties"]["kueue"]["properties"]["integrations"]["items"]["enum"]

    assert config["kind"] == "Configuration"
    assert not [d for d in emitted if d["metadata"]["name"] == "kueue-manager-config"]
    # every integration upstream enables is one the chart's values may name
    assert set(config["integrations"]["frameworks"]) <= set(known)
    deployment = _named(emitted, "Deployment", "kueue-controller-manager")
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["gridloop.io/config-checksum"] == "${GRIDLOOP_CONFIG_CHECKSUM}"


@needs_kubectl
def test_kuberay_lands_in_the_release_namespace(bundled: bundling.Result) -> None:
    docs = _docs(bundled, "upstream/kuberay/kuberay.yaml")

    namespaced = [d for d in docs if "namespace" in d["metadata"]]
    assert {d["metadata"]["namespace"] for d in namespaced} == {"${GRIDLOOP_RELEASE_NAMESPACE}"}
    binding = _named(docs, "ClusterRoleBinding", "kuberay-operator")
    assert {s["namespace"] for s in binding["subjects"]} == {"${GRIDLOOP_RELEASE_NAMESPACE}"}
    assert "default" not in json.dumps(docs)


@needs_kubectl
def test_kuberay_runs_the_released_image_without_a_batch_scheduler_flag(
    bundled: bundling.Result,
) -> None:
    deployment = _named(
        _docs(bundled, "upstream/kuberay/kuberay.yaml"), "Deployment", "kuberay-operator"
    )

    (container,) = deployment["spec"]["template"]["spec"]["containers"]

    assert container["image"] == f"quay.io/kuberay/operator:{versions.get('kuberay').version}"
    assert not any("batch-scheduler" in arg for arg in container.get("args", []))


@needs_kubectl
def test_agent_sandbox_runs_one_controller_with_its_extensions_and_released_image(
    bundled: bundling.Result,
) -> None:
    docs = _docs(bundled, "upstream/agent-sandbox/agent-sandbox.yaml")

    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]

    assert deployment["metadata"] == {
        "name": "agent-sandbox-controller",
        "namespace": "agent-sandbox-system",
        "labels": {"app": "agent-sandbox-controller"},
    }
    assert container["image"] == (
        f"registry.k8s.io/agent-sandbox/agent-sandbox-controller:"
        f"{versions.get('agent-sandbox').version}"
    )
    assert "--extensions" in container["args"], "extensions.controller.yaml's copy wins"
    roles = {d["metadata"]["name"] for d in docs if d["kind"] == "ClusterRole"}
    assert roles == {"agent-sandbox-controller", "agent-sandbox-controller-extensions"}
    assert _named(docs, "Namespace", "agent-sandbox-system")["metadata"]["annotations"][KEEP]
    identities = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert len(identities) == len(set(identities)), "each object once in the release"


@needs_kubectl
def test_every_controller_is_probed_for_readiness_from_its_start_every_two_seconds(
    bundled: bundling.Result,
) -> None:
    """Upstream's Kueue waits 5 s then looks every 10, KubeRay's 10 then every 5
    (adjustments.ready_when_ready)."""
    probes = {}
    for component in ("kueue", "kuberay", "agent-sandbox"):
        for doc in _docs(bundled, f"upstream/{component}/{component}.yaml"):
            if doc["kind"] == "Deployment":
                for container in doc["spec"]["template"]["spec"]["containers"]:
                    if "readinessProbe" in container:
                        probes[doc["metadata"]["name"]] = container["readinessProbe"]

    assert {"kueue-controller-manager", "kuberay-operator"} <= set(probes)
    for name, probe in probes.items():
        assert "initialDelaySeconds" not in probe and probe["periodSeconds"] <= 2, (name, probe)


@needs_kubectl
def test_images_txt_lists_every_operator(bundled: bundling.Result) -> None:
    listed = Path(bundled.images_file).read_text().splitlines()

    assert listed == sorted(listed)
    pinned = {name: versions.get(name).version for name in ("kueue", "kuberay", "agent-sandbox")}
    assert f"registry.k8s.io/kueue/kueue:{pinned['kueue']}" in listed
    assert f"quay.io/kuberay/operator:{pinned['kuberay']}" in listed
    assert (
        f"registry.k8s.io/agent-sandbox/agent-sandbox-controller:{pinned['agent-sandbox']}"
        in listed
    )


def test_a_release_file_the_module_lacks_is_one_line_naming_it(tmp_path: Path) -> None:
    source = dataclasses.replace(
        source_for("agent-sandbox"), module_files=("k8s/controller.yaml", "k8s/no-such.yaml")
    )
    comp = versions.get("agent-sandbox")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(caching, "folder", lambda _comp: tmp_path / "work")
        with pytest.raises(BuildError) as failed:
            fetching.render(source, comp)

    message = str(failed.value)
    assert message.startswith(f"agent-sandbox {comp.version}: no readable k8s/no-such.yaml in ")
    assert "\n" not in message


def test_local_up_applies_agent_sandboxes_crds_as_the_bundle_ships_them() -> None:
    """`gridloop local up` applies these before it starts the controller; `gridloop
    install` applies the bundle's crds/agent-sandbox.yaml: the same objects."""
    crds = sandbox_installing.crds()

    assert {crd["metadata"]["name"] for crd in crds} == SANDBOX_CRDS
    assert all(crd["metadata"]["annotations"][KEEP] == "keep" for crd in crds)

"""The chart as `gridloop bundle` ships it: gridloop's templates around the upstream manifests.

Kueue, KubeRay and agent-sandbox are the real renderings of their pinned Go modules
(from the rendering cache, rendered first if it is empty: that needs the Go module proxy
and the built kubectl); KAITO is left out. The DCGM exporter is the chart's own template,
carried by the bundle's copy of the chart. The real helm (4, and 3 for lint) renders the
result; the objects are asserted on."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_files import PROFILE_NAMES

from gridloop.bundle import digests
from gridloop.errors import BuildError
from gridloop.local.build.building import binary

# the real helm 4 and 3, on a bundle rendered with kubectl: built by `gridloop local build`
pytestmark = pytest.mark.needs_binaries("helm", "helm3", "kubectl")

NAMESPACE = "gridloop-system"
NOT_BUNDLED = "kaito.enabled=false"
Doc = dict[str, Any]


def _helm(name: str) -> str:
    try:
        return str(binary(name))
    except BuildError as err:
        pytest.fail(f"{err}: these tests run the real {name}", pytrace=False)


@pytest.fixture(scope="module")
def bundled(bundled_chart: Path) -> Path:
    """tests/conftest.py's bundle of charts/gridloop, shared by the modules that read it."""
    return bundled_chart


def helm(*args: str, home: Path, name: str = "helm") -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "KUBECONFIG": "/dev/null"}
    return subprocess.run(
        [_helm(name), *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def render(
    chart: Path, home: Path, *sets: str, namespace: str = NAMESPACE, extra: tuple[str, ...] = ()
) -> list[Doc]:
    args = ["template", "gridloop", str(chart), f"--namespace={namespace}", *extra]
    done = helm(*args, f"--set={NOT_BUNDLED}", *(f"--set={s}" for s in sets), home=home)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def render_error(chart: Path, home: Path, *sets: str) -> str:
    args = ["template", "gridloop", str(chart), f"--set={NOT_BUNDLED}"]
    done = helm(*args, *(f"--set={s}" for s in sets), home=home)
    assert done.returncode != 0, "rendered although it should not"
    return done.stderr


def named(docs: list[Doc], kind: str, name: str) -> Doc:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: found {len(found)}"
    return found[0]


def kueue_config(docs: list[Doc]) -> dict[str, Any]:
    config_map = named(docs, "ConfigMap", "kueue-manager-config")
    assert config_map["metadata"]["namespace"] == "kueue-system"
    loaded: dict[str, Any] = yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
    return loaded


def pod_templates(docs: list[Doc]) -> list[Doc]:
    kinds = ("Deployment", "DaemonSet", "StatefulSet")
    return [d["spec"]["template"]["spec"] for d in docs if d["kind"] in kinds]


# --- every profile, Helm 4 and Helm 3 ---


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_every_profile_lints_and_renders_the_bundled_chart_on_helm_4_and_3(
    bundled: Path, tmp_path: Path, profile: str
) -> None:
    values = f"--values={bundled / 'profiles' / f'{profile}.yaml'}"
    rendered = {}
    for name in ("helm", "helm3"):
        lint = helm(
            "lint",
            "--strict",
            str(bundled),
            values,
            f"--set={NOT_BUNDLED}",
            home=tmp_path,
            name=name,
        )
        assert lint.returncode == 0, lint.stdout + lint.stderr
        assert "funcMap fail" not in lint.stderr, lint.stderr
        done = helm(
            "template",
            "gridloop",
            str(bundled),
            values,
            f"--set={NOT_BUNDLED}",
            home=tmp_path,
            name=name,
        )
        assert done.returncode == 0, done.stderr
        docs = [d for d in yaml.safe_load_all(done.stdout) if d]
        rendered[name] = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert rendered["helm"] == rendered["helm3"]
    if profile not in ("local", "minimal"):  # the profiles that install every upstream part
        assert {("Deployment", "kueue-controller-manager"), ("Deployment", "kuberay-operator"),
                ("DaemonSet", "gridloop-dcgm-exporter")} <= rendered["helm"]  # fmt: skip


# --- Kueue's configuration comes from values ---


def test_kueue_runs_with_the_integrations_and_metrics_values_name(
    bundled: Path, tmp_path: Path
) -> None:
    docs = render(bundled, tmp_path)
    config = kueue_config(docs)

    assert config["integrations"]["frameworks"] == [
        "batch/job",
        "ray.io/rayjob",
        "ray.io/raycluster",
    ]
    assert config["metrics"]["enableClusterQueueResources"] is True
    # the rest is upstream's, matching upstream's Deployment
    assert config["metrics"]["bindAddress"] == ":8443" and config["webhook"]["port"] == 9443

    narrowed = kueue_config(
        render(
            bundled,
            tmp_path,
            "kueue.integrations={batch/job,pod}",
            "kueue.metrics.enableClusterQueueResources=false",
        )
    )
    assert narrowed["integrations"]["frameworks"] == ["batch/job", "pod"]
    assert narrowed["metrics"]["enableClusterQueueResources"] is False


def test_wait_for_pods_ready_is_on_by_default_as_in_kueue_and_as_values_say(
    bundled: Path, tmp_path: Path
) -> None:
    default = kueue_config(render(bundled, tmp_path))
    assert default["waitForPodsReady"] == {"timeout": "30m", "blockAdmission": False}
    assert "featureGates" not in default

    # Kueue v0.19 turns it on when the block is absent: off is its own feature gate
    off = kueue_config(render(bundled, tmp_path, "kueue.waitForPodsReady.enabled=false"))
    assert "waitForPodsReady" not in off
    assert off["featureGates"] == {"DisableWaitForPodsReady": True}

    local = f"--values={bundled / 'profiles' / 'local.yaml'}"
    on = kueue_config(render(bundled, tmp_path, namespace=NAMESPACE, extra=(local,)))
    assert on["waitForPodsReady"] == {"timeout": "10m", "blockAdmission": False}

    strict = kueue_config(
        render(
            bundled,
            tmp_path,
            "kueue.waitForPodsReady.enabled=true",
            "kueue.waitForPodsReady.timeout=90s",
            "kueue.waitForPodsReady.blockAdmission=true",
        )
    )
    assert strict["waitForPodsReady"] == {"timeout": "90s", "blockAdmission": True}


def test_a_bad_wait_for_pods_ready_timeout_is_refused_naming_the_key(
    bundled: Path, tmp_path: Path
) -> None:
    error = render_error(bundled, tmp_path, "kueue.waitForPodsReady.timeout=ten minutes")
    assert "/kueue/waitForPodsReady/timeout" in error and "ten minutes" in error


def test_changing_the_integrations_restarts_kueue_and_nothing_else_does(
    bundled: Path, tmp_path: Path
) -> None:
    def checksum(*sets: str) -> str:
        deployment = named(
            render(bundled, tmp_path, *sets), "Deployment", "kueue-controller-manager"
        )
        value: str = deployment["spec"]["template"]["metadata"]["annotations"][
            "gridloop.io/config-checksum"
        ]
        return value

    before = checksum()

    assert checksum("health.replicas=3") == before
    assert checksum("kueue.integrations={batch/job}") != before
    assert len(before) == len(hashlib.sha256().hexdigest())


def _failure_policies(docs: list[Doc]) -> dict[str, str]:
    return {
        w["name"]: w["failurePolicy"]
        for d in docs
        if d["kind"].endswith("WebhookConfiguration") and d["metadata"]["name"].startswith("kueue-")
        for w in d["webhooks"]
    }


def test_kueues_webhooks_for_kinds_it_does_not_manage_fail_open(
    bundled: Path, tmp_path: Path
) -> None:
    """Else, while Kueue's pod is down, no pod, Deployment or StatefulSet can be created
    outside kube-system and kueue-system (tests/cluster/test_health_node_loss.py)."""
    policies = _failure_policies(render(bundled, tmp_path))

    core = {f"{mv}{kind}.kb.io" for mv in "mv" for kind in ("pod", "deployment", "statefulset")}
    assert {name: policies[name] for name in core} == dict.fromkeys(core, "Ignore")
    # what kueue.integrations manages, and Kueue's own kinds, stay fail-closed
    for name in ("mjob.kb.io", "vjob.kb.io", "vrayjob.kb.io", "vclusterqueue.kb.io"):
        assert policies[name] == "Fail", name

    managed = _failure_policies(render(bundled, tmp_path, "kueue.integrations={batch/job,pod}"))
    assert managed["mpod.kb.io"] == managed["vpod.kb.io"] == "Fail"
    assert managed["mdeployment.kb.io"] == "Ignore"


def test_an_integration_kueue_does_not_know_is_refused_naming_the_key(
    bundled: Path, tmp_path: Path
) -> None:
    error = render_error(bundled, tmp_path, "kueue.integrations={batch/jobs}")

    assert "/kueue/integrations/0" in error


# --- KubeRay, in the release namespace ---


def test_kuberay_lands_in_the_release_namespace(bundled: Path, tmp_path: Path) -> None:
    docs = render(bundled, tmp_path, namespace="ray-ops")

    kuberay = [
        d
        for d in docs
        if d["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "kuberay"
    ]
    assert named(kuberay, "Deployment", "kuberay-operator")["metadata"]["namespace"] == "ray-ops"
    namespaced = [d for d in kuberay if "namespace" in d["metadata"]]
    assert {d["metadata"]["namespace"] for d in namespaced} == {"ray-ops"}
    bindings = (
        ("ClusterRoleBinding", "kuberay-operator"),
        ("RoleBinding", "kuberay-operator-leader-election"),
    )
    for kind, name in bindings:
        assert {s["namespace"] for s in named(kuberay, kind, name)["subjects"]} == {"ray-ops"}


# --- the DCGM exporter is the chart's own ---


def test_the_bundle_runs_the_charts_exporter_on_its_counters_and_bundles_none(
    bundled: Path, tmp_path: Path
) -> None:
    docs = render(bundled, tmp_path, "dcgmExporter.counters.configMapName=fleet-counters")

    pod = named(docs, "DaemonSet", "gridloop-dcgm-exporter")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["counters"]["configMap"]["name"] == "fleet-counters"
    assert "counters.csv" in named(docs, "ConfigMap", "fleet-counters")["data"]
    assert not (bundled / "upstream" / "dcgm-exporter").exists()
    assert not [d for d in docs if d["metadata"]["name"] == "dcgm-exporter"]


# --- air-gapped: every image from the private registry ---


def test_air_gapped_pulls_every_image_from_the_private_registry_by_its_listed_name(
    bundled: Path, tmp_path: Path
) -> None:
    listed = (bundled.parent / "images.txt").read_text().splitlines()
    values = bundled / "profiles" / "air-gapped.yaml"
    registry = yaml.safe_load(values.read_text())["imageRegistry"]
    model = {"name": "m", "uri": "s3://b/m", "revision": "r1", "gpus": "1", "runtime": "vllm"}
    models = ",".join(f"inference.models[0].{k}={v}" for k, v in model.items())

    done = helm(
        "template",
        "gridloop",
        str(bundled),
        f"--values={values}",
        f"--set={NOT_BUNDLED},{models}",
        home=tmp_path,
    )

    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    images = {c["image"] for pod in pod_templates(docs) for c in pod["containers"]}
    assert len(images) >= 4  # Kueue, KubeRay, the exporter, the health service, vLLM
    for image in images:
        assert image.startswith(f"{registry}/"), image
        assert image.removeprefix(f"{registry}/") in listed, image
    vllm = named(docs, "Deployment", "m")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in vllm["env"]


# --- a bundle that does not match the chart ---


def test_a_placeholder_the_chart_does_not_know_fails_the_render(
    bundled: Path, tmp_path: Path
) -> None:
    chart = tmp_path / "gridloop"
    shutil.copytree(bundled, chart)
    (chart / "upstream" / "kuberay" / "z-newer.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: ${GRIDLOOP_ZONE}}\n"
    )

    error = render_error(chart, tmp_path)

    assert "upstream/kuberay/z-newer.yaml has a placeholder this chart does not fill in" in error


def test_a_kueue_bundle_without_its_config_base_fails_with_what_to_do(
    bundled: Path, tmp_path: Path
) -> None:
    chart = tmp_path / "gridloop"
    shutil.copytree(bundled, chart)
    shutil.rmtree(chart / "upstream" / "kueue" / "bases")

    error = render_error(chart, tmp_path)

    assert "no upstream/kueue/bases/configmap-kueue-manager-config.yaml" in error
    assert 'rebuild the chart with "gridloop bundle"' in error


def _digest_of(name: str) -> str:
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


@pytest.mark.parametrize("registry", ["", "mirror.example:5000/gridloop"])
def test_the_bundled_chart_renders_each_pinned_image_by_digest_mirrored_or_not(
    bundled: Path, tmp_path: Path, registry: str
) -> None:
    chart = tmp_path / "gridloop"
    shutil.copytree(bundled, chart)
    listed = (bundled.parent / "images.txt").read_text().split()
    pinned = digests.Resolved({image: _digest_of(image) for image in listed}, [])
    (chart / "upstream" / digests.FILE).write_text(digests.file_text(pinned))
    local = ("-f", str(chart / "profiles" / "local.yaml"))

    docs = render(chart, tmp_path, f"imageRegistry={registry}", extra=local)

    text = yaml.safe_dump_all(docs, width=1000)
    shown = set(re.findall(r"^\s*(?:- )?image: [\"']?([^\"'\s]+)", text, re.M))
    controllers = {
        "kueue/kueue",
        "kuberay/operator",
        "agent-sandbox-controller",
        "gridloop/gridloop",
    }
    assert all(any(c in s for s in shown) for c in controllers), shown
    prefix = f"{registry}/" if registry else ""
    for image in shown:
        assert image.startswith(prefix), image
        name, _, digest = image.removeprefix(prefix).partition("@")
        assert name in listed and digest == _digest_of(name), image


POLICY_TEST = "gridloop-test-policies"  # the `helm test` hook's pod, Role and namespace


@pytest.mark.parametrize("off", ["", "kuberay.enabled=false", "policies.rayTokenAuth=false"])
def test_helm_test_probes_the_ray_token_policy_where_kuberay_runs(
    bundled: Path, tmp_path: Path, off: str
) -> None:
    docs = render(bundled, tmp_path, *([off] if off else []))

    (container,) = named(docs, "Pod", POLICY_TEST)["spec"]["containers"]
    command = container["command"]
    rules = named(docs, "Role", POLICY_TEST)["rules"]
    ray_rule = {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["create"]}
    if off:
        assert "--ray-policy" not in command and ray_rule not in rules
        return
    assert command[command.index("--ray-policy") + 1] == "gridloop-ray-token-auth"
    assert ray_rule in rules  # create only, in the scratch namespace only
    assert named(docs, "Role", POLICY_TEST)["metadata"]["namespace"] == POLICY_TEST
    # the scratch namespace is one the policy's labelled binding matches
    binding = named(docs, "ValidatingAdmissionPolicyBinding", "gridloop-ray-token-auth-labelled")
    team, _ = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert team["key"] in named(docs, "Namespace", POLICY_TEST)["metadata"]["labels"]

"""The chart as Helm users take it: `helm package`'s tarball installed with a plain
`helm install`, the same package pushed to the local registry and installed from
`oci://`, `helm test` passing, and a plain `helm uninstall` leaving no queue behind.

Only Helm runs here (the cluster's own build), no gridloop command: the tarball is the
one `gridloop bundle --tarball` writes (KAITO left out: its release host is out of reach
here). The values are the package's local profile and the cluster's fleet, as a user
passes theirs. What `helm test` runs is the chart's hooks in gridloop's image: the health
service answers, and each admission policy refuses what it must and admits the same
object made compliant.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException
from platform_install import KEPT_NAMESPACES, remove_kept_namespaces

from gridloop.bundle import bundling

pytestmark = pytest.mark.cluster

NAMESPACE = "gridloop-system"
KEPT = KEPT_NAMESPACES[1:]  # not the release namespace: `local up` made it
TEST_NAMESPACE = "gridloop-test-policies"  # the policies test's scratch namespace


@dataclass(frozen=True)
class Helm:
    binary: Path
    env: dict[str, str]
    tarball: Path
    values: tuple[Path, ...]

    def __call__(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.binary), *args], capture_output=True, text=True, env=self.env, timeout=timeout
        )

    def values_args(self) -> list[str]:
        return [arg for path in self.values for arg in ("-f", str(path))]


@pytest.fixture(scope="module")
def helm(local_cluster, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    work = tmp_path_factory.mktemp("helm-native")
    result = bundling.bundle(
        bundling.Request(out=work / "dist", skip=frozenset({"kaito"}), tarball=True)
    )
    assert result.tarball is not None
    profile = work / "local.yaml"
    with tarfile.open(result.tarball) as tar:
        member = tar.extractfile("gridloop/profiles/local.yaml")
        assert member is not None
        profile.write_bytes(member.read())
    fleet = yaml.safe_load((local_cluster.state.dir / "fleet.yaml").read_text())
    fleet_values = work / "fleet-values.yaml"
    fleet_values.write_text(yaml.safe_dump({"fleet": fleet}, sort_keys=False))
    env = {**os.environ, "KUBECONFIG": str(local_cluster.kubeconfig)}
    for key in ("CACHE", "CONFIG", "DATA"):
        env[f"HELM_{key}_HOME"] = str(work / "helm" / key.lower())
    return Helm(
        local_cluster.state.dir / "bin" / "helm", env, result.tarball, (profile, fleet_values)
    )


def _release_queues(api: client.ApiClient) -> list[str]:
    custom = client.CustomObjectsApi(api)
    found = []
    for plural in ("clusterqueues", "resourceflavors", "cohorts"):
        items = custom.list_cluster_custom_object("kueue.x-k8s.io", "v1beta2", plural)["items"]
        found += [
            f"{plural}/{o['metadata']['name']}"
            for o in items
            if (o["metadata"].get("labels") or {}).get("app.kubernetes.io/part-of") == "gridloop"
        ]
    return found


def _clean_up(helm: Helm, local_cluster) -> None:
    helm("uninstall", "gridloop", "-n", NAMESPACE, "--wait", "--timeout", "3m")
    try:  # the policies test's namespace: kept after a pass, not waited for here
        local_cluster.core.delete_namespace(TEST_NAMESPACE)
    except ApiException as err:
        if err.status != 404:
            raise
    remove_kept_namespaces(local_cluster.core, KEPT)


def test_a_plain_helm_install_of_the_package_passes_helm_test(helm: Helm, local_cluster) -> None:
    try:
        installed = helm(
            "install", "gridloop", str(helm.tarball), "-n", NAMESPACE, *helm.values_args(),
            "--wait", "--timeout", "5m",
        )  # fmt: skip
        assert installed.returncode == 0, installed.stderr
        assert "STATUS: deployed" in installed.stdout

        tested = helm("test", "gridloop", "-n", NAMESPACE, "--logs", "--timeout", "5m")

        assert tested.returncode == 0, tested.stdout + tested.stderr
        assert "selftest health: all 2 checks passed" in tested.stdout
        assert "selftest policies: all 6 checks passed" in tested.stdout
        assert "was refused by gridloop-gpu-jobs-queued" in tested.stdout
        ray = "a Ray cluster without token authentication in namespace gridloop-test-policies"
        assert f"ok: {ray} was refused by gridloop-ray-token-auth" in tested.stdout

        removed = helm("uninstall", "gridloop", "-n", NAMESPACE, "--wait", "--timeout", "3m")

        assert removed.returncode == 0, removed.stderr
        # the pre-delete hook deleted the queues while Kueue ran: none is left terminating
        assert _release_queues(local_cluster.api) == []
    finally:
        _clean_up(helm, local_cluster)


def test_the_package_installs_from_the_local_registry_over_oci(helm: Helm, local_cluster) -> None:
    registry = f"127.0.0.1:{local_cluster.state.ports.registry}"
    pushed = helm("push", str(helm.tarball), f"oci://{registry}/charts", "--plain-http")
    assert pushed.returncode == 0, pushed.stderr
    assert f"Pushed: {registry}/charts/gridloop:0.1.0" in pushed.stdout + pushed.stderr
    reference = f"oci://{registry}/charts/gridloop"

    shown = helm("show", "values", reference, "--version", "0.1.0", "--plain-http")
    assert shown.returncode == 0, shown.stderr
    with tarfile.open(helm.tarball) as tar:
        member = tar.extractfile("gridloop/values.yaml")
        assert member is not None
        assert shown.stdout.strip() == member.read().decode().strip()

    try:
        installed = helm(
            "install", "gridloop", reference, "--version", "0.1.0", "--plain-http",
            "-n", NAMESPACE, *helm.values_args(), "--wait", "--timeout", "5m",
        )  # fmt: skip
        assert installed.returncode == 0, installed.stderr
        listed = helm("list", "-n", NAMESPACE, "-o", "json")
        (release,) = [r for r in yaml.safe_load(listed.stdout) if r["name"] == "gridloop"]
        assert release["chart"] == "gridloop-0.1.0" and release["status"] == "deployed"
    finally:
        _clean_up(helm, local_cluster)
    assert _release_queues(local_cluster.api) == []

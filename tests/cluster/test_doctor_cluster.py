"""`gridloop doctor` against the shared local cluster: as its admin, as a user with no
rights (a ServiceAccount's token), and with a name the chart needs already taken.

The bundle is built as the chart tests build it (without KAITO and the DCGM
exporter); doctor renders it with the local profile and the cluster's own fleet.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from gridloop.bundle import bundling
from gridloop.chart import objects, rendering

pytestmark = pytest.mark.cluster

GRIDLOOP = str(Path(sys.executable).parent / "gridloop")
SKIPPED = frozenset({"kaito", "dcgm-exporter"})


@dataclass(frozen=True)
class Setup:
    chart: Path
    values: Path
    env: dict[str, str]
    kubeconfig: Path

    def gridloop(
        self, *args: str, kubeconfig: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        cmd = [GRIDLOOP, *args, "--chart", str(self.chart), "--profile", "local"]
        cmd += ["-f", str(self.values), "--kubeconfig", str(kubeconfig or self.kubeconfig)]
        return subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=300)


@pytest.fixture(scope="module")
def setup(local_cluster, tmp_path_factory: pytest.TempPathFactory) -> Setup:
    work = tmp_path_factory.mktemp("doctor")
    bundle = bundling.bundle(bundling.Request(out=work / "dist", skip=SKIPPED))
    fleet = yaml.safe_load((local_cluster.state.dir / "fleet.yaml").read_text())
    values = work / "fleet-values.yaml"
    values.write_text(yaml.safe_dump({"fleet": fleet}, sort_keys=False))
    env = dict(os.environ)
    for key in ("CACHE", "CONFIG", "DATA"):
        env[f"HELM_{key}_HOME"] = str(work / "helm" / key.lower())
    return Setup(bundle.folder, values, env, local_cluster.kubeconfig)


def _checks(result: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    return {c["name"]: c for c in json.loads(result.stdout)["checks"]}


def test_the_local_cluster_is_ready_for_the_local_profile(setup: Setup) -> None:
    result = setup.gridloop("doctor", "--release", "doctor-ok", "-o", "json")

    assert result.returncode == 0, result.stdout + result.stderr
    found = _checks(result)
    assert {c["status"] for c in found.values()} == {"pass"}, found
    assert found["gpu-nodes"]["detail"] == "24 GPU nodes, 192 GPUs"
    assert found["gpu-labels"]["detail"] == "every one of 4 Kueue flavors has nodes"
    # no Kueue runs beside the control plane: the chart brings its own, as a pod
    assert found["kueue"]["detail"] == "installed by this chart (Kueue v0.17.1)"


def test_the_table_shows_each_check_with_a_mark_and_a_summary(setup: Setup) -> None:
    result = setup.gridloop("doctor", "--release", "doctor-ok")

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("doctor: https://127.0.0.1:")
    assert any(line.startswith("  ✓ kubernetes-version") for line in lines)
    assert lines[-1].endswith(", 0 fail")


@pytest.fixture
def powerless(local_cluster, namespace: str, tmp_path: Path) -> Path:
    """A kubeconfig for a ServiceAccount no role is bound to (a TokenRequest token)."""
    core = local_cluster.core
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "nobody"}})
    token = core.create_namespaced_service_account_token(
        "nobody", namespace, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    config = yaml.safe_load(local_cluster.kubeconfig.read_text())
    config["users"][0]["user"] = {"token": token}
    path = tmp_path / "nobody.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_user_without_rbac_gets_the_failed_checks_and_their_fixes(
    setup: Setup, powerless: Path
) -> None:
    result = setup.gridloop("doctor", "--release", "doctor-rbac", kubeconfig=powerless)

    assert result.returncode == 3, result.stdout + result.stderr
    assert result.stderr.strip() == "error: doctor: failed: permissions (fixes above)"
    lines = result.stdout.splitlines()
    (failed,) = [i for i, line in enumerate(lines) if line.startswith("  ✗ ")]
    assert lines[failed].split()[1] == "permissions"
    assert "permissions the install needs: create" in lines[failed]
    assert lines[failed + 1].strip().startswith("fix: run as a cluster admin")
    assert "  ! gpu-nodes" in result.stdout and "reading nodes failed (forbidden)" in result.stdout

    listed = setup.gridloop(
        "doctor", "--release", "doctor-rbac", "-o", "json", kubeconfig=powerless
    )
    assert listed.returncode == 3
    permissions = _checks(listed)["permissions"]
    assert "create customresourcedefinitions.apiextensions.k8s.io" in permissions["items"]
    assert "create deployments.apps in gridloop-system" in permissions["items"]


@pytest.fixture
def squatter(local_cluster, namespace: str, setup: Setup) -> Iterator[tuple[str, str]]:
    """A ConfigMap with the name the chart gives its health policy, made by hand."""
    release = "doctor-taken"
    request = rendering.Request(
        chart=setup.chart,
        profile=setup.chart / "profiles" / "local.yaml",
        namespace=namespace,
        release=release,
    )
    docs = objects.parse(rendering.render(request).manifest)
    name = f"{release}-gridloop-health"
    assert ("ConfigMap", name) in {(d["kind"], d["metadata"]["name"]) for d in docs}
    local_cluster.core.create_namespaced_config_map(
        namespace, {"metadata": {"name": name}, "data": {"mine": "yes"}}
    )
    yield release, name


def test_a_taken_name_fails_doctor_and_stops_install_before_anything_changes(
    setup: Setup, local_cluster, namespace: str, squatter: tuple[str, str]
) -> None:
    release, name = squatter
    where = ("--release", release, "--namespace", namespace)

    result = setup.gridloop("install", *where)

    assert result.returncode == 3, result.stdout + result.stderr
    assert "✗ free-names" in result.stdout
    assert f"ConfigMap {namespace}/{name}" in result.stdout
    assert "✓ CRDs" not in result.stdout and "upgrade --install" not in result.stdout
    core = local_cluster.core
    assert core.read_namespaced_config_map(name, namespace).data == {"mine": "yes"}
    secrets = core.list_namespaced_secret(namespace, label_selector=f"owner=helm,name={release}")
    assert secrets.items == [], "no release was recorded"
    deployments = client.AppsV1Api(local_cluster.api).list_namespaced_deployment(namespace)
    assert deployments.items == []

"""`gridloop doctor` against the shared local cluster: as its admin, as a user with no
rights (a ServiceAccount's token), and with a name the chart needs already taken.

The bundle is built as the chart tests build it (without KAITO); doctor renders it
with the local profile and the cluster's own fleet.
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

from gridloop import versions
from gridloop.bundle import bundling
from gridloop.chart import network_probe, objects, rendering

pytestmark = pytest.mark.cluster

GRIDLOOP = str(Path(sys.executable).parent / "gridloop")
SKIPPED = frozenset({"kaito"})


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
    # as after `gridloop local env`: the cluster's own kubectl and helm first on PATH
    # (a kubectl elsewhere on PATH may be too old for this server: doctor would fail it)
    env = dict(
        os.environ, PATH=f"{local_cluster.state.dir / 'bin'}{os.pathsep}{os.environ['PATH']}"
    )
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
    # the four GPU pools and the container node's CPU pool
    assert found["gpu-labels"]["detail"] == "every one of 5 Kueue flavors has nodes"
    # no Kueue runs beside the control plane: the chart brings its own, as a pod
    kueue = versions.get("kueue").version
    assert found["kueue"]["detail"] == f"installed by this chart (Kueue {kueue})"


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


# --- the user's own helm and kubectl (gridloop.toolchain) ---


def _fake(folder: Path, name: str, prints: str) -> Path:
    """An executable that prints what an old helm or kubectl prints for its version."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{prints}\nEOF\n")
    path.chmod(0o755)
    return path


def _nothing_applied(result: subprocess.CompletedProcess[str], local_cluster, release: str):
    assert "✓ CRDs" not in result.stdout and "✓ components" not in result.stdout
    records = local_cluster.core.list_secret_for_all_namespaces(
        label_selector=f"owner=helm,name={release}"
    ).items
    assert not records, "no release recorded"


def test_the_kubectl_install_would_run_is_checked_against_the_servers_skew_window(
    setup: Setup, tmp_path: Path, local_cluster
) -> None:
    found = _checks(setup.gridloop("doctor", "--release", "doctor-ok", "-o", "json"))
    assert found["kubectl"]["status"] == "pass", found["kubectl"]
    old = _fake(tmp_path, "kubectl", '{"clientVersion": {"gitVersion": "v1.28.0"}}')

    result = setup.gridloop("install", "--release", "old-kubectl", "--kubectl", str(old))

    assert result.returncode != 0
    assert "kubectl v1.28.0 is outside the skew window of the server v1.35.4" in result.stdout
    _nothing_applied(result, local_cluster, "old-kubectl")


@pytest.mark.parametrize(
    ("flag", "prints", "line"),
    [
        ("--helm", "v2.17.0", "is Helm v2.17.0: gridloop needs Helm 3.x or 4.x"),
        ("--helm", None, ": no such executable"),
        ("--kubectl", "kubectl: unknown flag --output", "did not give a version"),
    ],
)
def test_a_helm_or_kubectl_gridloop_cannot_use_is_one_line_and_changes_nothing(
    setup: Setup, tmp_path: Path, flag: str, prints: str | None, line: str, local_cluster
) -> None:
    """Helm is needed to render, so a bad one stops install at once (exit 2, usage);
    kubectl only once the cluster is reached, so doctor fails it (exit 3)."""
    tool = flag.removeprefix("--")
    path = tmp_path / "nowhere" / tool if prints is None else _fake(tmp_path, tool, prints)

    result = setup.gridloop("install", "--release", "bad-tool", flag, str(path))

    if tool == "helm":
        assert result.returncode == 2, result.stdout + result.stderr
        (said,) = result.stderr.strip().splitlines()
    else:
        assert result.returncode == 3, result.stdout + result.stderr
        (said,) = [x for x in result.stdout.splitlines() if x.strip().startswith("✗")]
        assert "✗ kubectl" in said
    assert f"{flag} {path}" in said and line in said, said
    _nothing_applied(result, local_cluster, "bad-tool")


def test_probe_network_shows_the_cluster_enforces_networkpolicy_and_leaves_nothing(
    setup: Setup, local_cluster, eventually
) -> None:
    """A real probe pair on the container node, judged by kube-network-policies; the
    network_probe unit tests pin the verdicts on a cluster that does not enforce."""
    result = setup.gridloop("doctor", "--release", "doctor-ok", "--probe-network", "-o", "json")

    assert result.returncode == 0, result.stdout + result.stderr
    probe = _checks(result)["network-policy"]
    assert probe["status"] == "pass", probe
    assert probe["detail"].startswith("enforced: a probe pod reached a pod no policy selects")
    selector = f"{network_probe.LABEL}=true"

    def gone() -> bool:
        return not local_cluster.core.list_namespace(label_selector=selector).items

    eventually(gone, "the probe's namespace deleted", 60)


def test_internet_egress_is_checked_against_the_clusters_own_ranges(setup: Setup) -> None:
    """The API server, the Service range (its ServiceCIDR), the nodes and their pod ranges
    of the local cluster all lie inside the default deniedCIDRs."""
    result = setup.gridloop(
        "doctor", "--release", "doctor-ok", "--set", "agentSandbox.network.egress=internet"
    )

    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = [x for x in result.stdout.splitlines() if "sandbox-egress" in x]
    assert line.strip().startswith("✓ sandbox-egress")
    # 24 simulated GPU nodes (their 127.0.0.1 is no way out of a pod) and the container node
    assert line.endswith(
        "covers the API server, 25 nodes and their pod ranges, the Service range 10.96.0.0/16"
    ), line

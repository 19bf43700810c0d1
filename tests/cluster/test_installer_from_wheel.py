"""gridloop as a user gets it, on a cluster it knows nothing about: the wheel alone in a
fresh virtualenv outside the checkout, helm and kubectl in a folder on PATH, no Go, and
the shared local cluster addressed only by a copy of its kubeconfig (nothing beside it
says it is a `gridloop local` one). `doctor`, `render --profile production`,
`install --profile local --wait` and `uninstall` run as on any cluster; the bundle is
assembled by the first command into an empty cache, from the Go module proxy, with
what cannot be fetched here (KAITO's release host) left out and said.

The helm and kubectl are the cluster's own builds, copied (any Helm 3/4 and a kubectl
within the server's skew window would do). The fleet is passed as values, as a user
on another cluster passes theirs.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from platform_install import KEPT_NAMESPACES, remove_kept_namespaces

from gridloop import versions
from wheel_venv import REPO, install_wheel

pytestmark = pytest.mark.cluster

NAMESPACE = "gridloop-system"  # the defaults: no --release, no --namespace
# what uninstall keeps, but the release namespace: `local up` made it (Prometheus' account)
KEPT = KEPT_NAMESPACES[1:]


@dataclass(frozen=True)
class User:
    home: Path
    env: dict[str, str]
    fleet_values: Path

    def gridloop(self, *args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
        env = self.env if path is None else {**self.env, "PATH": path}
        return subprocess.run(
            ["gridloop", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=self.home,
            timeout=900,
        )


@pytest.fixture(scope="module")
def user(local_cluster, tmp_path_factory: pytest.TempPathFactory) -> User:
    work = tmp_path_factory.mktemp("from-wheel")
    bin_dir = install_wheel(work, extras="cli")
    tools = work / "tools"
    tools.mkdir()
    for tool in ("helm", "kubectl"):
        shutil.copy2(local_cluster.state.dir / "bin" / tool, tools / tool)
    kubeconfig = work / "kubeconfig"
    shutil.copyfile(local_cluster.kubeconfig, kubeconfig)
    home = work / "home"
    home.mkdir()
    fleet = yaml.safe_load((local_cluster.state.dir / "fleet.yaml").read_text())
    fleet_values = home / "fleet-values.yaml"
    fleet_values.write_text(yaml.safe_dump({"fleet": fleet}, sort_keys=False))
    path = f"{tools}:{bin_dir}:/usr/bin:/bin"
    assert shutil.which("go", path=path) is None, "Go must not be on the user's PATH"
    env = {"PATH": path, "HOME": str(home), "KUBECONFIG": str(kubeconfig), "LANG": "C.UTF-8"}
    return User(home, env, fleet_values)


def test_the_package_and_its_tools_are_the_users_own(user: User) -> None:
    found = subprocess.run(
        ["python", "-c", "import gridloop, sys; print(gridloop.__file__, sys.prefix)"],
        capture_output=True,
        text=True,
        env=user.env,
    )
    assert found.returncode == 0, found.stderr
    assert str(REPO) not in found.stdout


def test_doctor_assembles_the_bundle_and_passes_the_local_profile(user: User) -> None:
    result = user.gridloop("doctor", "--profile", "local", "-f", str(user.fleet_values))

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"assembling the bundle for gridloop 0.1.0 in {user.home}/.cache/gridloop" in (
        result.stderr
    )
    kueue = f"kueue {versions.get('kueue').version}"
    assert f"✓ {kueue:<28} rendered" in result.stderr  # from the proxy
    assert "kubectl              v1.35.4 (within one minor of the server)" in result.stdout
    assert " 0 fail" in result.stdout


def test_render_of_the_production_profile_needs_no_cluster(user: User) -> None:
    result = user.gridloop("render", "--profile", "production")

    assert result.returncode == 0, result.stderr
    kinds = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(result.stdout) if d}
    assert ("Deployment", "kueue-controller-manager") in kinds
    assert ("Deployment", "gridloop-health") in kinds
    if "kaito" not in {n for _, n in kinds if n.startswith("kaito")}:
        assert "left out of the bundle, as they cannot be fetched here: kaito" in result.stderr


def test_without_helm_on_path_install_says_so_in_one_line_and_changes_nothing(
    user: User, local_cluster
) -> None:
    no_helm = user.env["PATH"].split(":", 1)[1]  # the tools folder off PATH
    assert shutil.which("helm", path=no_helm) is None

    result = user.gridloop("install", "--profile", "local", path=no_helm)

    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: helm not found on PATH: install Helm 3.x or 4.x, or pass --helm PATH"
    )
    assert not _releases(local_cluster)


def test_install_waits_until_ready_and_uninstall_removes_it(user: User, local_cluster) -> None:
    try:
        installed = user.gridloop(
            "install", "--profile", "local", "-f", str(user.fleet_values), "--wait"
        )
        assert installed.returncode == 0, installed.stdout + installed.stderr
        assert "revision 1 deployed" in installed.stdout, installed.stdout
        pods = local_cluster.core.list_namespaced_pod(NAMESPACE).items
        health = [p for p in pods if p.metadata.name.startswith("gridloop-health")]
        assert health and all(p.status.phase == "Running" for p in health)

        removed = user.gridloop("uninstall")
        assert removed.returncode == 0, removed.stdout + removed.stderr
        listed = user.gridloop("status", "--help")  # the CLI extra's command is there
        assert listed.returncode == 0, listed.stderr
        assert not _releases(local_cluster)
    finally:
        user.gridloop("uninstall")
        remove_kept_namespaces(local_cluster.core, KEPT)
    assert not _releases(local_cluster)


def _releases(local_cluster) -> list[str]:
    """Helm's release Secrets in the release namespace."""
    found = local_cluster.core.list_namespaced_secret(NAMESPACE, label_selector="owner=helm")
    return [s.metadata.name for s in found.items]

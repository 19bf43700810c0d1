"""The bundled chart installed on the shared local cluster as a user installs it, for the
tests that need what it runs: Kueue, KubeRay's operator, agent-sandbox's controller and
the health service, as real pods on the container node (the local profile).

`installed_platform` installs one release for a test module and, on the way out,
uninstalls it and deletes the namespaces uninstall keeps, so the next module's install
finds every name free. Modules that drive their own in-process health service install
it with `health.enabled=false`, so no second service acts on the faults they inject.
Those that need nothing else of it share one such install (`SharedPlatform`): the
conftests run them one after the other and uninstall it before any other test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from gridloop.bundle import bundling
from gridloop.chart import readiness
from gridloop.local import cluster
from gridloop.local.addons import object_store
from gridloop.local.build import building

RELEASE = "gridloop-itest"
NAMESPACE = "gridloop-itest"
SKIPPED = frozenset({"kaito"})
GRIDLOOP = str(Path(sys.executable).parent / "gridloop")
# kept by uninstall (helm.sh/resource-policy: keep), with what users made there
KEPT_NAMESPACES = (NAMESPACE, "team-default", "agents", "agent-sandbox-system", "kueue-system")
HEALTH_OFF = ("health.enabled=false",)
# where a user's install goes (no --release, no --namespace: the chart's defaults)
USER_NAMESPACE, USER_RELEASE = "gridloop-system", "gridloop"


@dataclass(frozen=True)
class Installed:
    chart: Path
    fleet: dict[str, Any]
    work: Path
    env: dict[str, str]  # KUBECONFIG and a private helm home
    install_output: str
    sets: tuple[str, ...] = ()  # --set values every install of this release passes
    files: tuple[Path, ...] = ()  # values files every install passes, after the fleet's

    @property
    def revision(self) -> int:
        """The revision the module's install made (1 unless a release was left behind)."""
        found = re.search(r"revision (\d+) deployed", self.install_output)
        assert found, self.install_output
        return int(found.group(1))

    def gridloop(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [GRIDLOOP, *args], capture_output=True, text=True, env=self.env, timeout=timeout
        )

    def helm(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(building.binary("helm")), *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=300,
        )

    def where(self) -> tuple[str, ...]:
        return (
            "--release",
            RELEASE,
            "--namespace",
            NAMESPACE,
            "--kubeconfig",
            self.env["KUBECONFIG"],
        )

    def install(
        self,
        fleet: dict[str, Any],
        name: str,
        *sets: str,
        timeout: str = "3m",
        files: tuple[Path, ...] | None = None,
        verb: str = "install",
    ) -> subprocess.CompletedProcess[str]:
        """Install (or upgrade) the release; `files` replaces the module's values files;
        `verb="upgrade"` runs `gridloop upgrade` (the release must exist)."""
        values = self.work / name
        values.write_text(yaml.safe_dump({"fleet": fleet}, sort_keys=False))
        files = self.files if files is None else files
        flags = [f"-f={f}" for f in files] + [f"--set={s}" for s in (*self.sets, *sets)]
        return self.gridloop(
            verb, "--chart", str(self.chart), "--profile", "local", "-f", str(values),
            *flags, "--namespace", NAMESPACE, "--release", RELEASE, "--wait", "--timeout", timeout,
            "--kubeconfig", self.env["KUBECONFIG"],
            # past the wait's own deadline, so gridloop says what is not ready
            timeout=readiness.seconds(timeout) + 120,
        )  # fmt: skip


def cluster_fleet(local_cluster) -> dict[str, Any]:
    """The fleet the cluster runs: its state's copy, else the default fleet it starts with."""
    recorded = local_cluster.state.dir / "fleet.yaml"
    path = recorded if recorded.is_file() else cluster.default_fleet_file()
    return yaml.safe_load(path.read_text())


@contextmanager
def installed_platform(
    local_cluster,
    work: Path,
    sets: tuple[str, ...] = (),
    files: tuple[Path, ...] = (),
    timeout: str = "3m",
    mirror: Path | None = None,
    tidy: bool = True,
) -> Iterator[Installed]:
    """The bundle built into `work` and installed with the local profile and the cluster's
    fleet (plus `files` and `sets`); uninstalled, its kept namespaces deleted, on the way
    out (unless not `tidy`: for a cluster that stops next). With `mirror` (the upstream
    releases' folder) the bundle holds KAITO too."""
    skip = SKIPPED if mirror is None else frozenset()
    bundle = bundling.bundle(bundling.Request(out=work / "dist", skip=skip, mirror=mirror))
    env = dict(os.environ, KUBECONFIG=str(local_cluster.kubeconfig))
    for key in ("CACHE", "CONFIG", "DATA"):
        env[f"HELM_{key}_HOME"] = str(work / "helm" / key.lower())
    setup = Installed(bundle.folder, cluster_fleet(local_cluster), work, env, "", sets, files)
    try:
        result = setup.install(setup.fleet, "fleet-values.yaml", timeout=timeout)
        assert result.returncode == 0, result.stdout + result.stderr
        yield Installed(setup.chart, setup.fleet, work, env, result.stdout, sets, files)
    finally:
        if tidy:
            # gridloop uninstall: Kueue's queues and flavors go while Kueue still runs
            gone = setup.gridloop("uninstall", *setup.where())
            if gone.returncode != 0:  # what the next modules will trip over, in the log
                print(f"uninstall failed:\n{gone.stdout}{gone.stderr}", file=sys.stderr)
            remove_kept_namespaces(local_cluster.core)


def remove_kept_namespaces(core: client.CoreV1Api, kept: tuple[str, ...] = KEPT_NAMESPACES) -> None:
    """Delete what uninstall keeps and wait until it is gone: a terminating namespace of
    this release is a name another release cannot take (doctor's free-names)."""
    for namespace in kept:
        try:
            core.delete_namespace(namespace, propagation_policy="Background")
        except ApiException as err:
            if err.status != 404:
                raise
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        present = {n.metadata.name for n in core.list_namespace().items}
        if not present & set(kept):
            return
        time.sleep(0.5)


class SharedPlatform:
    """One `HEALTH_OFF` install kept across the modules that ask for it (`kueue_platform`):
    installed for the first, uninstalled (`close`) before the first test that does not
    use it, and at the end of the run. Installing it took 26 to 30 s a module, and its
    uninstall about 10 s (docs/local-cluster.md)."""

    def __init__(self) -> None:
        self._open: Any = None
        self.installed: Installed | None = None

    def get(self, local_cluster, work: Callable[[], Path]) -> Installed:
        """The install, made now (in the folder `work()` gives) unless it stands."""
        if self.installed is None:
            opened = installed_platform(local_cluster, work(), HEALTH_OFF)
            self.installed = opened.__enter__()
            self._open = opened
        return self.installed

    def close(self) -> None:
        opened, self._open, self.installed = self._open, None, None
        if opened is not None:
            opened.__exit__(None, None, None)


SHARED = SharedPlatform()


def ensure_release_namespace(local_cluster) -> None:
    """The namespace `gridloop install` defaults to, with the store's keys Secret `local up`
    writes there (a guard: no module deletes them)."""
    core = local_cluster.core
    if USER_NAMESPACE not in {n.metadata.name for n in core.list_namespace().items}:
        core.create_namespace({"metadata": {"name": USER_NAMESPACE}})
    secret = object_store.secret_object(local_cluster.state.dir, USER_NAMESPACE)
    try:
        core.read_namespaced_secret(secret["metadata"]["name"], USER_NAMESPACE)
    except ApiException as err:
        if err.status != 404:
            raise
        core.create_namespaced_secret(USER_NAMESPACE, secret)

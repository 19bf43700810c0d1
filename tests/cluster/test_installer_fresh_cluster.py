"""The installer on a cluster of its own: doctor refuses it while it has no GPU node; then,
GPU nodes added, `gridloop install` from clean to all-ready, a re-run that changes
nothing, a dry run, a wait that names what is not ready, an upgrade Helm left pending
rolled forward, and uninstall keeping CRDs and what users made, then purging them.

The cluster starts on base port 28900 with a fleet whose one pool has no nodes and no
container node, so its values undo the local profile's Kueue and its pinning to
container nodes (KWOK_ONLY); it is stopped at the end. The
tests run in file order: each one starts from the state the one before left.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from gridloop import kube
from gridloop.bundle import bundling
from gridloop.chart import crd_marks
from gridloop.fleet import GPU_TOLERATION
from gridloop.local import cluster
from gridloop.local.build import building
from gridloop.local.kwok import nodes as simulated_nodes

# a kwok-only cluster of its own: no container node, and not the shared cluster
pytestmark = [pytest.mark.cluster, pytest.mark.kwok_cluster]

BASE_PORT = 28900
GRIDLOOP = str(Path(sys.executable).parent / "gridloop")
SKIPPED = frozenset({"kaito"})
RELEASE = "gl"
NAMESPACE = "gl-system"
HEALTH = f"{RELEASE}-gridloop-health"
KUEUE = ("kueue.x-k8s.io", "v1beta2")
UNSCHEDULABLE = "health.nodeSelector.pool=nowhere"
# This cluster has no container node: the local profile's pinning to one is undone (null
# removes a key Helm merges), the controllers tolerate the GPU nodes' taint, and Kueue is
# off, since no pod of it could answer its webhooks.
# One health replica, so the tests below can ask for two (and a PodDisruptionBudget).
KWOK_ONLY = {
    "kueue": {"enabled": False},
    # the only nodes are the simulated GPU nodes, tainted as a cloud's GPU pool is
    "systemNodes": {
        "nodeSelector": {"gridloop.io/container-node": None},
        "tolerations": [GPU_TOLERATION],
    },
    "health": {"replicas": 1},
    # the local profile runs the sandbox router on the container nodes, which this
    # cluster has not, and sandboxes run nowhere here: the router is off
    "agentSandbox": {"router": {"enabled": False}},
}


def said(result: subprocess.CompletedProcess[str]) -> str:
    """What a command printed, with runs of spaces (column padding) folded to one."""
    return re.sub(r" +", " ", result.stdout)


def fleet(nodes: int) -> dict:
    pool = {"name": "l4", "gpu": "L4", "nodes": nodes, "gpusPerNode": 4}
    return {
        "apiVersion": "gridloop.io/v1alpha1",
        "kind": "Fleet",
        "metadata": {"name": "lab"},
        "sites": [
            {
                "name": "lab",
                "type": "on-prem",
                "region": "lab",
                "zones": ["rack-a"],
                "pools": [pool],
            }
        ],
    }


@dataclass(frozen=True)
class Fresh:
    state_dir: Path
    api: client.ApiClient
    chart: Path
    values: Path
    env: dict[str, str]

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [GRIDLOOP, *args, "--kubeconfig", str(self.kubeconfig)],
            capture_output=True, text=True, env=self.env, timeout=600, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def install(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run(
            "install", "--chart", str(self.chart), "--profile", "local", "-f", str(self.values),
            "--release", RELEASE, "--namespace", NAMESPACE, *args,
        )  # fmt: skip

    def uninstall(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run("uninstall", "--release", RELEASE, "--namespace", NAMESPACE, *args)

    def revisions(self) -> dict[int, str]:
        secrets = client.CoreV1Api(self.api).list_namespaced_secret(
            NAMESPACE, label_selector=f"owner=helm,name={RELEASE}"
        )
        return {
            int(s.metadata.labels["version"]): s.metadata.labels["status"] for s in secrets.items
        }

    def crds(self) -> set[str]:
        ext = client.ApiextensionsV1Api(self.api)
        return {c.metadata.name for c in ext.list_custom_resource_definition().items}


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fresh]:
    work = tmp_path_factory.mktemp("fresh")
    bundle = bundling.bundle(bundling.Request(out=work / "dist", skip=SKIPPED))
    fleet_file = work / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump(fleet(0), sort_keys=False))
    values = work / "fleet-values.yaml"
    values.write_text(yaml.safe_dump({"fleet": {"sites": fleet(2)["sites"]}, **KWOK_ONLY}))
    env = dict(os.environ)
    for key in ("CACHE", "CONFIG", "DATA"):
        env[f"HELM_{key}_HOME"] = str(work / "helm" / key.lower())
    state_dir = work / "state"
    up = cluster.up(state_dir, fleet_file, BASE_PORT, say=lambda _m: None, gpu_health=False)
    try:
        yield Fresh(state_dir, kube.api_client(up.state.kubeconfig), bundle.folder, values, env)
    finally:
        cluster.down(state_dir)


def test_doctor_fails_a_cluster_without_gpu_nodes_and_install_changes_nothing(
    fresh: Fresh,
) -> None:
    doctor = fresh.run("doctor", "--chart", str(fresh.chart), "--profile", "local")

    assert doctor.returncode == 3, doctor.stdout + doctor.stderr
    assert "  ✗ gpu-nodes" in doctor.stdout and "no node offers nvidia.com/gpu" in doctor.stdout
    assert "fix: add GPU nodes with the NVIDIA driver and device plugin" in doctor.stdout
    assert doctor.stderr.strip() == "error: doctor: failed: gpu-nodes (fixes above)"

    crds_before = fresh.crds()
    install = fresh.install()

    assert install.returncode == 3
    assert "✓ CRDs" not in install.stdout
    assert fresh.crds() == crds_before
    namespaces = {n.metadata.name for n in client.CoreV1Api(fresh.api).list_namespace().items}
    assert NAMESPACE not in namespaces


def _ready_deployments(api: client.ApiClient) -> dict[str, bool]:
    apps = client.AppsV1Api(api)
    return {
        f"{d.metadata.namespace}/{d.metadata.name}": (d.status.available_replicas or 0)
        == (d.spec.replicas or 0)
        for d in apps.list_deployment_for_all_namespaces(
            label_selector="app.kubernetes.io/managed-by=Helm"
        ).items
    }


def test_install_on_a_clean_cluster_goes_in_phases_to_all_ready(fresh: Fresh) -> None:
    simulated_nodes.sync(fresh.api, cluster.read_fleet(_fleet_file(fresh, 2)))
    simulated_nodes.wait_ready(fresh.api, 2, timeout=60)

    result = fresh.install("--wait", "--timeout", "3m")

    assert result.returncode == 0, result.stdout + result.stderr
    steps = [line.split()[1] for line in result.stdout.splitlines() if line.startswith("  ✓ ")]
    assert steps == ["values", "doctor", "CRDs", "components", "release", "ready"]
    assert "19 applied server-side, Established" in result.stdout
    assert f"✓ release {RELEASE} revision 1 deployed" in said(result)
    assert "✓ ready 3 workloads ready" in said(result)
    ready = _ready_deployments(fresh.api)
    assert {name.split("/")[1] for name in ready} == {
        HEALTH,
        "kuberay-operator",
        "agent-sandbox-controller",
    }
    assert all(ready.values()), ready
    assert fresh.revisions() == {1: "deployed"}


def _fleet_file(fresh: Fresh, nodes: int) -> Path:
    path = fresh.state_dir.parent / f"fleet-{nodes}.yaml"
    path.write_text(yaml.safe_dump(fleet(nodes), sort_keys=False))
    return path


def _versions(api: client.ApiClient) -> dict[str, str]:
    apps = client.AppsV1Api(api)
    return {
        d.metadata.name: d.metadata.resource_version
        for d in apps.list_deployment_for_all_namespaces().items
    }


def test_a_second_install_changes_nothing(fresh: Fresh) -> None:
    before = _versions(fresh.api)

    result = fresh.install("--wait")

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"✓ release {RELEASE} revision 1 is up to date: nothing changed" in said(result)
    assert "✓ CRDs" not in said(result)
    assert fresh.revisions() == {1: "deployed"}
    assert _versions(fresh.api) == before


def test_dry_run_prints_the_server_side_diff_and_changes_nothing(fresh: Fresh) -> None:
    before = _versions(fresh.api)

    result = fresh.install("--dry-run", "--set", "health.replicas=2")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "-  replicas: 1\n+  replicas: 2" in result.stdout
    assert f"policy.v1.PodDisruptionBudget.{NAMESPACE}.{HEALTH}" in result.stdout
    assert "✓ dry run 2 objects would change" in said(result)
    assert _versions(fresh.api) == before
    assert fresh.revisions() == {1: "deployed"}


def test_wait_names_the_workload_that_is_not_ready(fresh: Fresh) -> None:
    result = fresh.install("--set", UNSCHEDULABLE, "--wait", "--timeout", "5s")

    assert result.returncode == 4, result.stdout + result.stderr
    assert result.stderr.strip().startswith("error: not ready after 5s: ")
    assert f"Deployment {NAMESPACE}/{HEALTH} (" in result.stderr
    assert "kuberay-operator" not in result.stderr


def test_an_upgrade_helm_left_pending_is_rolled_forward(fresh: Fresh) -> None:
    helm = [
        str(building.binary("helm")), "upgrade", RELEASE, str(fresh.chart),
        "--namespace", NAMESPACE, "--skip-crds", "--force-conflicts",
        "-f", str(fresh.chart / "profiles" / "local.yaml"), "-f", str(fresh.values),
        "--set", UNSCHEDULABLE, "--set", "health.replicas=2", "--wait", "--timeout", "10m",
    ]  # fmt: skip
    env = dict(fresh.env, KUBECONFIG=str(fresh.kubeconfig))
    waiting = subprocess.Popen(helm, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while "pending-upgrade" not in fresh.revisions().values():
            assert waiting.poll() is None, "helm ended before it was interrupted"
            assert time.monotonic() < deadline, fresh.revisions()
            time.sleep(0.2)
    finally:
        waiting.send_signal(signal.SIGKILL)
        waiting.wait()
    pending = max(fresh.revisions())
    assert fresh.revisions()[pending] == "pending-upgrade"

    result = fresh.run(
        "upgrade", "--chart", str(fresh.chart), "--profile", "local", "-f", str(fresh.values),
        "--release", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "2m",
    )  # fmt: skip

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"revision {pending} was left pending by an interrupted run: marked failed" in (
        said(result)
    )
    assert f"✓ release {RELEASE} revision {pending + 1} deployed" in said(result)
    assert fresh.revisions()[pending] == "failed"
    assert fresh.revisions()[pending + 1] == "deployed"
    assert all(_ready_deployments(fresh.api).values())


def test_upgrade_refuses_a_release_that_is_not_installed(fresh: Fresh) -> None:
    result = fresh.run(
        "upgrade", "--chart", str(fresh.chart), "--profile", "local", "--release", "absent",
        "--namespace", NAMESPACE,
    )  # fmt: skip

    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: release absent is not installed in {NAMESPACE}: use `gridloop install`"
    )


def _user_queue(fresh: Fresh) -> str:
    name = f"research-{uuid.uuid4().hex[:5]}"
    client.CustomObjectsApi(fresh.api).create_cluster_custom_object(
        *KUEUE,
        "clusterqueues",
        {"apiVersion": "/".join(KUEUE), "kind": "ClusterQueue", "metadata": {"name": name},
         "spec": {"namespaceSelector": {}}},
    )  # fmt: skip
    return name


def _queues(fresh: Fresh) -> set[str]:
    listed = client.CustomObjectsApi(fresh.api).list_cluster_custom_object(*KUEUE, "clusterqueues")
    return {q["metadata"]["name"] for q in listed["items"]}


def test_crds_are_applied_again_only_when_one_differs_from_what_was_applied(
    fresh: Fresh,
) -> None:
    ext = client.ApiextensionsV1Api(fresh.api)
    queues = "clusterqueues.kueue.x-k8s.io"
    # an upgrade (a value changed) finds every CRD as the install before applied it
    unchanged = fresh.install("--set", "health.replicas=2")

    assert unchanged.returncode == 0, unchanged.stdout + unchanged.stderr
    assert "✓ CRDs 19 as applied before, Established: nothing to apply" in said(unchanged)

    # one CRD as an older chart left it: its mark is not the chart copy's digest
    older = {"metadata": {"annotations": {crd_marks.DIGEST: "sha256:older"}}}
    ext.patch_custom_resource_definition(queues, older)
    changed = fresh.install("--set", "health.replicas=1")

    assert changed.returncode == 0, changed.stdout + changed.stderr
    assert "✓ CRDs 19 applied server-side, Established" in said(changed)
    mark = ext.read_custom_resource_definition(queues).metadata.annotations[crd_marks.DIGEST]
    assert mark.startswith("sha256:") and mark != "sha256:older"


def test_an_install_releases_the_leader_leases_removed_pods_of_its_deployments_left(
    fresh: Fresh,
) -> None:
    """No controller runs on this kwok cluster: the Leases are put by the test, one as a
    removed kuberay-operator pod left it (KubeRay never releases its own), one held by
    a process that is not the release's."""
    coord = client.CoordinationV1Api(fresh.api)
    held = {"left": "kuberay-operator-75c9cd6867-zpvfr_1954d855", "theirs": "a-laptop_77aa"}
    for name, holder in held.items():
        spec = client.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=15)
        coord.create_namespaced_lease(
            NAMESPACE, client.V1Lease(metadata=client.V1ObjectMeta(name=name), spec=spec)
        )

    result = fresh.install("--set", "health.replicas=2")

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"✓ leases 1 released, their holders' pods gone: {NAMESPACE}/left" in said(result)
    left = coord.read_namespaced_lease("left", NAMESPACE).spec
    assert (left.holder_identity or "", left.lease_duration_seconds) == ("", 1)
    assert coord.read_namespaced_lease("theirs", NAMESPACE).spec.holder_identity == held["theirs"]


def test_uninstall_removes_the_workloads_and_keeps_crds_and_user_resources(fresh: Fresh) -> None:
    mine = _user_queue(fresh)
    crds = fresh.crds()
    assert _queues(fresh) == {"default", mine}

    result = fresh.uninstall()

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"✓ release {RELEASE} uninstalled" in said(result)
    assert "✓ kept 19 CRDs and 1 custom resources not from the release" in said(result)
    assert (
        "✓ kept namespaces agent-sandbox-system, agents, team-default and what is in them"
        in said(result)
    )
    assert _ready_deployments(fresh.api) == {}
    assert fresh.crds() == crds
    assert _queues(fresh) == {mine}, "the release's own ClusterQueue went, the user's stayed"
    assert fresh.revisions() == {}


def test_purge_refuses_while_user_resources_exist_and_asks_for_confirmation(fresh: Fresh) -> None:
    crds = fresh.crds()
    (mine,) = _queues(fresh)

    unforced = fresh.uninstall("--purge", "--yes")
    unconfirmed = fresh.uninstall("--purge", "--force")  # stdin is not a terminal

    assert unforced.returncode == 5
    assert unforced.stderr.strip().startswith(
        "error: --purge: 1 custom resources not from this release still exist: "
        f"ClusterQueue {mine}; delete them first, or add --force"
    )
    assert unconfirmed.returncode == 5
    assert unconfirmed.stderr.strip() == (
        "error: --purge deletes 19 CRDs: confirm it (type yes, or pass --yes)"
    )
    assert fresh.crds() == crds and _queues(fresh) == {mine}

    purged = fresh.uninstall("--purge", "--yes", "--force")

    assert purged.returncode == 0, purged.stdout + purged.stderr
    assert f"release {RELEASE} is not installed in {NAMESPACE}: nothing to uninstall" in (
        purged.stdout
    )
    assert "✓ CRDs 19 deleted, with 1 custom resources" in said(purged)
    assert not {c for c in fresh.crds() if c.endswith((".x-k8s.io", ".ray.io"))}

"""Upstream's own RayJob sample, unchanged but for the queue label, on the local cluster.

KubeRay's smallest RayJob sample that Kueue manages, `config/samples/ray-job.kueue-toy-
sample.yaml`, read from the pinned KubeRay Go module (the module proxy, hash-checked: not
a copy in this repository): a head and a worker of one CPU each, plus KubeRay's default
submitter (half a CPU), running `rayproject/ray:2.52.0`, which the local registry serves
as gridloop's Ray image. 2.5 CPUs do not fit on one container node of a 2-core machine,
so this module runs on the shared cluster restarted with two container nodes (each
kubelet reports the host's cores), after every other test but the node-loss one, which
uses the same two nodes (the `restarts_cluster` marker, cluster_restarts.py).

Kueue's own `ray-job-sample` is not here: its site/ folder, where that sample lives, is
not in Kueue's Go module (v0.19.2's zip has apis, charts, cmd, config, ... and no site/),
and copying it into this repository is not allowed; docs/training.md says so.

The sample leaves its submitter to KubeRay's default. Kueue v0.17 gave the admitted
flavor's nodeSelector only to a `submitterPodTemplate` the RayJob has
(kubernetes-sigs/kueue#12567); since v0.18 (#12644) it gives it to KubeRay's default
submitter too, so the submitter goes to the container nodes (the `system` flavor) with the
head and the worker, and the sample completes.
Its driver prints the Ray cluster's resources once a second for 600 s; the test watches
the first ten of those lines and deletes the RayJob.
"""

from __future__ import annotations

from collections.abc import Iterator

import cluster_restarts
import pytest
import ray_jobs
import yaml
from kubernetes.client.rest import ApiException
from platform_install import installed_platform

from gridloop import versions
from gridloop.bundle import modules

pytestmark = [*cluster_restarts.MARKS, pytest.mark.usefixtures("heavy_images")]

NS = ray_jobs.TEAM_NAMESPACE
SAMPLE = "config/samples/ray-job.kueue-toy-sample.yaml"
# the sample sets no securityContext and no authOptions: Pod Security `restricted`, the
# team namespaces' default, would refuse its pods, and the chart's ray-token-auth policy
# the RayJob, so its team runs at `baseline` and without that policy, as a team running
# upstream's samples unchanged would set them
LEAN = (
    "health.enabled=false",
    "agentSandbox.enabled=false",
    "kueue.teamNamespaces.podSecurity=baseline",
    "policies.rayTokenAuth=false",
)
CONTAINER_NODES = {"system-000", "system-001"}
ITERATIONS = 10  # of the sample's loop: range(600) with a one-second sleep


@pytest.fixture(scope="module")
def two_nodes(local_cluster, tmp_path_factory) -> Iterator[None]:
    """The cluster with two container nodes (restarted with them unless a module before
    left them) and the platform installed; then uninstalled. The two nodes stay for the
    next module, test_health_node_loss.py, which ends with one (cluster_restarts.py)."""
    state, work = local_cluster.state, tmp_path_factory.mktemp("samples")
    cluster_restarts.with_container_nodes(state.dir, work, 2, state.base_port)
    with installed_platform(local_cluster, work, LEAN, timeout="5m"):
        yield


def kuberay_sample() -> dict:
    """The sample as KubeRay's module has it, with only Kueue's queue label added."""
    folder = modules.module_dir(versions.get("kuberay"))
    sample = yaml.safe_load((folder / SAMPLE).read_text())
    sample["metadata"].setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = "default"
    return dict(sample)


def test_kuberays_kueue_sample_is_admitted_whole_and_runs_on_the_container_nodes(
    two_nodes, local_cluster, eventually
) -> None:
    api = local_cluster.api
    sample = kuberay_sample()
    assert sample["spec"]["rayClusterSpec"]["rayVersion"] == versions.get("ray").version
    created = ray_jobs.apply(api, NS, sample)
    name = created["metadata"]["name"]  # the sample asks for a generated name
    try:
        assert created["spec"]["suspend"] is True

        workload = eventually(
            lambda: ray_jobs.admitted(api, NS, "RayJob", name),
            "the sample's Workload to be admitted",
            120,
        )
        assert ray_jobs.flavors(workload) == {
            "head": {"system"},
            "small-group": {"system"},
            "submitter": {"system"},
        }

        cluster_name = eventually(
            lambda: ray_jobs.rayjob(api, NS, name).get("status", {}).get("rayClusterName"),
            "KubeRay to make the sample's Ray cluster",
            60,
        )

        def cluster_running() -> list:
            pods = ray_jobs.cluster_pods(api, NS, str(cluster_name))
            ready = [p for p in pods if p.status.phase == "Running"]
            return ready if len(ready) == 2 else []

        pods = eventually(cluster_running, "the sample's head and worker to run", 600)
        # head and worker on the container nodes, kept there by the flavor's selector
        assert {p.spec.node_name for p in pods} <= CONTAINER_NODES
        for pod in pods:
            assert (pod.spec.node_selector or {}).get("gridloop.io/pool") == "system"

        def submitter_pods() -> list:
            return [
                p
                for p in ray_jobs.pods_of_rayjob(api, NS, name)
                if (p.metadata.labels or {}).get("batch.kubernetes.io/job-name") == name
                and p.spec.node_name
            ]

        (submitter,) = eventually(submitter_pods, "the sample's submitter pod to be placed", 120)
        # KubeRay's default submitter gets the flavor's selector too (Kueue since v0.18,
        # kubernetes-sigs/kueue#12644; v0.17 gave it nothing)
        assert (submitter.spec.node_selector or {}).get("gridloop.io/pool") == "system"
        assert submitter.spec.node_name in CONTAINER_NODES, submitter.spec.node_name

        # the driver runs: it prints the Ray cluster's resources once a second (for 600 s:
        # ITERATIONS of them show what the rest would; RayJobs of gridloop's own run to
        # SUCCEEDED in test_training.py and test_loop.py)
        line = f"iter: {ITERATIONS - 1},"
        log = eventually(
            lambda: printed(api, name, line), f"the sample's driver to print {line!r}", 300
        )
        eventually(
            lambda: ray_jobs.rayjob(api, NS, name)["status"].get("jobStatus") == "RUNNING",
            "KubeRay to report the sample's job RUNNING",
            60,
        )
        # the driver saw the head's and the worker's CPU: two real pods in one Ray cluster
        assert "'CPU': 2.0" in log.split(line)[1].splitlines()[0]
    finally:
        ray_jobs.delete_rayjob(api, NS, name)


def printed(api, name: str, line: str) -> str:
    """The submitter's log once it holds `line`, else '' (also while its pod starts)."""
    try:
        log = ray_jobs.submitter_log(api, NS, name)
    except ApiException as err:  # its container not started yet
        if err.status != 400:
            raise
        return ""
    return log if line in log else ""

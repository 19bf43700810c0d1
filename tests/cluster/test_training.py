"""Training for real: RayJobs queued by Kueue, run by the chart's KubeRay operator on the
container node, with gridloop's Ray image (Ray 2.52.0 from PyPI, images/ray).

Nothing here is simulated: Kueue's webhook suspends each RayJob, Kueue admits it as one
Workload against the team's quota in the container nodes' CPU flavor, KubeRay starts a
real Ray cluster (head and worker pods under runc on system-000), its submitter runs `ray
job submit`, the driver trains on the worker and writes its checkpoint to the local
object store (versitygw).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import container_pods
import pytest
import ray_jobs
from kubernetes.client.rest import ApiException
from kueue_scenario import POLICY, QUOTA, TeamQueues
from platform_install import GRIDLOOP

from doc_blocks import doc_block
from gridloop.health.reading import connect
from gridloop.health.service import HealthService
from gridloop.local.addons import object_store

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("heavy_images")]

NS = ray_jobs.TEAM_NAMESPACE
SECRET = "train-tiny-s3"  # examples/training/rayjob.yaml's
# a line the example's driver prints per step: "step  12  loss 0.4396  accuracy 0.864"
STEP = re.compile(r"^step +(\d+)  loss (\d+\.\d{4})  accuracy", re.M)
FIRST_START_S = 600  # the first RayJob pulls the Ray image (0.6 GB) into containerd


KEY_LINES = ("store-key training", "create secret generic")  # the README's, run as written


@pytest.fixture(scope="module")
def training(kueue_platform, local_cluster, tmp_path_factory) -> None:
    """The platform installed with the local profile (the install the Kueue modules share,
    kept for this one: tests/conftest.py runs it right after them), and the run's own store
    keys in the team's namespace as the Secret the example reads: the README's two lines,
    run as written (`gridloop local store-key`, `kubectl create secret --from-env-file`).
    The namespace goes with the shared install."""
    state = local_cluster.state
    here = tmp_path_factory.mktemp("training-keys")
    (here / ".venv").symlink_to(Path(sys.executable).parents[1])
    env = {
        **os.environ,
        "GRIDLOOP_STATE": str(state.dir),
        "KUBECONFIG": str(state.kubeconfig),
        "PATH": f"{state.dir / 'bin'}{os.pathsep}{os.environ['PATH']}",
    }
    block = doc_block("README.md", "A training job queued by Kueue")
    lines = [ln for ln in block.splitlines() if any(k in ln for k in KEY_LINES)]
    assert len(lines) == 2, block
    try:
        local_cluster.core.delete_namespaced_secret(SECRET, NS)
    except ApiException as err:
        if err.status != 404:
            raise
    for line in lines:
        done = subprocess.run(
            ["bash", "-c", line.split("#")[0]], cwd=here, env=env, capture_output=True,
            text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"{line}: {done.stdout} {done.stderr}"
    assert not (here / "train-tiny.env").exists()  # the line removes the keys' file


@pytest.fixture
def s3(local_cluster):
    """A boto3 S3 client for the local object store, from the host."""
    state = local_cluster.state
    env = object_store.shell_env(state.dir, state.ports.object_store)
    return boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_DEFAULT_REGION"],
    )


def job_status(api, name: str) -> str:
    return str(ray_jobs.rayjob(api, NS, name).get("status", {}).get("jobStatus", ""))


def deployment_status(api, name: str) -> str:
    """KubeRay's phase of the RayJob (Initializing, Running, Complete, ...)."""
    return str(ray_jobs.rayjob(api, NS, name).get("status", {}).get("jobDeploymentStatus", ""))


def wait_done(api, eventually, name: str, timeout: float, seen: dict[str, str]) -> str:
    """Wait for the RayJob's driver to end; `seen` collects its pods' nodes meanwhile."""

    def ended() -> str:
        for pod in ray_jobs.pods_of_rayjob(api, NS, name):
            if pod.spec.node_name:
                seen[pod.metadata.name] = pod.spec.node_name
        status = job_status(api, name)
        return status if status in ("SUCCEEDED", "FAILED", "STOPPED") else ""

    return str(eventually(ended, f"RayJob {name} to end", timeout))


@pytest.fixture
def outsider(local_cluster) -> Iterator[str]:
    """A namespace of no team, labelled by nothing: where another tenant's pod would be."""
    name = f"outsider-{uuid.uuid4().hex[:5]}"
    local_cluster.core.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        local_cluster.core.delete_namespace(name)


def test_the_example_trains_on_a_container_node_and_writes_its_checkpoint(
    training, local_cluster, eventually, s3, outsider
) -> None:
    api = local_cluster.api
    config_map, job = ray_jobs.example()
    ray_jobs.apply(api, NS, config_map)
    name = job["metadata"]["name"]
    created = ray_jobs.apply(api, NS, job)
    try:
        # Kueue's webhook suspended it on the way in: nothing starts before admission
        assert created["spec"]["suspend"] is True

        workload = eventually(
            lambda: ray_jobs.admitted(api, NS, "RayJob", name),
            "the RayJob's Workload to be admitted",
            120,
        )
        # one Workload for head, workers and submitter, all on the container nodes' flavor
        assert ray_jobs.flavors(workload) == {
            "head": {"system"},
            "cpu": {"system"},
            "submitter": {"system"},
        }
        # the head wants the cluster's token: a plain pod beside it gets neither the Jobs
        # API nor the Ray client port; a pod given the token gets both (the cluster stays
        # up 30 s after the job ends)
        eventually(
            lambda: deployment_status(api, name) in ("Running", "Complete"),
            "the RayJob's cluster to run the job",
            FIRST_START_S,
        )
        plain, with_token, outside = ray_jobs.probe_head(api, NS, name, outsider)
        assert "8265: 401 Unauthorized: Missing authentication token" in plain, plain
        assert "10001: UNAUTHENTICATED" in plain, plain
        assert "8265: 200" in with_token and "10001: answered" in with_token, with_token
        # and from another namespace, the team's NetworkPolicy drops the packets: no answer
        assert "8265: unreachable: <urlopen error timed out>" in outside, outside
        assert "10001: DEADLINE_EXCEEDED" in outside, outside
        seen: dict[str, str] = {}
        status = wait_done(api, eventually, name, FIRST_START_S, seen)
        log = ray_jobs.submitter_log(api, NS, name)
        assert status == "SUCCEEDED", log[-3000:]
        # the job's pods run as the namespace's default ServiceAccount, unmounted: it reads
        # no Secret (KubeRay's token Secret included)
        can = container_pods.kubectl(
            local_cluster, "auth", "can-i", "get", "secrets", "-n", NS,
            f"--as=system:serviceaccount:{NS}:default",
        )  # fmt: skip
        assert can.stdout.strip() == "no", (can.stdout, can.stderr)

        head = [p for p in seen if "-head-" in p]
        workers = [p for p in seen if "-cpu-" in p]
        assert head and workers, seen
        assert set(seen.values()) == {"system-000"}, "every pod ran on the container node"
        # the checkpoint and its curve, read back from the object store; the driver's steps,
        # streamed by `ray job submit`, follow it until the job ends and can miss the last
        # lines printed before exit (CI runs lost the "trained 40 steps" line, and once every
        # line from step 37 on, of SUCCEEDED jobs)
        metrics = json.loads(
            s3.get_object(Bucket="checkpoints", Key="train-tiny/metrics.json")["Body"].read()
        )
        curve = metrics["curve"]
        assert len(curve) == 40 and curve[-1]["loss"] < curve[0]["loss"] / 2
        # what was streamed starts at step 0, skips none and is the stored curve, as far as
        # it got (at least half of it)
        streamed = STEP.findall(log)
        assert len(streamed) >= 20, log[-3000:]
        assert [int(s) for s, _ in streamed] == list(range(len(streamed))), log[-3000:]
        assert [loss for _, loss in streamed] == [
            f"{point['loss']:.4f}" for point in curve[: len(streamed)]
        ]
        # the gradients were computed on the worker (its pod's hostname), not on the head
        assert metrics["hosts"] == workers
        weights = s3.head_object(Bucket="checkpoints", Key="train-tiny/weights.npz")
        assert weights["ContentLength"] > 0

        eventually(
            lambda: ray_jobs.condition(ray_jobs.workload(api, NS, "RayJob", name), "Finished"),
            "Kueue to mark the Workload finished",
            60,
        )
    finally:
        ray_jobs.delete_rayjob(api, NS, name)


def test_a_team_namespace_admits_only_pods_that_run_unprivileged(training, local_cluster) -> None:
    core = local_cluster.core
    # as the example's RayJob runs its pods: non-root, no escalation, no capability, seccomp
    fine = container_pods.restricted(container_pods.pod_spec("unprivileged", ["true"]))
    core.create_namespaced_pod(NS, fine, dry_run="All")

    bare = container_pods.pod_spec("as-root", ["true"])
    del bare["spec"]["containers"][0]["securityContext"]
    message = refusal(lambda: core.create_namespaced_pod(NS, bare, dry_run="All"))
    assert 'pods "as-root" is forbidden: violates PodSecurity "restricted:latest"' in message
    assert "must set securityContext.seccompProfile.type" in message, message


def test_a_second_rayjob_waits_whole_until_the_first_finishes(
    training, local_cluster, eventually
) -> None:
    """The team's CPU quota (2 cores) holds one example job (1100m: head 600m, worker
    300m, submitter 200m); a second one has quota for its head and worker (900m left) but
    not its submitter, so none of its pods is made until the first is done, then all of
    it is admitted."""
    api = local_cluster.api
    config_map, job = ray_jobs.example()
    ray_jobs.apply(api, NS, config_map)
    first, second = (ray_jobs.renamed(job, n) for n in ("gang-first", "gang-second"))
    names = [first["metadata"]["name"], second["metadata"]["name"]]
    state = local_cluster.state
    for name in names:  # each run writes its own checkpoint with its own keys
        ray_jobs.run_keys(api, state.dir, state.ports.object_store, NS, name)
    try:
        ray_jobs.apply(api, NS, first)
        eventually(
            lambda: ray_jobs.condition(ray_jobs.workload(api, NS, "RayJob", names[0]), "Admitted"),
            "the first RayJob to be admitted",
            120,
        )
        ray_jobs.apply(api, NS, second)

        def pending() -> object:
            found = ray_jobs.workload(api, NS, "RayJob", names[1])
            conditions = (found or {}).get("status", {}).get("conditions") or []
            reserved = [c for c in conditions if c["type"] == "QuotaReserved"]
            return reserved and reserved[0]["status"] == "False" and reserved[0]["message"]

        message = str(eventually(pending, "the second RayJob's Workload to wait for quota", 60))
        # Kueue's reason names the pod sets it could not place together
        assert message.startswith("couldn't assign flavors to pod set"), message
        shown = queue_jobs(local_cluster)
        assert shown["RayJob/gang-first"][:2] == ["admitted", "system"], shown
        assert shown["RayJob/gang-second"][0] == "pending", shown
        assert "couldn't assign flavors" in " ".join(shown["RayJob/gang-second"]), shown

        waited = 0
        while job_status(api, names[0]) not in ("SUCCEEDED", "FAILED"):
            # the whole second job waits: no Ray cluster, no pod, still suspended
            held = ray_jobs.rayjob(api, NS, names[1])
            assert held["spec"]["suspend"] is True
            assert not held.get("status", {}).get("rayClusterName")
            assert ray_jobs.pods_of_rayjob(api, NS, names[1]) == []
            time.sleep(2)
            waited += 2
            assert waited < FIRST_START_S, "the first RayJob did not end"
        assert job_status(api, names[0]) == "SUCCEEDED"

        workload = eventually(
            lambda: ray_jobs.admitted(api, NS, "RayJob", names[1]),
            "the second RayJob to be admitted",
            120,
        )
        assert set(ray_jobs.flavors(workload)) == {"head", "cpu", "submitter"}
        seen: dict[str, str] = {}
        assert wait_done(api, eventually, names[1], 300, seen) == "SUCCEEDED"
        assert any("-head-" in p for p in seen) and any("-cpu-" in p for p in seen)
        shown = eventually(
            lambda: (
                (jobs := queue_jobs(local_cluster))
                and jobs.get("RayJob/gang-second", [""])[0] == "finished"
                and jobs
            ),
            "gridloop status to show the second job finished",
            60,
        )
        assert shown["RayJob/gang-first"][0] == "finished", shown
    finally:
        for name in names:
            ray_jobs.delete_rayjob(api, NS, name)


def queue_jobs(local_cluster) -> dict[str, list[str]]:
    """`gridloop status --once --view queues`'s JOBS table: job -> STATE, FLAVORS, ... WHY."""
    env = {**os.environ, "KUBECONFIG": str(local_cluster.kubeconfig)}
    done = subprocess.run(
        [GRIDLOOP, "status", "--once", "--view", "queues"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    _, _, jobs = done.stdout.partition("\nJOBS\n")
    rows = [line.split() for line in jobs.splitlines()[1:] if line.strip()]
    # JOB NAMESPACE CLUSTERQUEUE STATE FLAVORS AGE WHY...
    return {row[0]: [row[3], row[4], *row[5:]] for row in rows if row[1] == NS}


def refusal(create: Callable[[], object]) -> str:
    """The API server's message for a create that must be refused."""
    with pytest.raises(ApiException) as caught:
        create()
    assert caught.value.status in (400, 403, 422), caught.value.body
    body = json.loads(caught.value.body)
    return str(body["message"])


def test_a_rayjob_without_a_queue_label_goes_to_the_teams_default_queue(
    training, local_cluster, eventually
) -> None:
    """Kueue (since v0.17) defaults a job's queue to the namespace's LocalQueue "default"
    (LocalQueueDefaulting, GA and locked on), and the chart makes one in each team
    namespace: an unlabelled RayJob there is queued, not run past the quota, and the
    admission policy, which runs after Kueue's mutating webhook, sees it labelled."""
    _, job = ray_jobs.example()
    del job["metadata"]["labels"]
    job["metadata"]["name"] = "unlabelled"
    job["spec"]["suspend"] = True  # queued and left waiting: this test needs no cluster
    try:
        created = ray_jobs.apply(local_cluster.api, NS, job)
        assert created["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
        assert created["spec"]["suspend"] is True
        eventually(
            lambda: ray_jobs.workload(local_cluster.api, NS, "RayJob", "unlabelled"),
            "Kueue to make its Workload",
            60,
        )
    finally:
        ray_jobs.delete_rayjob(local_cluster.api, NS, "unlabelled")


def test_a_rayjob_without_a_queue_in_a_team_namespace_is_refused_by_the_policy(
    training, local_cluster, namespace
) -> None:
    """Where no default queue exists (a team namespace whose LocalQueue is not named
    "default"), nothing sets the label, and gridloop's policy refuses the RayJob."""
    local_cluster.core.patch_namespace(
        namespace, {"metadata": {"labels": {"gridloop.io/team": "default"}}}
    )
    _, job = ray_jobs.example()
    del job["metadata"]["labels"]
    message = refusal(lambda: ray_jobs.apply(local_cluster.api, namespace, job))
    # a namespace labelled as a team's, not one of kueue.teams: the policy's -labelled binding
    assert "-gpu-jobs-queued' with binding 'gridloop-itest-gpu-jobs-queued-labelled'" in message
    assert (
        "Ray jobs and clusters in team namespaces must name a Kueue LocalQueue: set label "
        "kueue.x-k8s.io/queue-name"
    ) in message


@pytest.mark.parametrize("kind", ["RayJob", "RayCluster"])
def test_a_ray_cluster_without_the_token_is_refused_by_the_policy(
    training, local_cluster, kind
) -> None:
    _, job = ray_jobs.example()
    del job["spec"]["rayClusterSpec"]["authOptions"]
    doc = job if kind == "RayJob" else {
        "apiVersion": job["apiVersion"], "kind": "RayCluster",
        "metadata": {"name": "open", "labels": job["metadata"]["labels"]},
        "spec": job["spec"]["rayClusterSpec"],
    }  # fmt: skip
    message = refusal(lambda: ray_jobs.apply(local_cluster.api, NS, doc))
    assert "ValidatingAdmissionPolicy 'gridloop-itest-ray-token-auth'" in message, message
    spec = "RayJob's spec.rayClusterSpec" if kind == "RayJob" else "RayCluster's spec"
    assert f"set authOptions: {{mode: token}} in the {spec}" in message, message


def test_a_rayjob_with_a_cluster_selector_is_refused_by_kueues_webhook(
    training, local_cluster
) -> None:
    _, job = ray_jobs.example()
    job["metadata"]["name"] = "selector"
    job["spec"]["clusterSelector"] = {"ray.io/cluster": "someone-elses"}
    message = refusal(lambda: ray_jobs.apply(local_cluster.api, NS, job))
    assert "spec.clusterSelector" in message
    assert "a kueue managed job should not use an existing cluster" in message


GPU_LIMIT = {"limits": {"nvidia.com/gpu": "1"}}


def gpu_rayjob(name: str, queue: str) -> dict:
    """A RayJob whose one worker asks for a node's 8 GPUs (the head asks for none). Its
    pods land on kwok's simulated GPU nodes: they are marked Running, nothing runs."""
    pod = {"containers": [{"name": "ray", "image": "rayproject/ray:2.52.0"}]}
    worker = {"name": "ray-worker", "image": "rayproject/ray:2.52.0"}
    worker["resources"] = {
        "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "8"},
        "limits": {"nvidia.com/gpu": "8"},
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {
            "entrypoint": "python -c 'import ray; ray.init()'",
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": {
                "rayVersion": "2.52.0",
                "authOptions": {"mode": "token"},  # the chart's ray-token-auth policy
                "headGroupSpec": {"rayStartParams": {}, "template": {"spec": pod}},
                "workerGroupSpecs": [
                    {
                        "groupName": "gpu",
                        "replicas": 1,
                        "minReplicas": 1,
                        "maxReplicas": 1,
                        "rayStartParams": {},
                        "template": {"spec": {"containers": [worker]}},
                    }
                ],
            },
        },
    }


def test_a_gpu_rayjob_goes_to_the_next_region_when_a_quarantine_lowers_the_quota(
    training, local_cluster, namespace, sim, eventually, settle, looping
) -> None:
    """As batch Jobs do (test_quota_rebalancing): region one's GPU quota follows its
    healthy GPUs, so a RayJob's GPU worker is admitted in region two. Simulated: the GPU
    nodes are kwok's and the fault is `gridloop sim`'s; Kueue, the health service's code
    and KubeRay are real."""
    service = HealthService(
        local_cluster.api,
        connect(f"http://127.0.0.1:{local_cluster.state.ports.prometheus}"),
        POLICY,
        namespace,
        log=print,
    )
    settle(service)
    # a team's namespace, so the chart's GPU policy holds here: a GPU pod made directly is
    # refused, and the GPU pods below are admitted for who makes them (the job controller,
    # the chart's KubeRay: policies.gpuPodCreators)
    core = local_cluster.core
    core.patch_namespace(namespace, {"metadata": {"labels": {"gridloop.io/team": "rt"}}})
    direct = {
        "metadata": {"name": "direct"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "resources": GPU_LIMIT}]},
    }
    assert "-gpu-jobs-queued" in refusal(lambda: core.create_namespaced_pod(namespace, direct))
    team = TeamQueues(local_cluster.api, namespace, f"rt{uuid.uuid4().hex[:4]}")
    try:
        team.create(QUOTA)
        looping(service)
        # region one: six of its eight nodes busy (48 GPUs held by 8-GPU Jobs)
        names = [f"busy-{i}" for i in range(6)]
        for name in names:
            team.submit(name)
        placed = team.wait_placed(names)
        assert {p.flavor for p in placed.values()} == {team.flavor_of("us-east")}
        eventually(
            lambda: len([p for p in core.list_namespaced_pod(namespace).items
                         if p.spec.node_name]) == 6,
            "the six Jobs' pods to be scheduled",
        )  # fmt: skip
        busy = {p.spec.node_name for p in core.list_namespaced_pod(namespace).items}
        idle = sorted(
            n.metadata.name
            for n in core.list_node(label_selector="gridloop.io/site=us-east").items
            if n.metadata.name not in busy
        )
        assert len(idle) == 2
        # its two idle nodes lose a GPU each: quarantined, region one's quota drops to 48
        for node in idle:
            sim("--node", node, "--gpu", "0", "--xid", "79")
        eventually(lambda: team.quota("us-east") == 48, "us-east's quota to drop by 16", 60)

        job = gpu_rayjob("gpu-rayjob", "default")
        created = ray_jobs.apply(local_cluster.api, namespace, job)
        assert created["spec"]["suspend"] is True

        workload = eventually(
            lambda: ray_jobs.admitted(local_cluster.api, namespace, "RayJob", "gpu-rayjob"),
            "the GPU RayJob to be admitted",
            60,
        )
        flavors = ray_jobs.flavors(workload)
        # the worker's GPUs in region two: region one's quota is full with its bad nodes out
        assert flavors["gpu"] == {team.flavor_of("eu-west")}
        cluster_name = eventually(
            lambda: (
                ray_jobs.rayjob(local_cluster.api, namespace, "gpu-rayjob")
                .get("status", {})
                .get("rayClusterName")
            ),
            "KubeRay to make the job's Ray cluster",
            60,
        )
        try:
            worker_nodes = eventually(
                lambda: {
                    p.spec.node_name
                    for p in ray_jobs.cluster_pods(local_cluster.api, namespace, str(cluster_name))
                    if "-gpu-" in p.metadata.name and p.spec.node_name
                },
                "the GPU worker pod to be scheduled",
                60,
            )
        except pytest.fail.Exception as failed:  # what the pods were doing (seen once in CI)
            pods = ray_jobs.cluster_pods(local_cluster.api, namespace, str(cluster_name))
            raise AssertionError(f"{failed}\n{_pod_states(pods)}") from None
        assert all(str(n).startswith("eu-west-h100-") for n in worker_nodes), worker_nodes
    finally:
        ray_jobs.delete_rayjob(local_cluster.api, namespace, "gpu-rayjob")
        team.delete()


def _pod_states(pods: list[Any]) -> str:
    """Each pod's name, node, phase and why it is not scheduled, as `kubectl describe` says."""
    if not pods:
        return "(no pods of the Ray cluster)"
    lines = []
    for p in pods:
        unscheduled = [
            f"{c.reason}: {c.message}"
            for c in p.status.conditions or []
            if c.type == "PodScheduled" and c.status != "True"
        ]
        gates = [g.name for g in p.spec.scheduling_gates or []]
        lines.append(
            f"{p.metadata.name} node={p.spec.node_name} phase={p.status.phase} "
            f"gates={gates} {' '.join(unscheduled)}"
        )
    return "\n".join(lines)

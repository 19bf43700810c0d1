"""GPU work in a team namespace goes through Kueue: the chart's gpu-jobs-queued policy
against the ways around it the security review found (issue 37, item 3).

The chart's own policy, as `helm template` renders it, is applied to the real API server
(CEL is evaluated there, as on any cluster). Every request is a server-side dry run made
with kubectl, as a tenant would make it, in a team namespace whose Pod Security level is
`privileged`, so Pod Security cannot be what refuses; each refusal names the policy. The
same objects in a namespace outside the teams are admitted: the policy is what refuses.
Kueue does not run in this lane; one real Job shows the job controller's GPU pod admitted.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from admission_dry_runs import Admission, policy_in_force
from chart_template import CHART, helm_template
from kubernetes import client

# the control plane and kwok only: admission is the API server's
pytestmark = [pytest.mark.cluster, pytest.mark.kwok_cluster]

RELEASE = "gpuadm"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
QUARANTINE = "gridloop.io/gpu-unhealthy"
RENAMED_GPU = "nvidia.com/a100"  # policies.gpuResources, as a renamed resource would be


def _render(namespace: str, team_namespace: str, home: Path) -> list[dict[str, Any]]:
    values = {
        "kueue": {"teams": [{"name": "adm", "namespace": team_namespace, "weight": 1}]},
        "policies": {"gpuResources": [RENAMED_GPU]},
    }
    (home / "values.yaml").write_text(yaml.safe_dump(values))
    docs = helm_template(
        RELEASE,
        namespace,
        home,
        *("-f", str(CHART / "profiles" / "minimal.yaml"), "-f", str(home / "values.yaml")),
        *("--show-only", "templates/policies.yaml"),
    )
    return [d for d in docs if "gpu-jobs-queued" in d["metadata"]["name"]]


def _container(resources: dict[str, str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "work", "image": "busybox", "command": ["true"]}
    if resources:
        container["resources"] = {"limits": resources}
    return container


def _pod_spec(gpu: str | None = "nvidia.com/gpu", **extra: Any) -> dict[str, Any]:
    return {
        "restartPolicy": "Never",
        "containers": [_container({gpu: "1"} if gpu else None)],
        **extra,
    }


def _meta(kind: str, labels: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    name = f"{kind.lower()}-{uuid.uuid4().hex[:5]}"
    return {"name": name, "labels": labels or {}, **extra}


def _pod(gpu: str | None = "nvidia.com/gpu", **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta("Pod"),
        "spec": _pod_spec(gpu, **extra),
    }


def _job(
    gpu: str | None = "nvidia.com/gpu", labels: dict[str, str] | None = None, **meta: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta("Job", labels, **meta),
        "spec": {"template": {"spec": _pod_spec(gpu)}},
    }


def _cron_job(labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": _meta("CronJob"),
        "spec": {
            "schedule": "*/5 * * * *",
            "jobTemplate": {
                "metadata": {"labels": labels or {}},
                "spec": {"template": {"spec": _pod_spec()}},
            },
        },
    }


def _workload(kind: str) -> dict[str, Any]:
    """A Deployment, StatefulSet, ReplicaSet or DaemonSet of one GPU container."""
    selector = {"app": "gpu"}
    spec: dict[str, Any] = {
        "selector": {"matchLabels": selector},
        "template": {
            "metadata": {"labels": selector},
            "spec": {"containers": [_container({"nvidia.com/gpu": "1"})]},
        },
    }
    if kind == "StatefulSet":
        spec["serviceName"] = "gpu"
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": _meta(kind), "spec": spec}


@pytest.fixture(scope="module")
def admission(local_cluster, tmp_path_factory) -> Iterator[Admission]:
    team = f"team-adm-{uuid.uuid4().hex[:5]}"
    docs = _render("gpuadm-system", team, tmp_path_factory.mktemp("helm-home"))
    with policy_in_force(local_cluster, docs, team, {"gridloop.io/team": "adm"}, _job()) as ready:
        yield ready


def test_a_job_owned_by_the_teams_own_config_map_is_still_checked(admission: Admission) -> None:
    forged = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "mine", "uid": str(uuid.uuid4())}]
    message = admission.refused(_job(ownerReferences=forged))
    assert "GPU jobs in team namespaces must name a Kueue LocalQueue" in message
    admission.admitted(_job(ownerReferences=forged), admission.plain)
    admission.admitted(_job(labels={QUEUE_LABEL: "default"}, ownerReferences=forged))


def test_a_cron_jobs_jobs_must_name_a_queue(admission: Admission) -> None:
    message = admission.refused(_cron_job())
    assert "set label kueue.x-k8s.io/queue-name in spec.jobTemplate.metadata.labels" in message
    admission.admitted(_cron_job(), admission.plain)
    admission.admitted(_cron_job({QUEUE_LABEL: "default"}))


def test_a_gpu_pod_made_directly_is_refused_whatever_it_claims(admission: Admission) -> None:
    message = admission.refused(_pod())
    assert "GPU pods in team namespaces may not be created directly" in message
    assert "system:serviceaccount:kube-system:job-controller" in message
    # a queue label or a Job as owner changes nothing: Kueue manages no bare pod here
    claims = _pod()
    claims["metadata"]["labels"] = {QUEUE_LABEL: "default"}
    claims["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "x", "uid": str(uuid.uuid4())}
    ]
    admission.refused(claims)
    admission.admitted(_pod(), admission.plain)
    admission.admitted(_pod(gpu=None))  # CPU pods are not the policy's business


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "ReplicaSet", "DaemonSet"])
def test_gpu_workloads_kueue_does_not_queue_are_refused(admission: Admission, kind: str) -> None:
    message = admission.refused(_workload(kind))
    assert f"GPU {kind}s in team namespaces are refused: Kueue queues no {kind} here" in message
    admission.admitted(_workload(kind), admission.plain)


@pytest.mark.parametrize("gpu", ["nvidia.com/mig-1g.10gb", RENAMED_GPU])
def test_mig_slices_and_renamed_gpus_count_as_gpus(admission: Admission, gpu: str) -> None:
    assert "must name a Kueue LocalQueue" in admission.refused(_job(gpu))
    admission.refused(_pod(gpu))
    admission.admitted(_job(gpu, {QUEUE_LABEL: "default"}))
    admission.admitted(_job("example.com/fpga"))  # not a GPU: not queued by this policy


@pytest.mark.parametrize(
    "toleration",
    [
        {"key": QUARANTINE, "operator": "Exists", "effect": "NoSchedule"},
        {"key": QUARANTINE, "operator": "Equal", "value": "xid-79"},
        {"operator": "Exists"},  # every taint, the quarantine's among them
    ],
    ids=["by-key", "by-value", "every-taint"],
)
def test_no_pod_in_a_team_namespace_tolerates_the_quarantine_taint(
    admission: Admission, toleration: dict[str, str]
) -> None:
    cpu_pod = _pod(gpu=None, tolerations=[toleration])
    assert f"may not tolerate the quarantine taint {QUARANTINE}" in admission.refused(cpu_pod)
    queued = _job(labels={QUEUE_LABEL: "default"})
    queued["spec"]["template"]["spec"]["tolerations"] = [toleration]
    admission.refused(queued)
    admission.admitted(cpu_pod, admission.plain)
    gpu_taint = _pod(gpu=None, tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])
    admission.admitted(gpu_taint)


def test_removing_the_team_label_does_not_take_a_team_out(
    admission: Admission, local_cluster
) -> None:
    core = local_cluster.core
    core.patch_namespace(admission.covered, {"metadata": {"labels": {"gridloop.io/team": None}}})
    try:
        assert "gridloop.io/team" not in (
            core.read_namespace(admission.covered).metadata.labels or {}
        )
        # the chart's teams are bound by their namespace's name, which nobody can change
        message = admission.refused(_pod())
        assert f"with binding '{admission.policy}' denied" in message
    finally:
        core.patch_namespace(
            admission.covered, {"metadata": {"labels": {"gridloop.io/team": "adm"}}}
        )


def test_another_namespace_labelled_as_a_teams_is_checked_too(
    admission: Admission, local_cluster
) -> None:
    core = local_cluster.core
    core.patch_namespace(admission.plain, {"metadata": {"labels": {"gridloop.io/team": "adm"}}})
    try:
        message = admission.refused(_pod(), admission.plain)
        assert f"with binding '{admission.policy}-labelled' denied" in message
    finally:
        core.patch_namespace(admission.plain, {"metadata": {"labels": {"gridloop.io/team": None}}})


def test_a_queued_jobs_gpu_pod_comes_from_the_job_controller_and_is_admitted(
    admission: Admission, local_cluster, eventually
) -> None:
    """Not a dry run: the real kube-controller-manager's job controller creates the pod
    (no Kueue here to hold the Job: it starts at once)."""
    batch = client.BatchV1Api(local_cluster.api)
    job = _job(labels={QUEUE_LABEL: "default"})
    name = job["metadata"]["name"]
    batch.create_namespaced_job(admission.covered, job)
    try:

        def pod_made() -> bool:
            pods = local_cluster.core.list_namespaced_pod(
                admission.covered, label_selector=f"job-name={name}"
            )
            return bool(pods.items)

        eventually(pod_made, "the job controller's GPU pod", 30)
        events = local_cluster.core.list_namespaced_event(
            admission.covered, field_selector=f"involvedObject.name={name}"
        )
        assert not [e.message for e in events.items if e.reason == "FailedCreate"]
    finally:
        batch.delete_namespaced_job(name, admission.covered, propagation_policy="Background")

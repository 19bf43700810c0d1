"""The RayJob that trains an iteration's revision, as objects (pure).

One ConfigMap holds the training program (train_revision.py, shipped with gridloop) and
one RayJob runs it: a head that runs the driver and no tasks, one worker that trains, and
a submitter, all on the container nodes' CPU pool (``gridloop.io/pool: system``), in a
team namespace, labelled with the team's LocalQueue so Kueue admits the three together
against the team's quota or not at all. The head and the worker run gridloop's trainer
image (Ray and torch); the submitter only runs ``ray job submit``, so it gets the plain
Ray image of the same Ray version. Both read the object store's keys from a Secret and
its endpoint from the environment, as the training example does (examples/training). As
there, the Ray cluster wants the token KubeRay makes for it, and every pod runs
unprivileged (docs/security.md, "Ray heads want their cluster's token").

The job's name is the run's and the iteration's (``loop-<run>-<n>``), so a re-run finds the
job of its iteration instead of starting another one.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

from gridloop import names, versions

PROGRAM = "train_revision.py"
MOUNT = "/home/ray/loop"
POOL = {names.POOL_LABEL: "system"}
RUN_LABEL = "gridloop.io/loop-run"
ITERATION_LABEL = "gridloop.io/loop-iteration"
# Ray's token authentication (Ray 2.52, KubeRay 1.5 and later): KubeRay makes a Secret
# holding a random token for the job's cluster and gives it to the head, the worker and
# the submitter; the dashboard and Jobs API (8265) and the Ray client port (10001) refuse
# a caller without it.
AUTH = {"mode": "token"}
# Every pod: the images' own non-root user, no service account token (nothing in the job
# talks to the API server), no privilege escalation, no capability.
POD_SECURITY = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


@dataclass(frozen=True)
class TrainingJob:
    run: str
    iteration: int
    namespace: str
    queue: str  # the team's LocalQueue
    trajectories_uri: str  # s3://loop/<run>/iteration-<n>/collect/
    base_uri: str  # the serving revision's weights
    output_uri: str  # where the new revision goes
    endpoint: str  # the object store's URL as pods reach it
    secret: str  # the store's keys (AWS_ACCESS_KEY_ID, ...)
    epochs: int = 12
    learning_rate: float = 1e-3
    seed: int = 0

    @property
    def name(self) -> str:
        return f"loop-{self.run}-{self.iteration}"

    def labels(self) -> dict[str, str]:
        return {RUN_LABEL: self.run, ITERATION_LABEL: str(self.iteration)}


def program_text() -> str:
    return resources.files("gridloop.loop").joinpath(PROGRAM).read_text()


def config_map(job: TrainingJob) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": job.name, "namespace": job.namespace, "labels": job.labels()},
        "data": {PROGRAM: program_text()},
    }


def _env(job: TrainingJob) -> list[dict[str, str]]:
    values = {
        "TRAJECTORIES_URI": job.trajectories_uri,
        "BASE_URI": job.base_uri,
        "OUTPUT_URI": job.output_uri,
        "TRAIN_EPOCHS": str(job.epochs),
        "TRAIN_LEARNING_RATE": str(job.learning_rate),
        "TRAIN_SEED": str(job.seed),
        "TRAIN_CPUS": "2",  # the worker's limit: Ray counts its CPUs from it
        "AWS_ENDPOINT_URL": job.endpoint,
    }
    return [{"name": k, "value": v} for k, v in values.items()]


def _container(job: TrainingJob, name: str, cpu: tuple[str, str], memory: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": versions.get("trainer").image_ref,
        "env": _env(job),
        "envFrom": [{"secretRef": {"name": job.secret}}],
        "resources": {
            "requests": {"cpu": cpu[0], "memory": memory},
            "limits": {"cpu": cpu[1], "memory": memory},
        },
        "volumeMounts": [{"name": "program", "mountPath": MOUNT}],
        "securityContext": dict(CONTAINER_SECURITY),
    }


def _spec(container: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "nodeSelector": dict(POOL),
        "automountServiceAccountToken": False,
        "securityContext": dict(POD_SECURITY),
        "containers": [container],
        **more,
    }


def _pod(job: TrainingJob, container: dict[str, Any]) -> dict[str, Any]:
    volumes = [{"name": "program", "configMap": {"name": job.name}}]
    return {"metadata": {"labels": job.labels()}, "spec": _spec(container, volumes=volumes)}


def ray_job(job: TrainingJob) -> dict[str, Any]:
    """Small requests, high limits: the local cluster's container node has two cores,
    which the model server, the sandboxes and the router already ask a share of; the
    worker may use both while it trains."""
    ray = versions.get("ray")
    head = _container(job, "ray-head", ("200m", "1"), "2Gi")
    head["ports"] = [
        {"containerPort": 6379, "name": "gcs-server"},
        {"containerPort": 8265, "name": "dashboard"},
        {"containerPort": 10001, "name": "client"},
    ]
    worker = _container(job, "ray-worker", ("500m", "2"), "3Gi")
    submitter = {
        "name": "ray-job-submitter",
        "image": ray.image_ref,
        "resources": {
            "requests": {"cpu": "200m", "memory": "256Mi"},
            "limits": {"cpu": "1", "memory": "512Mi"},
        },
        "securityContext": dict(CONTAINER_SECURITY),
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": job.name,
            "namespace": job.namespace,
            "labels": {**job.labels(), "kueue.x-k8s.io/queue-name": job.queue},
        },
        "spec": {
            "entrypoint": f"python {MOUNT}/{PROGRAM}",
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": 60,
            "backoffLimit": 0,
            # written out so Kueue places it (kubernetes-sigs/kueue#12567, see the example)
            "submitterPodTemplate": {
                "metadata": {"labels": job.labels()},
                "spec": _spec(submitter, restartPolicy="Never"),
            },
            "rayClusterSpec": {
                "rayVersion": ray.version,
                "authOptions": dict(AUTH),
                "headGroupSpec": {
                    "rayStartParams": {"num-cpus": "0", "object-store-memory": "100000000"},
                    "template": _pod(job, head),
                },
                "workerGroupSpecs": [
                    {
                        "groupName": "train",
                        "replicas": 1,
                        "minReplicas": 1,
                        "maxReplicas": 1,
                        "rayStartParams": {"object-store-memory": "100000000"},
                        "template": _pod(job, worker),
                    }
                ],
            },
        },
    }

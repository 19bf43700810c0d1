"""The objects the policy test submits, in pairs that differ in one field (pure).

Each policy gets an object it must refuse and the same object made compliant, which
it must admit. Only the one field the policy checks differs, so nothing else on the
way (Pod Security, a RuntimeClass, another policy, RBAC) can refuse one and not the
other: a refusal of the first and an admission of the second can only be the policy.
Both run gridloop's image, locked down as the restricted Pod Security level asks, so
an image or Pod Security policy of the cluster has nothing to object to either.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gridloop import names

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GPU = names.GPU_RESOURCE
GENERATE_NAME = "gridloop-selftest-"
LABELS = {"app.kubernetes.io/part-of": "gridloop", "app.kubernetes.io/component": "selftest"}


class Expect(StrEnum):
    """What the API server must do with a probe."""

    DENY = "deny"  # refuse it, naming the policy (the binding has Deny)
    WARN = "warn"  # admit it with the policy's warning (the binding has Warn, not Deny)
    ALLOW = "allow"  # admit it, and the policy says nothing


@dataclass(frozen=True)
class Probe:
    what: str  # for the verdict line: "a pod without a runtimeClassName"
    policy: str  # the ValidatingAdmissionPolicy that decides it
    expect: Expect
    kind: str  # Pod, Job or RayCluster
    namespace: str
    body: dict[str, Any]


def _pod_spec(image: str) -> dict[str, Any]:
    return {
        "automountServiceAccountToken": False,
        "restartPolicy": "Never",
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "runAsGroup": 65532,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "probe",
                "image": image,
                "args": ["--help"],
                "resources": {
                    "requests": {"cpu": "10m", "memory": "16Mi"},
                    "limits": {"cpu": "10m", "memory": "16Mi"},
                },
                "securityContext": {
                    "runAsNonRoot": True,
                    "readOnlyRootFilesystem": True,
                    "allowPrivilegeEscalation": False,
                    "privileged": False,
                    "capabilities": {"drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
            }
        ],
    }


def _metadata(namespace: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "generateName": GENERATE_NAME,
        "namespace": namespace,
        "labels": {**LABELS, **(labels or {})},
    }


def sandbox_probes(
    namespace: str, policy: str, runtime_class: str, image: str, expect: Expect
) -> list[Probe]:
    """A pod without a RuntimeClass (refused) and the same pod under `runtime_class`."""
    bare: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(namespace),
        "spec": _pod_spec(image),
    }
    sandboxed = copy.deepcopy(bare)
    sandboxed["spec"]["runtimeClassName"] = runtime_class
    return [
        Probe("a pod without a runtimeClassName", policy, expect, "Pod", namespace, bare),
        Probe(
            f"the same pod with runtimeClassName {runtime_class}",
            policy,
            Expect.ALLOW,
            "Pod",
            namespace,
            sandboxed,
        ),
    ]


def _gpu_job(namespace: str, image: str, labels: dict[str, str] | None) -> dict[str, Any]:
    pod = _pod_spec(image)
    pod["containers"][0]["resources"]["limits"][GPU] = "1"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(namespace, labels),
        # suspended, as Kueue would leave it: even admitted for real it would start nothing
        "spec": {"suspend": True, "backoffLimit": 0, "template": {"spec": pod}},
    }


def gpu_job_probes(
    namespace: str, policy: str, queue: str, image: str, expect: Expect
) -> list[Probe]:
    """A GPU Job naming no LocalQueue (refused) and the same Job naming `queue`."""
    return [
        Probe(
            "a GPU job without a queue label",
            policy,
            expect,
            "Job",
            namespace,
            _gpu_job(namespace, image, None),
        ),
        Probe(
            f"the same job with {QUEUE_LABEL}={queue}",
            policy,
            Expect.ALLOW,
            "Job",
            namespace,
            _gpu_job(namespace, image, {QUEUE_LABEL: queue}),
        ),
    ]


def _ray_cluster(namespace: str, image: str, queue: str) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        # queued, as the GPU policy wants every Ray cluster in a team namespace
        "metadata": _metadata(namespace, {QUEUE_LABEL: queue}),
        "spec": {
            "suspend": True,  # as Kueue would leave it: even admitted it would start nothing
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": _pod_spec(image)}},
        },
    }


def ray_cluster_probes(
    namespace: str, policy: str, queue: str, image: str, expect: Expect
) -> list[Probe]:
    """A Ray cluster without Ray's token authentication (refused) and the same cluster
    with `authOptions: {mode: token}`."""
    bare = _ray_cluster(namespace, image, queue)
    token = copy.deepcopy(bare)
    token["spec"]["authOptions"] = {"mode": "token"}
    return [
        Probe(
            "a Ray cluster without token authentication",
            policy,
            expect,
            "RayCluster",
            namespace,
            bare,
        ),
        Probe(
            "the same Ray cluster with authOptions.mode token",
            policy,
            Expect.ALLOW,
            "RayCluster",
            namespace,
            token,
        ),
    ]

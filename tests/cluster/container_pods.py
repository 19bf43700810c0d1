"""Pods on the local cluster's container node, for the tests that run real containers."""

from __future__ import annotations

import subprocess
from typing import Any

from kubernetes import client

from gridloop.fleet import CONTAINER_NODE_LABEL
from gridloop.local.build.images import table

NODE = "system-000"


def kubectl(local_cluster, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    binary = local_cluster.state.dir / "bin" / "kubectl"
    return subprocess.run(
        [str(binary), "--kubeconfig", str(local_cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def pod_spec(name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {CONTAINER_NODE_LABEL: "true"},
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": table.busybox_ref(),
                    "command": command,
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                        "runAsNonRoot": True,
                        "runAsUser": 65534,
                    },
                }
            ],
            **spec,
        },
    }


def restricted(body: dict[str, Any]) -> dict[str, Any]:
    """A `pod_spec` body as Pod Security `restricted` (the team namespaces' level) admits it:
    its containers run non-root, unescalated, capabilities dropped already; this adds the
    runtime's seccomp profile."""
    for container in body["spec"]["containers"]:
        container["securityContext"]["seccompProfile"] = {"type": "RuntimeDefault"}
    return body


def phase(core: client.CoreV1Api, namespace: str, name: str) -> str:
    return str(core.read_namespaced_pod(name, namespace).status.phase)

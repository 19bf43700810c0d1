"""The API server is the real one: server-side apply conflicts and CEL admission policies."""

from __future__ import annotations

import os
import subprocess
import textwrap

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from gridloop.local.build import building

# the control plane, kwok and the GPU-health processes: no container node needed
pytestmark = [pytest.mark.cluster, pytest.mark.kwok_cluster]


def kubectl(cluster, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig))
    return subprocess.run(
        [str(building.binary("kubectl")), *args],
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def _config_map(namespace: str, value: str) -> str:
    return textwrap.dedent(f"""\
        apiVersion: v1
        kind: ConfigMap
        metadata: {{name: quota, namespace: {namespace}}}
        data: {{gpus: "{value}"}}
        """)


def test_server_side_apply_reports_a_conflict_and_force_takes_ownership(local_cluster, namespace):
    first = kubectl(
        local_cluster,
        "apply",
        "--server-side",
        "--field-manager=operator",
        "-f",
        "-",
        stdin=_config_map(namespace, "64"),
    )
    assert first.returncode == 0, first.stderr

    clash = kubectl(
        local_cluster,
        "apply",
        "--server-side",
        "--field-manager=rebalancer",
        "-f",
        "-",
        stdin=_config_map(namespace, "32"),
    )
    assert clash.returncode != 0
    assert "conflict" in clash.stderr.lower() and "operator" in clash.stderr

    forced = kubectl(
        local_cluster,
        "apply",
        "--server-side",
        "--field-manager=rebalancer",
        "--force-conflicts",
        "-f",
        "-",
        stdin=_config_map(namespace, "32"),
    )
    assert forced.returncode == 0, forced.stderr
    cm = local_cluster.core.read_namespaced_config_map("quota", namespace)
    assert cm.data == {"gpus": "32"}
    owners = {m.manager for m in cm.metadata.managed_fields if m.operation == "Apply"}
    assert "rebalancer" in owners


def _policy(name: str, namespace: str) -> str:
    return textwrap.dedent(f"""\
        apiVersion: admissionregistration.k8s.io/v1
        kind: ValidatingAdmissionPolicy
        metadata: {{name: {name}}}
        spec:
          failurePolicy: Fail
          matchConstraints:
            resourceRules:
            - apiGroups: [""]
              apiVersions: [v1]
              operations: [CREATE]
              resources: [pods]
          validations:
          - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
            message: GPU pods must carry a team label
        ---
        apiVersion: admissionregistration.k8s.io/v1
        kind: ValidatingAdmissionPolicyBinding
        metadata: {{name: {name}}}
        spec:
          policyName: {name}
          validationActions: [Deny]
          matchResources:
            namespaceSelector:
              matchLabels: {{kubernetes.io/metadata.name: {namespace}}}
        """)


def _pod(name: str, labels: dict[str, str]) -> dict[str, object]:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


def test_validating_admission_policy_rejects_a_pod_without_a_team_label(
    local_cluster, namespace, eventually
):
    name = f"require-team-{namespace}"[:60]
    applied = kubectl(local_cluster, "apply", "-f", "-", stdin=_policy(name, namespace))
    assert applied.returncode == 0, applied.stderr
    core = local_cluster.core
    try:
        rejection: list[ApiException] = []

        def rejected() -> bool:
            # the policy is compiled and loaded asynchronously: retry until it bites
            try:
                core.create_namespaced_pod(namespace, _pod("unlabelled", {}))
            except ApiException as err:
                rejection.append(err)
                return True
            core.delete_namespaced_pod("unlabelled", namespace, grace_period_seconds=0)
            return False

        eventually(rejected, "the admission policy to reject an unlabelled pod")
        assert rejection[-1].status == 422
        assert "GPU pods must carry a team label" in rejection[-1].body
        core.create_namespaced_pod(namespace, _pod("labelled", {"team": "research"}))
        assert core.read_namespaced_pod("labelled", namespace).metadata.labels["team"] == "research"
    finally:
        api = client.AdmissionregistrationV1Api(local_cluster.api)
        api.delete_validating_admission_policy_binding(name)
        api.delete_validating_admission_policy(name)

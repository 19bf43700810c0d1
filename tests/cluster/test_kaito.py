"""KAITO's workspace controller as the chart installs it on the local cluster: built here
from KAITO v0.12.0's source release (a mirror of github.com/kaito-project/kaito, checked
by its sha256: `gridloop local build kaito --mirror DIR`), bundled from the same archive
(`--mirror`), a real pod on the container node with nodes the user brings
(`--node-provisioner=byo`), its CRDs served and its admission webhook answering.

The mirror is the project's (../shared/upstream/, or $GRIDLOOP_UPSTREAM_MIRROR): without
it this module fails, never skips.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from platform_install import HEALTH_OFF, NAMESPACE, Installed, installed_platform

import upstream_mirror
from gridloop import versions

pytestmark = pytest.mark.cluster
CONTROLLER = "kaito-workspace"  # upstream's Deployment, in the release namespace
WORKSPACES = "workspaces.kaito.sh"


@pytest.fixture(scope="module")
def platform(local_cluster, tmp_path_factory) -> Iterator[Installed]:
    work = tmp_path_factory.mktemp("kaito")
    sets = (*HEALTH_OFF, "kaito.enabled=true")
    with installed_platform(local_cluster, work, sets, mirror=upstream_mirror.folder()) as done:
        yield done


def workspace(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kaito.sh/v1beta1",
        "kind": "Workspace",
        "metadata": {"name": name, "namespace": NAMESPACE},
        **spec,
    }


def test_the_controller_built_here_runs_on_the_container_node_with_nodes_the_user_brings(
    platform, local_cluster
):
    kaito = versions.get("kaito")
    apps = client.AppsV1Api(local_cluster.api)
    deployment = apps.read_namespaced_deployment(CONTROLLER, NAMESPACE)
    assert deployment.status.ready_replicas == 1, deployment.status
    (container,) = deployment.spec.template.spec.containers
    assert container.image == f"mcr.microsoft.com/aks/kaito/workspace:{kaito.bare}"
    assert "--node-provisioner=byo" in container.args
    selector = ",".join(f"{k}={v}" for k, v in deployment.spec.selector.match_labels.items())
    (pod,) = local_cluster.core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
    node = local_cluster.core.read_node(pod.spec.node_name)
    assert node.metadata.labels.get("gridloop.io/container-node") == "true"
    log = local_cluster.core.read_namespaced_pod_log(pod.metadata.name, NAMESPACE)
    assert f"version: {kaito.version}" in log, log[-2000:]

    crd = client.ApiextensionsV1Api(local_cluster.api).read_custom_resource_definition(WORKSPACES)
    established = {c.type: c.status for c in crd.status.conditions}
    assert established.get("Established") == "True"


def test_its_webhook_refuses_a_workspace_kaito_cannot_serve_and_admits_a_valid_one(
    platform, local_cluster
):
    api = client.CustomObjectsApi(local_cluster.api)

    def create(body: dict[str, Any]) -> Any:
        return api.create_namespaced_custom_object(
            "kaito.sh", "v1beta1", NAMESPACE, "workspaces", body, dry_run="All"
        )

    # neither a preset nor a template: KAITO's own validation, served by its webhook
    with pytest.raises(ApiException) as refused:
        create(workspace("empty", resource={"labelSelector": {"matchLabels": {"a": "b"}}}))
    assert refused.value.status in (400, 422), refused.value.body
    assert "validation.workspace.kaito.sh" in refused.value.body, refused.value.body

    pod = {"spec": {"containers": [{"name": "vllm", "image": "ghcr.io/gridloop/busybox:1"}]}}
    made = create(
        workspace(
            "templated",
            resource={"labelSelector": {"matchLabels": {"gridloop.io/container-node": "true"}}},
            inference={"template": pod},
        )
    )
    assert made["metadata"]["name"] == "templated"

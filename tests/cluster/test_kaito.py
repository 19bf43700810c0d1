"""KAITO's workspace controller as the chart installs it on the local cluster: built here
from KAITO v0.12.0's source release (a mirror of github.com/kaito-project/kaito, checked
by its sha256: `gridloop local build kaito --mirror DIR`), bundled from the same archive
(`--mirror`), a real pod on the container node with nodes the user brings
(`--node-provisioner=byo`), its CRDs served and its admission webhook answering; then
docs/kaito.md's Workspace serving the tiny model on the container node, as a user runs it.

The mirror is the project's (../shared/upstream/, or $GRIDLOOP_UPSTREAM_MIRROR): without
it this module fails, never skips.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from fleet_reset import put_back
from health_pods import inject, settle, tainted
from kubernetes import client
from kubernetes.client.rest import ApiException
from platform_install import (
    GRIDLOOP,
    KEPT_NAMESPACES,
    USER_NAMESPACE,
    USER_RELEASE,
    Installed,
    ensure_release_namespace,
    remove_kept_namespaces,
)
from user_walks import BIN_DIR, walk_folder

import upstream_mirror
from doc_blocks import doc_block, substituted
from examples import example
from gridloop import versions

# the tiny-CPU Workspace runs gridloop's vLLM CPU image: these run with the heavy images
pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("heavy_images")]
NAMESPACE = USER_NAMESPACE  # the walk installs where a user's install goes
CONTROLLER = "kaito-workspace"  # upstream's Deployment, in the release namespace
WORKSPACES = "workspaces.kaito.sh"
MODEL = "tiny-kaito"  # the example's Workspace
WALK = doc_block("docs/kaito.md", "Serve the tiny model through KAITO")


@pytest.fixture(scope="module")
def platform(local_cluster, heavy_images, tmp_path_factory) -> Iterator[Installed]:
    """docs/kaito.md's walk on the running cluster, in a folder of the user's with the
    repository's examples, `gridloop local env` finding the suite's cluster; the mirror's
    folder is the project's, the model's the test's own."""
    work = tmp_path_factory.mktemp("kaito")
    walk = walk_folder(local_cluster, work)
    script = substituted(
        WALK,
        {
            ".venv/bin/": f"{BIN_DIR}/",
            "../shared/upstream": str(upstream_mirror.folder()),
            "/tmp/tiny": str(work / "tiny"),
        },
    )
    ensure_release_namespace(local_cluster)
    installed = walk.installed(local_cluster, work)  # --mirror: no chart folder of its own
    try:
        said = walk.run(script)
        yield walk.installed(local_cluster, work, said)
    finally:
        gone = installed.gridloop(
            "uninstall", "--release", USER_RELEASE, "--namespace", USER_NAMESPACE
        )
        assert gone.returncode == 0, gone.stdout + gone.stderr
        # not the release namespace: `local up` made it (the store's keys, Prometheus's
        # ServiceAccount)
        remove_kept_namespaces(local_cluster.core, KEPT_NAMESPACES[1:])


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


def test_doctor_names_the_kaito_this_release_installed_and_refuses_a_second_one(platform):
    kaito = versions.get("kaito")

    def kaito_check(release: str, namespace: str) -> dict[str, Any]:
        done = platform.gridloop(
            "doctor", "--profile", "local", "--mirror", str(upstream_mirror.folder()),
            "--set", "kaito.enabled=true", "-f", str(example("kaito/workspace-tiny-cpu.yaml")),
            "--release", release, "--namespace", namespace, "-o", "json",
        )  # fmt: skip
        assert done.stdout, done.stderr
        checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
        return dict(checks["kaito"])

    mine = kaito_check(USER_RELEASE, NAMESPACE)
    assert (mine["status"], mine["detail"]) == (
        "pass",
        f"installed by this chart (KAITO {kaito.version})",
    )
    other = kaito_check("another", "another")
    assert other["status"] == "fail", other
    assert other["detail"].startswith(
        f"KAITO {kaito.bare} already runs ({NAMESPACE}/{CONTROLLER}), not from release another"
    ), other


def conditions(local_cluster, name: str) -> dict[str, str]:
    """A Workspace's conditions, type -> status, as KAITO writes them."""
    found = client.CustomObjectsApi(local_cluster.api).get_namespaced_custom_object(
        "kaito.sh", "v1beta1", NAMESPACE, "workspaces", name
    )
    return {c["type"]: c["status"] for c in (found.get("status") or {}).get("conditions") or []}


def test_the_tiny_cpu_workspace_is_served_by_kaito_and_answers_completions(
    platform, local_cluster, eventually
):
    ready = ("ResourceReady", "InferenceReady", "WorkspaceSucceeded")
    eventually(
        lambda: all(conditions(local_cluster, MODEL).get(c) == "True" for c in ready),
        f"Workspace {MODEL}: {', '.join(ready)}",
        timeout=600,
    )
    # KAITO's own objects: a StatefulSet of the template's pod, on the container node
    sets = client.AppsV1Api(local_cluster.api).read_namespaced_stateful_set(MODEL, NAMESPACE)
    assert sets.status.ready_replicas == 1
    pod = local_cluster.core.read_namespaced_pod(f"{MODEL}-0", NAMESPACE)
    node = local_cluster.core.read_node(pod.spec.node_name)
    assert node.metadata.labels.get("gridloop.io/container-node") == "true"
    (vllm,) = pod.spec.containers
    assert vllm.image == versions.get("vllm-cpu").image_ref
    assert vllm.args[0].rstrip("/") == "s3://models/tiny/r1"
    # and its Service (port 80 to the pod's 5000) answers the OpenAI API
    svc = local_cluster.core.read_namespaced_service(MODEL, NAMESPACE)
    url = f"http://{svc.spec.cluster_ip}:80"
    body = {"model": MODEL, "prompt": "Hello", "max_tokens": 4}
    request = urllib.request.Request(
        f"{url}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.loads(response.read())
    assert answer["model"] == MODEL and answer["choices"][0]["text"], answer
    # gridloop status lists it beside the chart's model servers, in KAITO's words
    shown = platform.gridloop(
        "status", "--kubeconfig", platform.env["KUBECONFIG"], "--view", "inference", "-o", "json"
    )
    assert shown.returncode == 0, shown.stderr
    (row,) = [m for m in json.loads(shown.stdout)["models"] if m["name"] == MODEL]
    assert (row["kind"], row["ready"], row["replicas"], row["revision"]) == (
        "Workspace",
        1,
        1,
        "r1",
    )
    assert row["conditions"] == [
        "NodesReady=True", "ResourceReady=True", "InferenceReady=True", "WorkspaceSucceeded=True",
    ], row  # fmt: skip
    assert row["nodes"] == [pod.spec.node_name]


def preset(name: str, selector: dict[str, str]) -> dict[str, Any]:
    """One of KAITO's presets on the nodes `selector` picks (KAITO sizes it from their GPU
    labels)."""
    return workspace(
        name,
        resource={"labelSelector": {"matchLabels": selector}},
        inference={"preset": {"name": "phi-4-mini-instruct"}},
    )


def test_a_preset_on_the_simulated_gpu_nodes_lands_where_its_labels_say_never_on_a_quarantined_node(
    platform, local_cluster, eventually
):
    """Simulated: the GPU nodes are kwok's, so the preset's pod runs nothing (KAITO's
    kaito-base image is never pulled). Real: KAITO sizing it from the nodes' GPU labels,
    the StatefulSet it makes, the chart's health service quarantining a node, the
    scheduler placing the pod."""
    core, custom = local_cluster.core, client.CustomObjectsApi(local_cluster.api)
    pool = {"gridloop.io/site": "eu-west", "gridloop.io/pool": "a100"}
    zones: dict[str, list[str]] = {}
    for node in core.list_node(label_selector=",".join(f"{k}={v}" for k, v in pool.items())).items:
        zones.setdefault(node.metadata.labels["topology.kubernetes.io/zone"], []).append(
            node.metadata.name
        )
    zone, names = min((z, sorted(n)) for z, n in zones.items() if len(n) >= 2)
    sick, healthy = names[0], set(names[1:])
    inject(local_cluster, sick)
    made: list[str] = []
    try:
        eventually(lambda: tainted(local_cluster, sick), f"{sick} quarantined", timeout=120)
        for name, selector in (
            ("phi-zone", {**pool, "topology.kubernetes.io/zone": zone}),
            ("phi-sick", {"kubernetes.io/hostname": sick}),
        ):
            custom.create_namespaced_custom_object(
                "kaito.sh", "v1beta1", NAMESPACE, "workspaces", preset(name, selector)
            )
            made.append(name)

        def placed(name: str) -> Any:
            try:
                pod = core.read_namespaced_pod(f"{name}-0", NAMESPACE)
            except ApiException:
                return None
            scheduled = [c for c in pod.status.conditions or [] if c.type == "PodScheduled"]
            return (
                pod
                if scheduled and (pod.spec.node_name or scheduled[0].status == "False")
                else None
            )

        # on the zone's healthy node, which its labels pick
        zoned = eventually(lambda: placed("phi-zone"), "phi-zone's pod scheduled", timeout=120)
        assert zoned.spec.node_name in healthy, (zoned.spec.node_name, sick)
        assert zoned.spec.containers[0].resources.limits.get("nvidia.com/gpu"), zoned.spec
        # only the quarantined node picked: never placed there, and KAITO says why
        held = eventually(lambda: placed("phi-sick"), "phi-sick's pod judged", timeout=120)
        assert held.spec.node_name is None, held.spec.node_name
        eventually(
            lambda: conditions(local_cluster, "phi-sick").get("InferenceReady") == "False",
            "phi-sick: InferenceReady False",
            timeout=60,
        )
    finally:
        for name in made:
            custom.delete_namespaced_custom_object(
                "kaito.sh", "v1beta1", NAMESPACE, "workspaces", name
            )
        eventually(lambda: not set(made) & workspace_names(local_cluster), "presets gone", 120)
        # the fault cleared and out of Prometheus before the node is put back, so the
        # chart's service, still running, has nothing to quarantine it again for
        subprocess.run(
            [GRIDLOOP, "sim", "clear", "--state-dir", str(local_cluster.state.dir)], check=True
        )
        settle(local_cluster)
        put_back(core)


def workspace_names(local_cluster) -> set[str]:
    listed = client.CustomObjectsApi(local_cluster.api).list_namespaced_custom_object(
        "kaito.sh", "v1beta1", NAMESPACE, "workspaces"
    )
    return {item["metadata"]["name"] for item in listed["items"]}


def test_uninstall_deletes_the_releases_workspace_while_kaito_still_runs(platform, local_cluster):
    """KAITO's finalizer is on the Workspace: deleted with the controller (a plain helm
    uninstall), it would stay terminating, its name taken. Last in this module."""
    done = platform.gridloop("uninstall", "--release", USER_RELEASE, "--namespace", NAMESPACE)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "✓ kaito      1 Workspaces of the release deleted first" in done.stdout, done.stdout
    custom = client.CustomObjectsApi(local_cluster.api)
    left = custom.list_namespaced_custom_object("kaito.sh", "v1beta1", NAMESPACE, "workspaces")
    assert left["items"] == []
    apps = client.AppsV1Api(local_cluster.api)
    assert apps.list_namespaced_stateful_set(NAMESPACE).items == []

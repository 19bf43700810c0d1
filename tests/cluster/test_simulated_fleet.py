"""The simulated GPU fleet behaves like real GPU nodes to the real control plane."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest
from container_pods import pod_spec
from kubernetes import client

from gridloop.fleet import load_fleet, planned_nodes
from gridloop.local.build import building
from gridloop.local.kwok import nodes as simulated_nodes
from gridloop.local.kwok import stages

pytestmark = pytest.mark.cluster


def _ready(node: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def test_every_fleet_node_is_ready_with_its_labels_and_gpu_capacity(local_cluster, request):
    fleet = load_fleet(request.config.rootpath / "examples" / "fleets" / "default.yaml")
    want = {p.name: p for p in planned_nodes(fleet)}
    nodes = {n.metadata.name: n for n in local_cluster.core.list_node().items}

    assert set(want) <= set(nodes)
    for name, planned in want.items():
        node = nodes[name]
        assert _ready(node), name
        for key, value in planned.labels.items():
            assert node.metadata.labels.get(key) == value, (name, key)
        assert node.status.capacity["nvidia.com/gpu"] == str(planned.gpus)
        assert node.status.allocatable["nvidia.com/gpu"] == str(planned.gpus)
    # the container node is a real CPU node: no GPUs
    gpus = [int(n.status.allocatable.get("nvidia.com/gpu", "0")) for n in nodes.values()]
    assert sum(gpus) == 192


def _deployment(name: str, region: str, gpus: int, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"topology.kubernetes.io/region": region},
                    "containers": [
                        {
                            "name": "server",
                            "image": "vllm/vllm-openai:latest",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ],
                },
            },
        },
    }


def test_gpu_deployment_pinned_to_a_region_lands_there_and_becomes_available(
    local_cluster, namespace, eventually
):
    apps = client.AppsV1Api(local_cluster.api)
    apps.create_namespaced_deployment(namespace, _deployment("llm", "eu-west-1", 4, 3))

    def available() -> bool:
        status = apps.read_namespaced_deployment("llm", namespace).status
        return status.available_replicas == 3

    eventually(available, "deployment llm to have 3 available replicas")
    pods = local_cluster.core.list_namespaced_pod(namespace, label_selector="app=llm").items
    regions = {
        local_cluster.core.read_node(p.spec.node_name).metadata.labels[
            "topology.kubernetes.io/region"
        ]
        for p in pods
    }
    assert regions == {"eu-west-1"}
    assert all(p.status.phase == "Running" for p in pods)


def test_pod_asking_for_more_gpus_than_any_node_has_stays_pending(
    local_cluster, namespace, eventually
):
    pod = {
        "metadata": {"name": "too-big"},
        "spec": {
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "9"}}}
            ]
        },
    }
    local_cluster.core.create_namespaced_pod(namespace, pod)

    def unschedulable() -> bool:
        p = local_cluster.core.read_namespaced_pod("too-big", namespace)
        return any(
            c.type == "PodScheduled" and c.reason == "Unschedulable"
            for c in p.status.conditions or []
        )

    eventually(unschedulable, "the scheduler to report too-big Unschedulable")
    assert local_cluster.core.read_namespaced_pod("too-big", namespace).spec.node_name is None


def _job(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": annotations or {}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "train",
                            "image": "trainer:latest",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}},
                        }
                    ],
                },
            },
        },
    }


def _job_complete(batch: client.BatchV1Api, name: str, namespace: str) -> bool:
    conds = batch.read_namespaced_job(name, namespace).status.conditions or []
    return any(c.type == "Complete" and c.status == "True" for c in conds)


def test_a_pod_asking_for_gpus_tolerates_their_taint_and_one_asking_for_none_runs_for_real(
    local_cluster, namespace, eventually
):
    core = local_cluster.core
    gpu = _job("gpu")["spec"]["template"]
    gpu["metadata"] = {"name": "gpu"}
    gpu["spec"]["restartPolicy"] = "Always"
    core.create_namespaced_pod(namespace, gpu)
    # selects nothing, asks for no GPU, tolerates nothing
    cpu = pod_spec("cpu", ["sh", "-c", "echo ran"])
    del cpu["spec"]["nodeSelector"]
    core.create_namespaced_pod(namespace, cpu)

    placed = eventually(
        lambda: core.read_namespaced_pod("gpu", namespace).spec.node_name, "gpu to be placed"
    )
    assert core.read_node(placed).metadata.labels["gridloop.io/simulated"] == "true"
    # added by the API server's ExtendedResourceToleration plugin, not by the pod's author
    tolerations = core.read_namespaced_pod("gpu", namespace).spec.tolerations
    assert any(t.key == "nvidia.com/gpu" and t.operator == "Exists" for t in tolerations)
    where = eventually(
        lambda: core.read_namespaced_pod("cpu", namespace).spec.node_name, "cpu to be placed"
    )
    assert where == "system-000", f"on {where}: is a simulated GPU node without its taint?"
    eventually(
        lambda: core.read_namespaced_pod("cpu", namespace).status.phase == "Succeeded",
        "cpu to run and succeed",
        120,
    )
    assert core.read_namespaced_pod_log("cpu", namespace).strip() == "ran"


def test_sync_taints_a_gpu_node_an_older_gridloop_left_untainted(local_cluster):
    core, name = local_cluster.core, "us-east-h100-000"

    def taints() -> list[tuple[str, str, str]]:
        return [(t.key, t.value, t.effect) for t in core.read_node(name).spec.taints or []]

    others = [{"key": k, "value": v, "effect": e} for k, v, e in taints() if k != "nvidia.com/gpu"]
    core.patch_node(name, {"spec": {"taints": others or None}})
    assert ("nvidia.com/gpu", "present", "NoSchedule") not in taints()
    fleet = load_fleet(local_cluster.state.dir / "fleet.yaml")

    synced = simulated_nodes.sync(local_cluster.api, fleet)

    assert (synced.created, synced.deleted) == (0, 0)
    after = taints()
    assert after.count(("nvidia.com/gpu", "present", "NoSchedule")) == 1
    # a second sync leaves it as it is
    simulated_nodes.sync(local_cluster.api, fleet)
    assert taints() == after


def test_job_completes(local_cluster, namespace, eventually):
    batch = client.BatchV1Api(local_cluster.api)
    batch.create_namespaced_job(namespace, _job("train"))

    eventually(lambda: _job_complete(batch, "train", namespace), "job train to complete")
    assert batch.read_namespaced_job("train", namespace).status.succeeded == 1


def test_job_pod_runs_for_its_simulated_duration_before_it_succeeds(
    local_cluster, namespace, eventually
):
    batch = client.BatchV1Api(local_cluster.api)
    batch.create_namespaced_job(namespace, _job("long", {stages.DURATION_ANNOTATION: "4s"}))

    def running_pod() -> bool:
        pods = local_cluster.core.list_namespaced_pod(namespace, label_selector="job-name=long")
        return any(p.status.phase == "Running" for p in pods.items)

    eventually(running_pod, "the job's pod to be Running")
    assert not _job_complete(batch, "long", namespace)
    eventually(lambda: _job_complete(batch, "long", namespace), "job long to complete")


def test_not_ready_label_takes_a_node_out_and_removing_it_brings_it_back(local_cluster, eventually):
    core, name = local_cluster.core, "onprem-fra-a100-007"
    label = stages.NOT_READY_LABEL
    core.patch_node(name, {"metadata": {"labels": {label: "true"}}})
    try:
        eventually(lambda: not _ready(core.read_node(name)), f"{name} to turn NotReady")
        reason = next(c.reason for c in core.read_node(name).status.conditions if c.type == "Ready")
        assert reason == "SimulatedFailure"
    finally:
        core.patch_node(name, {"metadata": {"labels": {label: None}}})
    eventually(lambda: _ready(core.read_node(name)), f"{name} to be Ready again")


def test_kubectl_reports_the_pinned_kubernetes_release(local_cluster):
    kubectl = building.binary("kubectl")
    env = dict(os.environ, KUBECONFIG=str(local_cluster.kubeconfig))
    out = subprocess.run(
        [str(kubectl), "version", "-o", "json"], env=env, capture_output=True, text=True, check=True
    ).stdout
    pinned = building.versions.get("kubernetes").version
    assert f'"gitVersion": "{pinned}"' in out.split('"serverVersion"')[0]
    assert f'"gitVersion": "{pinned}"' in out.split('"serverVersion"')[1]

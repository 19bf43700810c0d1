"""Real Kueue in the local cluster: Jobs suspended by its webhook, admitted within quota onto
the flavor's nodes, kept waiting past it, and its metrics scraped by the local Prometheus.

Kueue here is the chart's own pod on the container node (the module installs the bundle
with the local profile, its health service off); the API server calls its webhooks
through kueue-webhook-service, as on any cluster. Each test makes its own
ResourceFlavor, ClusterQueue and LocalQueue, named after its namespace, over the
eu-west H100 pool, and deletes them afterwards. The last test runs Kueue as a host
process beside the control plane of a kwok-only cluster of its own, where no pod of it
could run.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from kueue_scenario import GPU, GROUP, VERSION, gpu_job

from gridloop import kube
from gridloop.local import cluster, processes
from gridloop.local.ports import Ports
from gridloop.local.state import load

pytestmark = pytest.mark.cluster

POOL = {"gridloop.io/site": "eu-west", "gridloop.io/pool": "h100"}
GPU_QUOTA = 4
TINY_FLEET = """\
apiVersion: gridloop.io/v1alpha1
kind: Fleet
metadata: {name: tiny}
kueue: {enabled: %s}
sites:
- name: lab
  type: on-prem
  region: on-prem-lab
  zones: [rack-a]
  pools:
  - {name: l4, gpu: L4, nodes: 2, gpusPerNode: 4}
"""


@pytest.fixture(scope="module")
def kueue_cluster(local_cluster, kueue_platform):
    """The shared cluster, with the chart's Kueue running."""
    return local_cluster


@dataclass(frozen=True)
class Queues:
    flavor: str
    cluster_queue: str
    local_queue: str
    namespace: str


@pytest.fixture
def queues(kueue_cluster, namespace) -> Iterator[Queues]:
    custom = client.CustomObjectsApi(kueue_cluster.api)
    made = Queues(f"{namespace}-h100", namespace, "work", namespace)

    def obj(kind: str, name: str, spec: dict[str, Any], ns: str | None = None) -> dict[str, Any]:
        meta = {"name": name, **({"namespace": ns} if ns else {})}
        return {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": meta, "spec": spec}

    custom.create_cluster_custom_object(
        GROUP, VERSION, "resourceflavors", obj("ResourceFlavor", made.flavor, {"nodeLabels": POOL})
    )
    quota = [
        {"name": "cpu", "nominalQuota": "100"},
        {"name": "memory", "nominalQuota": "1000Gi"},
        {"name": GPU, "nominalQuota": str(GPU_QUOTA)},
    ]
    spec = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", GPU],
                "flavors": [{"name": made.flavor, "resources": quota}],
            }
        ],
    }
    custom.create_cluster_custom_object(
        GROUP, VERSION, "clusterqueues", obj("ClusterQueue", made.cluster_queue, spec)
    )
    custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "localqueues",
        obj("LocalQueue", made.local_queue, {"clusterQueue": made.cluster_queue}, namespace),
    )
    try:
        yield made
    finally:
        batch = client.BatchV1Api(kueue_cluster.api)
        for job in batch.list_namespaced_job(namespace).items:
            batch.delete_namespaced_job(
                job.metadata.name, namespace, propagation_policy="Background"
            )
        for plural, name in (
            ("clusterqueues", made.cluster_queue),
            ("resourceflavors", made.flavor),
        ):
            try:
                custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
            except ApiException as err:
                if err.status != 404:
                    raise


def _workload(api: client.ApiClient, namespace: str, job: str) -> dict[str, Any] | None:
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, "workloads"
    )["items"]
    for wl in items:
        if any(o["name"] == job for o in wl["metadata"].get("ownerReferences", [])):
            return dict(wl)
    return None


def _condition(wl: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    conditions = ((wl or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), {})


def test_a_queued_job_is_suspended_then_admitted_onto_its_flavors_nodes(
    kueue_cluster, queues, eventually
):
    batch = client.BatchV1Api(kueue_cluster.api)
    ns = queues.namespace

    created = batch.create_namespaced_job(ns, gpu_job("fits", queues.local_queue, 2))

    assert created.spec.suspend is True, "Kueue's webhook suspends a queued Job on creation"
    admitted = eventually(
        lambda: (
            _condition(_workload(kueue_cluster.api, ns, "fits"), "Admitted").get("status") == "True"
        ),
        "Kueue to admit the Workload of Job fits",
        60,
    )
    assert admitted
    wl = _workload(kueue_cluster.api, ns, "fits")
    assert wl is not None
    assignment = wl["status"]["admission"]["podSetAssignments"][0]
    assert assignment["flavors"][GPU] == queues.flavor
    eventually(lambda: not batch.read_namespaced_job("fits", ns).spec.suspend, "Job unsuspended")
    job = batch.read_namespaced_job("fits", ns)
    assert POOL.items() <= (job.spec.template.spec.node_selector or {}).items()

    def scheduled_node() -> str | None:
        pods = kueue_cluster.core.list_namespaced_pod(ns, label_selector="job-name=fits").items
        return next((p.spec.node_name for p in pods if p.spec.node_name), None)

    node = eventually(scheduled_node, "the Job's pod to be scheduled", 60)
    labels = kueue_cluster.core.read_node(node).metadata.labels
    assert POOL.items() <= labels.items()


def test_a_job_over_quota_stays_suspended_with_a_pending_workload_saying_why(
    kueue_cluster, queues, eventually
):
    batch = client.BatchV1Api(kueue_cluster.api)
    ns = queues.namespace
    batch.create_namespaced_job(ns, gpu_job("first", queues.local_queue, GPU_QUOTA))
    eventually(
        lambda: (
            _condition(_workload(kueue_cluster.api, ns, "first"), "Admitted").get("status")
            == "True"
        ),
        "the first Job to take the whole quota",
        60,
    )

    batch.create_namespaced_job(ns, gpu_job("second", queues.local_queue, 1))

    def pending() -> dict[str, Any]:
        reserved = _condition(_workload(kueue_cluster.api, ns, "second"), "QuotaReserved")
        return reserved if reserved.get("status") == "False" else {}

    reserved = eventually(pending, "the second Workload to be pending with a reason", 60)
    assert isinstance(reserved, dict)
    assert reserved["reason"] == "Pending"
    assert "insufficient" in reserved["message"].lower()
    assert batch.read_namespaced_job("second", ns).spec.suspend is True
    assert _condition(_workload(kueue_cluster.api, ns, "second"), "Admitted").get("status") != (
        "True"
    )


def test_prometheus_scrapes_kueues_metrics_with_its_token(kueue_cluster, eventually):
    if "prometheus" not in kueue_cluster.state.components:
        pytest.skip("this cluster runs no Prometheus (--no-gpu-health)")
    url = f"http://127.0.0.1:{kueue_cluster.state.ports.prometheus}/api/v1/query?"
    query = url + urllib.parse.urlencode({"query": 'up{job="kueue"}'})

    def up() -> bool:
        with urllib.request.urlopen(query, timeout=5) as resp:
            result = json.load(resp)["data"]["result"]
        return bool(result) and result[0]["value"][1] == "1"

    eventually(up, 'Prometheus to report up{job="kueue"} == 1', 60)


def _state(state_dir: Path) -> dict[str, Any]:
    return dict(json.loads((state_dir / "state.json").read_text()))


def test_down_stops_kueue_and_an_up_without_it_removes_its_webhooks(tmp_path, gridloop):
    fleet, state_dir, base = tmp_path / "tiny.yaml", tmp_path / "state", 28000
    args = ("--fleet", str(fleet), "--state-dir", str(state_dir), "--base-port", str(base))
    kueue_ports = [p for owner, p in Ports.from_base(base).by_process().items() if "kueue" in owner]
    fleet.write_text(TINY_FLEET % "true")
    try:
        up = gridloop("local", "up", "--no-gpu-health", *args)
        assert up.returncode == 0, up.stderr
        assert "kueue" in _state(state_dir)["components"]
        assert cluster.fully_running(load(state_dir))
        assert all(processes.listening(p) for p in kueue_ports)

        down = gridloop("local", "down", "--state-dir", str(state_dir))

        assert down.returncode == 0, down.stderr
        assert "stopped: agent-sandbox, kueue, kwok," in down.stdout
        assert not [p for p in kueue_ports if processes.listening(p)]

        fleet.write_text(TINY_FLEET % "false")
        again = gridloop("local", "up", "--no-gpu-health", *args)

        assert again.returncode == 0, again.stderr
        assert "removed 2 Kueue webhook configurations" in again.stdout
        admission = client.AdmissionregistrationV1Api(kube.api_client(state_dir / "kubeconfig"))
        names = [h.metadata.name for h in admission.list_mutating_webhook_configuration().items]
        assert not [n for n in names if "kueue" in n]
        assert "kueue" not in _state(state_dir)["components"]
    finally:
        gridloop("local", "down", "--purge", "--state-dir", str(state_dir))

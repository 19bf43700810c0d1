"""The chart's health service as a user's cluster runs it: two replicas of gridloop's image
on the container node, in-cluster config, the chart's ServiceAccount and RBAC, its Lease,
reading the local Prometheus through the Service a user's URL names.

The module installs the bundle with the local profile, health service on (the other
modules that inject faults install it off and drive their own). Faults are injected with
`gridloop sim inject`, as a user would (the GPU metrics are simulated: no GPU here). What
the service did is read back from the cluster: taints, the ClusterQueue's quota, its
Events, its Lease, and the API server's audit log, which records who made each change.
On the way out the release is uninstalled first, so nothing re-quarantines a node after
the faults are cleared and the nodes put back.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from container_pods import kubectl, pod_spec, restricted
from health_pods import (
    ACCOUNT,
    NAMESPACE,
    USER,
    gpu_quota,
    health_platform,
    holder,
    inject,
    leader_logs,
    pods,
    quarantine_events,
    tainted,
)
from platform_install import GRIDLOOP, Installed

from gridloop import names
from gridloop.health import patches
from gridloop.health import status_configmap as status
from gridloop.health.actions import Quarantine
from gridloop.health.observed import OTHER_SCRAPE
from gridloop.health.reading import connect
from gridloop.local import launching, prometheus_config
from gridloop.local.build import building

pytestmark = pytest.mark.cluster

IMAGE = "ghcr.io/gridloop/gridloop:0.1.0"


@pytest.fixture(scope="module")
def platform(local_cluster, tmp_path_factory) -> Iterator[Installed]:
    with health_platform(local_cluster, tmp_path_factory.mktemp("health-pods")) as done:
        yield done


def _audited(local_cluster, since: float) -> list[dict[str, Any]]:
    """The audit log's entries (flags.audit_policy: ServiceAccounts' writes) since then."""
    entries = []
    # read while the API server writes: a last line without its newline is not whole yet
    for line in launching.audit_log(local_cluster.state).read_text().split("\n")[:-1]:
        entry = json.loads(line)
        stamp = dt.datetime.fromisoformat(entry["requestReceivedTimestamp"].replace("Z", "+00:00"))
        if stamp.timestamp() >= since - 1:
            entries.append(entry)
    return entries


def test_two_replicas_of_gridloops_image_run_on_the_container_node_and_one_leads(
    platform, local_cluster, eventually
) -> None:
    eventually(lambda: holder(local_cluster), "a replica to take the Lease", 60)
    replicas = pods(local_cluster)

    assert len(replicas) == 2
    for pod in replicas:
        assert pod.spec.node_name == "system-000"
        assert pod.spec.service_account_name == ACCOUNT
        (container,) = pod.spec.containers
        assert container.image == IMAGE
        (status,) = pod.status.container_statuses
        assert status.ready and status.container_id.startswith("containerd://")
    assert holder(local_cluster) in {p.metadata.name for p in replicas}
    assert "gridloop-health" not in local_cluster.state.components, "no host-process service"
    logs = local_cluster.core.read_namespaced_pod_log(replicas[0].metadata.name, NAMESPACE)
    assert "http://kube-prometheus-stack-prometheus.monitoring.svc:9090" in logs


@pytest.mark.parametrize(
    ("verb", "resource", "namespace", "allowed"),
    [
        ("patch", "nodes", None, True),
        ("watch", "nodes", None, True),
        ("create", "pods --subresource=eviction", None, True),
        ("patch", "clusterqueues.kueue.x-k8s.io", None, True),
        ("update", "leases/gridloop-health", NAMESPACE, True),
        ("create", "events", "default", True),
        ("get", "secrets", NAMESPACE, False),
        ("list", "secrets", None, False),
        ("delete", "nodes", None, False),
        ("delete", "pods", None, False),
        ("patch", "deployments.apps", NAMESPACE, False),
        ("create", "pods", None, False),
        ("update", "leases/kube-scheduler", "kube-system", False),
        ("delete", "clusterqueues.kueue.x-k8s.io", None, False),
    ],
)
def test_its_service_account_may_do_what_it_does_and_nothing_more(
    platform, verb: str, resource: str, namespace: str | None, allowed: bool
) -> None:
    where = ["-n", namespace] if namespace else ["--all-namespaces"]
    result = subprocess.run(
        [
            str(building.binary("kubectl")),
            "auth",
            "can-i",
            verb,
            *resource.split(),
            *where,
            "--as",
            USER,
        ],
        capture_output=True,
        text=True,
        env=platform.env,
    )

    assert result.stdout.strip() == ("yes" if allowed else "no"), result.stdout + result.stderr


def _patch_node_as_the_service(local_cluster, node: str, body: dict, *flags: str):
    """`kubectl patch node` with the health service's own identity (impersonated); a
    merge patch unless `flags` say otherwise."""
    how = flags or ("--type", "merge")
    return kubectl(local_cluster, "patch", "node", node, "-p", json.dumps(body), "--as", USER, *how)


POLICY = f"{ACCOUNT}-node-fields"


@pytest.mark.parametrize(
    ("body", "refusal"),
    [
        pytest.param(
            {"metadata": {"labels": {"gridloop.io/team": "mine"}}},
            "may change only its own label (gridloop.io/gpu-health)",
            id="a-label-it-does-not-own",
        ),
        pytest.param(
            {"metadata": {"annotations": {"example.com/owner": "me"}}},
            "may change only its own annotations (health.gridloop.io/*)",
            id="an-annotation-it-does-not-own",
        ),
        pytest.param(
            {"spec": {"taints": [{"key": "example.com/mine", "effect": "NoSchedule"}]}},
            "may change only its own taint (gridloop.io/gpu-unhealthy)",
            id="a-taint-it-does-not-own",
        ),
        pytest.param(
            {"spec": {"providerID": "kwok://elsewhere"}},
            "may change only spec.unschedulable and its taint",
            id="another-spec-field",
        ),
    ],
)
def test_the_service_account_may_change_on_a_node_only_what_the_service_owns(
    platform, local_cluster, body: dict, refusal: str
) -> None:
    node = "eu-west-h100-001"
    before = local_cluster.core.read_node(node)

    refused = _patch_node_as_the_service(local_cluster, node, body)

    assert refused.returncode != 0, refused.stdout
    assert f"ValidatingAdmissionPolicy '{POLICY}'" in refused.stderr, refused.stderr
    assert refusal in refused.stderr, refused.stderr
    after = local_cluster.core.read_node(node)
    assert after.metadata.resource_version == before.metadata.resource_version


def test_its_own_quarantine_and_release_pass_and_node_status_is_not_its_to_touch(
    platform, local_cluster, eventually
) -> None:
    """The service's own patches (health.patches, as it sends them) go through the policy;
    this node's real quarantine is the fault test's below, its release is only here."""
    node, flavor = "onprem-fra-a100-007", "onprem-fra-a100"  # no other test here uses it
    before = gpu_quota(local_cluster, flavor)
    read = lambda: local_cluster.api.sanitize_for_serialization(  # noqa: E731
        local_cluster.core.read_node(node)
    )
    out = Quarantine(node, frozenset({"GPU-x:xid-79"}), ("GPU-x",), "xid-79 on GPU 0", False)

    def send(patch: dict) -> None:
        del patch["metadata"]["resourceVersion"]  # the running service may write in between
        done = _patch_node_as_the_service(local_cluster, node, patch, "--type", "strategic")
        assert done.returncode == 0, done.stderr

    send(patches.quarantine(read(), out, time.time()))
    # the node controller taints a cordoned node (node.kubernetes.io/unschedulable): the
    # release is built after that, as the service's is from its watch
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not [
        t
        for t in read()["spec"].get("taints", [])
        if t["key"] == "node.kubernetes.io/unschedulable"
    ]:
        time.sleep(0.5)
    send(patches.release(read()))
    clean = local_cluster.core.read_node(node)
    assert not tainted(local_cluster, node) and not clean.spec.unschedulable
    assert names.HEALTH_STATE_LABEL not in clean.metadata.labels
    owned = [
        a for a in clean.metadata.annotations or {} if a.startswith(names.HEALTH_ANNOTATION_PREFIX)
    ]
    assert not owned, owned
    # node status is not among its rights at all: RBAC refuses before any policy runs
    capacity = {"status": {"capacity": {"nvidia.com/gpu": "80"}}}
    refused = _patch_node_as_the_service(local_cluster, node, capacity, "--subresource", "status")
    assert refused.returncode != 0, refused.stdout
    # (kubectl reads the object before it patches: that read is already refused)
    assert 'forbidden: User "system:serviceaccount:' in refused.stderr, refused.stderr
    assert 'resource "nodes/status"' in refused.stderr, refused.stderr
    eventually(lambda: gpu_quota(local_cluster, flavor) == before, "its quota back", 60)


def test_a_fault_is_quarantined_and_the_quota_lowered_with_its_service_account_alone(
    platform, local_cluster, eventually
) -> None:
    node, flavor = "us-east-h100-005", "us-east-h100"
    before = gpu_quota(local_cluster, flavor)
    since = time.time()
    assert not tainted(local_cluster, node), "a clean node to begin with"

    inject(local_cluster, node)

    try:
        eventually(lambda: tainted(local_cluster, node), f"{node} quarantined", 90)
        eventually(
            lambda: gpu_quota(local_cluster, flavor) == before - 8, "its 8 GPUs out of quota", 90
        )
    except pytest.fail.Exception as failed:
        raise AssertionError(f"{failed}\nthe leader's log:\n{leader_logs(local_cluster)}") from None

    # the controller-manager's own controllers (kube-system's accounts) also update the
    # node, e.g. the unschedulable taint once it is cordoned; nobody else touches it.
    # The API server logs a write once its response is sent: the line may trail the read.
    def writes() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        audited = [
            e
            for e in _audited(local_cluster, since)
            if not e["user"]["username"].startswith("system:serviceaccount:kube-system:")
        ]
        on_node = [e for e in audited if e["objectRef"].get("name") == node]
        on_queue = [e for e in audited if e["objectRef"].get("resource") == "clusterqueues"]
        return on_node, on_queue

    eventually(lambda: all(writes()), "the node's and the queue's writes in the audit log", 15)
    on_node, on_queue = writes()
    assert {e["user"]["username"] for e in on_node + on_queue} == {USER}
    assert {e["responseStatus"]["code"] for e in on_node + on_queue} == {200}
    assert quarantine_events(local_cluster, node, since) == 1


TENANT = "team-default"
# A forged exporter: an XID 79, a growing ECC double-bit count and a GPU of its own for
# the victim node, under every host label the service reads (node, Hostname, hostname)
FORGED = """\
mkdir -p /www && n=0
while true; do
  n=$((n+1)); l='gpu="0",UUID="GPU-forged-0",node="{node}",Hostname="{node}",hostname="{node}"'
  {{ echo "DCGM_FI_DEV_XID_ERRORS{{$l}} 79"
    echo "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{$l}} $n"
    echo "DCGM_FI_DEV_GPU_TEMP{{$l}} 40"; }} > /www/metrics.new && mv /www/metrics.new /www/metrics
  sleep 1
done &
exec httpd -f -p 8000 -h /www
"""


@pytest.fixture
def forged(local_cluster) -> Iterator[str]:
    """A tenant's pod forging DCGM faults for a healthy node, behind a Service the local
    Prometheus scrapes (labelled gridloop.io/model, as a model's Service is); its node."""
    victim, core = "eu-west-h100-003", local_cluster.core
    pod = restricted(pod_spec("forged-dcgm", ["sh", "-c", FORGED.format(node=victim)]))
    pod["metadata"]["labels"] = {"app": "forged-dcgm"}
    pod["spec"]["restartPolicy"] = "Always"
    pod["spec"]["volumes"] = [{"name": "www", "emptyDir": {}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "www", "mountPath": "/www"}]
    pod["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": 8000}]
    service = {
        "metadata": {"name": "forged-dcgm", "labels": {names.MODEL_LABEL: "forged"}},
        "spec": {"selector": {"app": "forged-dcgm"}, "ports": [{"name": "http", "port": 8000}]},
    }
    core.create_namespaced_pod(TENANT, pod)
    core.create_namespaced_service(TENANT, service)
    try:
        yield victim
    finally:
        core.delete_namespaced_service("forged-dcgm", TENANT)
        core.delete_namespaced_pod("forged-dcgm", TENANT, grace_period_seconds=0)


def test_a_tenants_pod_forging_dcgm_faults_quarantines_nothing(
    platform, local_cluster, forged, eventually
) -> None:
    """The security review's attack (2026-12-04), which then got a healthy node
    quarantined within 60 s: the service reads only its exporter job's series. That it
    still acts on a real fault is test_a_fault_is_quarantined_... above (the simulator's:
    no GPU here); no quarantine is made here, as the shipped breaker allows two an hour."""
    victim, flavor = forged, "eu-west-h100"
    before = gpu_quota(local_cluster, flavor)
    prom = connect(f"http://127.0.0.1:{local_cluster.state.ports.prometheus}")
    at_victim = f'node="{victim}", job!="{names.EXPORTER_JOB}"'

    def scraped() -> object:
        xid = prom.custom_query(f"DCGM_FI_DEV_XID_ERRORS{{{at_victim}}} == 79")
        ecc = prom.custom_query(f"increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{at_victim}}}[20s]) > 0")
        return xid and ecc

    # the forgery is in Prometheus, where the service's PromQL found it before
    eventually(scraped, "the forged XID 79 and ECC increase scraped from the tenant's pod", 90)
    for _ in range(4):  # four of the service's 5 s cycles with the forgery there
        time.sleep(5)
        assert not tainted(local_cluster, victim), leader_logs(local_cluster)
    assert scraped(), "the forgery was there all along"
    assert gpu_quota(local_cluster, flavor) == before
    assert not status.load(local_cluster.core, NAMESPACE).breaker.tripped

    # ignored, and counted: the health pods' own metric, as the local Prometheus scrapes it
    source = f"job {prometheus_config.VLLM_JOB}, namespace {TENANT}"  # how it was scraped
    counted = f'gridloop_health_ignored_series_total{{reason="{OTHER_SCRAPE}"}} > 0'
    eventually(lambda: prom.custom_query(counted), "the ignored series counted", 60)
    # and named by `gridloop status`, from the service's status ConfigMap
    shown = subprocess.run(
        [GRIDLOOP, "status", "--kubeconfig",
         str(local_cluster.kubeconfig), "--health-namespace", NAMESPACE, "--output", "table"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    (line,) = [x for x in shown.stdout.splitlines() if x.startswith("IGNORED: ")]
    assert f"from {source} ({OTHER_SCRAPE})" in line, line


def test_killing_the_leader_hands_over_with_no_duplicate_or_lost_action(
    platform, local_cluster, eventually
) -> None:
    leader = eventually(lambda: holder(local_cluster), "a leader", 60)
    core = local_cluster.core

    core.delete_namespaced_pod(leader, NAMESPACE)

    follower = eventually(
        lambda: (h := holder(local_cluster)) not in ("", leader) and h,
        "the other replica to take the Lease",
        90,
    )
    node, since = "eu-west-h100-002", time.time()
    inject(local_cluster, node)
    try:
        eventually(lambda: tainted(local_cluster, node), f"{node} quarantined by {follower}", 90)
    except pytest.fail.Exception as failed:
        raise AssertionError(f"{failed}\nthe leader's log:\n{leader_logs(local_cluster)}") from None
    time.sleep(10)  # two more cycles, and the replacement pod is up: nobody acts twice
    assert quarantine_events(local_cluster, node, since) == 1
    logs = core.read_namespaced_pod_log(str(follower), NAMESPACE)
    assert node in logs, logs[-2000:]
    eventually(lambda: len(pods(local_cluster)) == 2, "the Deployment to replace the pod", 60)

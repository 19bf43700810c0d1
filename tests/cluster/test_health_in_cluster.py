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
from platform_install import Installed

from gridloop.local import launching
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
    for line in launching.audit_log(local_cluster.state).read_text().splitlines():
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
    # node, e.g. the unschedulable taint once it is cordoned; nobody else touches it
    audited = [
        e
        for e in _audited(local_cluster, since)
        if not e["user"]["username"].startswith("system:serviceaccount:kube-system:")
    ]
    on_node = [e for e in audited if e["objectRef"].get("name") == node]
    on_queue = [e for e in audited if e["objectRef"].get("resource") == "clusterqueues"]
    assert on_node and on_queue, audited
    assert {e["user"]["username"] for e in on_node + on_queue} == {USER}
    assert {e["responseStatus"]["code"] for e in on_node + on_queue} == {200}
    assert quarantine_events(local_cluster, node, since) == 1


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

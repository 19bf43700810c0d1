"""The chart's health service running as pods: what the in-cluster health tests read and do.

Faults are injected with `gridloop sim inject`, as a user would (the GPU metrics are
simulated: no GPU here). What the service did is read back from the cluster: taints, the
ClusterQueue's quota, its Events and its Lease.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fleet_reset import put_back, until_fault_free
from kubernetes import client
from platform_install import GRIDLOOP, NAMESPACE, RELEASE, Installed, installed_platform

from gridloop.health.observed import TAINT_KEY
from gridloop.health.policy_loading import load_policy
from gridloop.health.reading import connect
from gridloop.health.service import HealthService
from gridloop.local import cluster

ACCOUNT = f"{RELEASE}-health"
USER = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
LEASE = "gridloop-health"
KUEUE = ("kueue.x-k8s.io", "v1beta2")
TEAM = "default"
SELECTOR = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=health"


def clear_faults(local_cluster) -> None:
    """Faults cleared, every node gridloop quarantined put back as it was, and Prometheus
    showing a fault-free fleet. The last wait is what lets the next module restart the
    cluster: a cleared XID is a series that goes away (dcgm-exporter 4.x gives each code a
    series of its own), which Prometheus marks stale only at its next scrape; restarted
    before that, it writes no marker and answers with the XID 79 of before for its five
    minutes of lookback (the likely cause of a cold CI run's test_health_node_loss.py
    setup failing: the simulator had no fault left, Prometheus still showed test_loop.py's
    XID 79 on its node 90 s later, two cluster restarts after that module)."""
    state = str(local_cluster.state.dir)
    subprocess.run([GRIDLOOP, "sim", "clear", "--state-dir", state], check=True)
    put_back(local_cluster.core)
    settle(local_cluster)


def settle(local_cluster, timeout: float = 90) -> None:
    """Wait until Prometheus shows a fault-free fleet: earlier modules' faults are cleared,
    but their last samples may still be read, and a service started now would act on
    them. A dry-run twin of the service looks, so nothing is acted on."""
    policy = load_policy(cluster.default_health_policy())
    prom = connect(f"http://127.0.0.1:{local_cluster.state.ports.prometheus}")
    service = HealthService(local_cluster.api, prom, policy, "default", log=lambda _m: None)
    until_fault_free(service, timeout, pause=1)


@contextmanager
def health_platform(local_cluster, work: Path, tidy: bool = True) -> Iterator[Installed]:
    """The bundle installed with its health service on, from a fault-free fleet; the
    faults cleared and the nodes put back once the release is gone (uninstalled first,
    so nothing re-quarantines a node after the faults are cleared). Not `tidy`: left as
    it is, for a cluster that stops next (cluster_restarts.nothing_after)."""
    clear_faults(local_cluster)
    try:
        with installed_platform(local_cluster, work, tidy=tidy) as done:
            yield done
    finally:
        if tidy:
            clear_faults(local_cluster)


def pods(local_cluster) -> list[client.V1Pod]:
    return local_cluster.core.list_namespaced_pod(NAMESPACE, label_selector=SELECTOR).items


def lease(local_cluster) -> client.V1Lease:
    return client.CoordinationV1Api(local_cluster.api).read_namespaced_lease(LEASE, NAMESPACE)


def holder(local_cluster) -> str:
    return str(lease(local_cluster).spec.holder_identity or "")


def leader_logs(local_cluster) -> str:
    try:
        return str(local_cluster.core.read_namespaced_pod_log(holder(local_cluster), NAMESPACE))[
            -3000:
        ]
    except client.ApiException as err:
        return f"(no logs: {err.reason})"


def inject(local_cluster, node: str) -> None:
    state = str(local_cluster.state.dir)
    done = subprocess.run(
        [GRIDLOOP, "sim", "inject", "--state-dir", state, "--node", node, "--xid", "79"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def tainted(local_cluster, node: str) -> bool:
    return any(t.key == TAINT_KEY for t in local_cluster.core.read_node(node).spec.taints or [])


def gpu_quota(local_cluster, flavor: str) -> int:
    custom = client.CustomObjectsApi(local_cluster.api)
    queue = custom.get_cluster_custom_object(*KUEUE, "clusterqueues", TEAM)
    for group in queue["spec"]["resourceGroups"]:
        for f in group["flavors"]:
            if f["name"] == flavor:
                for r in f["resources"]:
                    if r["name"] == "nvidia.com/gpu":
                        return int(r["nominalQuota"])
    raise AssertionError(f"no GPU quota for {flavor} in {queue['spec']}")


def quarantine_event_list(local_cluster, node: str, since: float) -> list[client.CoreV1Event]:
    """The health service's GPUQuarantined Events about `node` since then (each says which
    replica reported it)."""
    events = local_cluster.core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={node},reason=GPUQuarantined"
    ).items
    return [e for e in events if e.first_timestamp.timestamp() >= since - 1]


def quarantine_events(local_cluster, node: str, since: float) -> int:
    """How many GPUQuarantined Events about `node` since then."""
    return sum(e.count or 1 for e in quarantine_event_list(local_cluster, node, since))

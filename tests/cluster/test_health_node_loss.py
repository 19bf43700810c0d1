"""Two container nodes, one health replica on each: losing the leader's node hands the lead
to the other replica, with no action done twice and none lost.

A node fails in two steps here, with `gridloop local stop-node` as a user runs it:
- `--kubelet-only`: the pods' containers keep running (on a real cluster too), so the
  leader keeps leading; the Lease does not move and nobody acts twice;
- then the rest of the node goes: containerd, the shims and every container of its pods,
  killed through the node's cgroup, as when the machine dies. The other replica takes
  the Lease once it expires, and a fault injected as the node goes is quarantined once.
Who acted is read from each Event's reportingInstance (the replica's pod name).

This runs on the shared cluster (tests/conftest.py) restarted with two container nodes,
after every other test (the `restarts_cluster` and `loses_a_node` markers: the module
before it, test_training_samples.py, leaves the two nodes); it ends by starting it again
with its one node, which removes the lost node and its pods. The GPU
faults are simulated (no GPU here); the nodes, the pods and the service are real.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import cluster_restarts
import pytest
from cluster_restarts import nothing_after, restart
from health_pods import (
    gpu_quota,
    health_platform,
    holder,
    inject,
    lease,
    pods,
    quarantine_event_list,
    tainted,
)
from kubernetes.client.rest import ApiException
from platform_install import GRIDLOOP, Installed

from gridloop.local import processes
from gridloop.local.container import cgroups
from gridloop.local.container.layout import NodeLayout
from gridloop.local.state import load

pytestmark = [*cluster_restarts.MARKS, cluster_restarts.LOSES_A_NODE]

NODES = ("system-000", "system-001")
FIRST = ("us-east-h100-005", "us-east-h100")  # a node and its flavor
SECOND = ("eu-west-h100-002", "eu-west-h100")


@pytest.fixture(scope="module")
def one_node_fleet(local_cluster, tmp_path_factory, request) -> Iterator[Path]:
    """The cluster with two container nodes (restarted with them unless the module before,
    test_training_samples.py, left them); its fleet with one, to go back to."""
    state, work = local_cluster.state, tmp_path_factory.mktemp("node-loss")
    one = cluster_restarts.with_container_nodes(state.dir, work, len(NODES), state.base_port)
    try:
        yield one
    finally:  # the test gives the cluster its one node back, unless it failed first
        if cluster_restarts.container_nodes(state.dir) != 1 and not nothing_after(request):
            restart(state.dir, one, state.base_port)


@pytest.fixture(scope="module")
def platform(one_node_fleet, local_cluster, tmp_path_factory, request) -> Iterator[Installed]:
    """The health service installed; left installed, its faults not cleared, when the
    session's cluster stops next (run last, as under `make test`)."""
    work, tidy = tmp_path_factory.mktemp("node-loss-pods"), not nothing_after(request)
    with health_platform(local_cluster, work, tidy=tidy) as done:
        yield done


def _stop_node(state_dir: Path, node: str, *flags: str) -> str:
    """`gridloop local stop-node`, as a user runs it; what it printed."""
    done = subprocess.run(
        [GRIDLOOP, "local", "stop-node", node, *flags, "--state-dir", str(state_dir)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _ready_on(local_cluster) -> dict[str, str]:
    """Ready health replica -> the node it runs on."""
    return {
        p.metadata.name: p.spec.node_name
        for p in pods(local_cluster)
        if p.status.container_statuses and all(s.ready for s in p.status.container_statuses)
    }


def _describe(local_cluster) -> str:
    """The health pods as `kubectl get pods -o wide` would show them, and why not ready."""
    lines = []
    for p in pods(local_cluster):
        states = [
            f"ready={s.ready} restarts={s.restart_count} "
            f"{(s.state.waiting and s.state.waiting.reason) or ''}"
            for s in p.status.container_statuses or []
        ]
        lines.append(f"{p.metadata.name} {p.spec.node_name} {p.status.phase} {states}")
    return "\n".join(lines)


def _node_gone(local_cluster, name: str) -> bool:
    try:
        local_cluster.core.read_node(name)
    except ApiException as err:
        return err.status == 404
    return False


def test_losing_the_leaders_node_hands_over_with_no_duplicate_or_lost_action(
    platform, one_node_fleet, local_cluster, eventually
) -> None:
    state = local_cluster.state

    eventually(
        lambda: sorted(_ready_on(local_cluster).values()) == list(NODES),
        "a ready health replica on each container node",
        120,
    )
    unknown = subprocess.run(
        [GRIDLOOP, "local", "stop-node", "system-007", "--state-dir", str(state.dir)],
        capture_output=True,
        text=True,
    )
    assert unknown.returncode != 0
    assert unknown.stderr.strip().splitlines() == [
        "error: NAME: no container node 'system-007' in this cluster; its nodes: "
        "system-000, system-001"
    ]
    leader = str(eventually(lambda: holder(local_cluster), "a replica to take the Lease", 60))
    by_name = _ready_on(local_cluster)
    (follower,) = set(by_name) - {leader}
    lost = by_name[leader]
    quota = {flavor: gpu_quota(local_cluster, flavor) for _, flavor in (FIRST, SECOND)}
    transitions = lease(local_cluster).spec.lease_transitions or 0

    # 1. the leader's kubelet stops; its containers, the leader's among them, run on
    said = _stop_node(state.dir, lost, "--kubelet-only")
    assert f"{lost}: kubelet stopped; its containers keep running" in said
    (kubelet,) = [p for p in load(state.dir).processes if p.name == f"kubelet/{lost}"]
    assert not processes.alive(kubelet)
    node, first_at = FIRST[0], time.time()
    inject(local_cluster, node)

    eventually(lambda: tainted(local_cluster, node), f"{node} quarantined", 90)
    eventually(
        lambda: gpu_quota(local_cluster, FIRST[1]) == quota[FIRST[1]] - 8,
        f"{node}'s 8 GPUs out of quota",
        60,
    )
    time.sleep(6)  # a few more cycles of each replica
    events = quarantine_event_list(local_cluster, node, first_at)
    assert [e.reporting_instance for e in events] == [leader], "the leader, once"
    assert holder(local_cluster) == leader
    assert (lease(local_cluster).spec.lease_transitions or 0) == transitions

    # 2. the rest of the node goes: containerd, its shims, every container of its pods
    said = _stop_node(state.dir, lost)
    assert f"{lost}: kubelet was not running; " in said and " processes of containerd" in said
    assert not cgroups.pids(NodeLayout.of(state.dir, lost).cgroup), "nothing of it runs"
    node, second_at = SECOND[0], time.time()
    inject(local_cluster, node)

    eventually(lambda: holder(local_cluster) == follower, f"{follower} to take the Lease", 60)
    eventually(lambda: tainted(local_cluster, node), f"{node} quarantined by {follower}", 90)
    time.sleep(6)
    assert [
        e.reporting_instance for e in quarantine_event_list(local_cluster, node, second_at)
    ] == [follower]
    assert len(quarantine_event_list(local_cluster, FIRST[0], first_at)) == 1, (
        "nobody quarantined it again"
    )
    assert (lease(local_cluster).spec.lease_transitions or 0) == transitions + 1
    assert gpu_quota(local_cluster, FIRST[1]) == quota[FIRST[1]] - 8, "lowered once, not twice"
    # SECOND's quota: Kueue's pod may have been on the lost node, and its webhook refuses
    # every ClusterQueue change until it runs again (below), so it is checked at the end

    # the cluster back to its one node: `up` removes the lost one and its pods
    said = restart(state.dir, one_node_fleet, state.base_port)

    assert f"removed container nodes the fleet no longer has: {NODES[1]}" in said
    assert _node_gone(local_cluster, NODES[1])
    assert not local_cluster.core.list_pod_for_all_namespaces(
        field_selector=f"spec.nodeName={NODES[1]}"
    ).items
    try:
        eventually(
            lambda: list(_ready_on(local_cluster).values()) == [NODES[0]] * 2,
            f"both health replicas ready on {NODES[0]}",
            120,
        )
    except pytest.fail.Exception as failed:
        raise AssertionError(f"{failed}\n{_describe(local_cluster)}") from None
    for _, flavor in (FIRST, SECOND):  # each lost node's 8 GPUs out once: none lost, none twice
        eventually(
            lambda f=flavor: gpu_quota(local_cluster, f) == quota[f] - 8, f"{flavor}'s quota", 90
        )
    assert len(quarantine_event_list(local_cluster, FIRST[0], first_at)) == 1
    assert len(quarantine_event_list(local_cluster, SECOND[0], second_at)) == 1

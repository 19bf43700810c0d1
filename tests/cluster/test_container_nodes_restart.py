"""`local down` leaves nothing of the container nodes behind, and `up` brings their pods back.

This stops the shared cluster (tests/conftest.py) and starts it again, so it runs after
every other test (the `restarts_cluster` marker). What it checks is the host itself:
processes, cgroups, mounts, network interfaces, namespaces and iptables chains.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from container_pods import NODE, kubectl, phase, pod_spec
from kubernetes import client

from gridloop.local import cluster, processes
from gridloop.local.container import hostnet
from gridloop.local.container.layout import BRIDGE, SOCKETS_ROOT, cluster_cgroup, sockets_dir

pytestmark = [pytest.mark.cluster, pytest.mark.restarts_cluster]


def _chains() -> list[str]:
    found = []
    for tool in ("iptables-save", "ip6tables-save"):
        out = subprocess.run([tool], capture_output=True, text=True, check=False).stdout
        found += [
            f"{tool}: {line.split()[0]}"
            for line in out.splitlines()
            if line.startswith((":KUBE-", ":GRIDLOOP-"))
        ]
    return found


def _veths() -> list[str]:
    out = subprocess.run(
        ["ip", "-o", "link", "show", "type", "veth"], capture_output=True, text=True, check=False
    ).stdout
    return [line.split(":")[1].strip() for line in out.splitlines() if ":" in line]


def _mounts_under(folder: Path) -> list[str]:
    text = Path("/proc/self/mountinfo").read_text()
    return [
        line.split()[4] for line in text.splitlines() if line.split()[4].startswith(str(folder))
    ]


def _netns_of_pods() -> set[str]:
    """Network namespaces held by any process but the host's own."""
    host = os.readlink("/proc/self/ns/net")
    held = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                ns = os.readlink(proc / "ns" / "net")
            except OSError:
                continue
            if ns != host:
                held.add(ns)
    return held


def _plant_a_dead_cluster(live: Path, folder: Path) -> Path:
    """What a local cluster killed without `down` (a session's end, a reboot) leaves for the
    next `up`: its record naming it the owner of the container nodes, a kubelet's bind
    mount and its containerd's sockets, nobody listening on them."""
    dead = folder / "dead-cluster"
    dead.mkdir()
    for name in ("state.json", "fleet.yaml"):  # its processes are gone: `down` stopped them
        shutil.copy(live / name, dead / name)
    kubelet = dead / "nodes" / NODE / "kubelet"
    kubelet.mkdir(parents=True)
    subprocess.run(["mount", "--bind", str(kubelet), str(kubelet)], check=True)
    sockets = sockets_dir(dead)
    sockets.mkdir(parents=True)
    for name in (f"{NODE}.sock", f"{NODE}.sock.ttrpc"):
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(sockets / name))
    (SOCKETS_ROOT / "owner").write_text(f"{dead}\n")
    return dead


@pytest.mark.skipif(
    bool(os.environ.get("GRIDLOOP_TEST_STATE")),
    reason="GRIDLOOP_TEST_STATE reuses a user's running cluster: this test would stop it",
)
def test_down_leaves_nothing_and_up_brings_the_same_pods_back(
    local_cluster, namespace, eventually, tmp_path
):
    core, state = local_cluster.core, local_cluster.state
    core.create_namespaced_pod(
        namespace, pod_spec("keeps-running", ["sleep", "3600"], restartPolicy="Always")
    )
    eventually(lambda: phase(core, namespace, "keeps-running") == "Running", "the pod", 90)
    netns_before = _netns_of_pods()
    assert netns_before and _veths() and _chains()  # the pod and the Services are real
    first = core.read_namespaced_pod("keeps-running", namespace).status.container_statuses[0]
    pids = [p.pid for p in state.processes]
    # a leader Lease held by the pod (as controller-runtime names its holder), one by a
    # process off the nodes
    coord = client.CoordinationV1Api(local_cluster.api)
    for name, holder in (("pods", "keeps-running_4f1c"), ("others", "a-laptop_77aa")):
        spec = client.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=15)
        coord.create_namespaced_lease(
            namespace, client.V1Lease(metadata=client.V1ObjectMeta(name=name), spec=spec)
        )

    result = cluster.down(state.dir)

    assert not result.busy and not result.left, result.left.describe()
    assert not [p for p in state.processes if processes.alive(p)], pids
    mine = cluster_cgroup(state.dir).strip("/")
    assert not [c for c in Path("/sys/fs/cgroup").glob(f"*/{mine}")]
    assert not _mounts_under(state.dir)
    assert not _veths()
    assert not (netns_before & _netns_of_pods())
    assert subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True).returncode != 0
    assert not _chains()
    # kube-network-policies' nftables table went with it (it deletes it as it stops)
    assert not hostnet.policy_table_present()
    assert not SOCKETS_ROOT.exists()
    assert not [p for p in state.ports.by_process().values() if processes.listening(p)]

    # and what another cluster that died without `down` left, `up` sweeps first
    dead = _plant_a_dead_cluster(state.dir, tmp_path)
    assert _mounts_under(dead) and sockets_dir(dead).exists()

    # as tests/conftest.py started it, from the fleet it recorded
    said: list[str] = []
    again = cluster.up(
        state.dir, state.dir / "fleet.yaml", state.base_port, say=said.append, health_service=False
    )

    assert not again.already_running
    # the pod's Lease released as it would have released it (its new container leads at
    # once), the other's kept
    assert (
        f"leader leases: 1 released, their holders stopped with the cluster: {namespace}/pods"
        in said
    )
    released = coord.read_namespaced_lease("pods", namespace).spec
    assert (released.holder_identity or "", released.lease_duration_seconds) == ("", 1)
    assert coord.read_namespaced_lease("others", namespace).spec.holder_identity == "a-laptop_77aa"
    assert not _mounts_under(dead)
    assert not sockets_dir(dead).exists()
    assert (SOCKETS_ROOT / "owner").read_text().strip() == str(state.dir.resolve())

    def restarted() -> bool:  # the Pod's status says Running from before `down` until then
        (status,) = core.read_namespaced_pod("keeps-running", namespace).status.container_statuses
        return bool(status.ready and status.container_id != first.container_id)

    eventually(restarted, "the pod to be back with a new container", 120)
    pod = core.read_namespaced_pod("keeps-running", namespace)
    assert pod.spec.node_name == NODE  # the same Pod, on the same node
    alive = kubectl(local_cluster, "exec", "-n", namespace, "keeps-running", "--", "true")
    assert alive.returncode == 0, alive.stderr

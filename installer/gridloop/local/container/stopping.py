"""`gridloop local stop-node NAME`: a container node fails, as a machine does.

Its kubelet stops first. The node's containers keep running: a kubelet that stops leaves
its pods' containers to containerd, on a real node too, and a leader among them keeps
leading. Then, unless only the kubelet is asked for, containerd, its shims and every
container of the node's pods are killed through the node's cgroup, as when the machine
dies. The Node and its Pods stay in the API as they were: the controller-manager marks
the node NotReady only after its grace period (400 s here, see flags.py). `gridloop local
up` restarts the cluster and brings the node back, or removes it with its pods when the
fleet no longer has it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gridloop.errors import UsageError
from gridloop.fleet import FleetError, load_fleet
from gridloop.local import ports, processes
from gridloop.local.container import cgroups
from gridloop.local.container import starting as container
from gridloop.local.container.layout import NodeLayout
from gridloop.local.state import load


@dataclass(frozen=True)
class Stopped:
    kubelet: bool  # the kubelet was running and is stopped now
    killed: int  # processes killed in the node's cgroup: containerd, shims, containers


def container_node_names(state_dir: Path) -> list[str]:
    """The container nodes of the fleet the cluster in `state_dir` was started with."""
    try:
        fleet = load_fleet(state_dir / "fleet.yaml")
    except (FleetError, OSError):
        return []
    return [n.name for n in container.nodes(fleet, state_dir)]


def stop_node(state_dir: Path, name: str, kubelet_only: bool = False) -> Stopped:
    state = load(state_dir)
    if state is None or not any(processes.alive(p) for p in state.processes):
        raise UsageError(f"no local cluster runs in {state_dir}: nothing to stop")
    known = container_node_names(state_dir)
    if name not in known:
        have = ", ".join(known) if known else "none (its fleet has no containerNodes)"
        raise UsageError(f"NAME: no container node {name!r} in this cluster; its nodes: {have}")
    wanted = ports.node_process("kubelet", known.index(name))
    kubelet = next((p for p in state.processes if p.name == wanted), None)
    running = kubelet is not None and processes.alive(kubelet)
    if kubelet is not None and running:
        processes.stop(kubelet)
    killed = 0 if kubelet_only else cgroups.kill_all(NodeLayout.of(state_dir, name).cgroup)
    return Stopped(kubelet=running, killed=killed)

"""Healthy GPU capacity behind each Kueue ResourceFlavor (pure).

Kueue admits work against ClusterQueue quota, not against the GPUs that can
run it; quotas.py keeps the two equal, and this module says how many GPUs are
really there. It reads the same cycle the health plan read, plus the plan's
actions (a node quarantined this cycle is already out, a node released this
cycle is already back), and never does I/O or reads a clock.

A node counts for a flavor when it carries all of the flavor's `nodeLabels`
(a flavor without labels matches every node, as in Kueue). A node matching no
flavor is ignored; a node matching several flavors counts, in full, for each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gridloop import names
from gridloop.health.actions import Acknowledge, Action, Quarantine, Release
from gridloop.health.observed import NodeView, Observed
from gridloop.health.plan import gpu_faults
from gridloop.health.policy import Policy

GPU = names.GPU_RESOURCE


@dataclass(frozen=True)
class Flavor:
    """A Kueue ResourceFlavor, as read."""

    name: str
    node_labels: Mapping[str, str]  # spec.nodeLabels; a node matches when it has all of them


@dataclass(frozen=True)
class FlavorCapacity:
    flavor: str
    total: int  # GPUs (NodeView.gpus_expected) on every matching node
    healthy: int  # GPUs on matching nodes that are in service, minus GPUs known bad
    nodes: int
    healthy_nodes: int  # matching nodes in service (even if some of their GPUs are bad)


def bad_gpus(observed: Observed, policy: Policy) -> dict[str, int]:
    """node -> GPUs known bad this cycle: faulty ones plus vanished ones.

    Only nodes whose exporter is up: with the exporter down a node's GPUs are
    unknown, not bad (the same stance as plan()). Nodes with no bad GPU are
    left out. A fault a person acknowledged still makes its GPU bad: the node
    may run work again, but that GPU is not capacity to promise.
    """
    out: dict[str, int] = {}
    for name, node in observed.nodes.items():
        if not observed.exporter_up.get(name, False):
            continue
        readings = observed.gpus.get(name, {})
        bad = sum(1 for gpu in readings.values() if gpu_faults(gpu, policy))
        if policy.signals.vanished_gpu:
            bad += max(0, node.gpus_expected - len(readings))
        if bad:
            out[name] = bad
    return out


def matches(flavor: Flavor, node: NodeView) -> bool:
    return all(node.labels.get(key) == value for key, value in flavor.node_labels.items())


def _changes(actions: Sequence[Action]) -> tuple[set[str], set[str], set[str]]:
    """Nodes this cycle quarantines, releases, and hands back to a person."""
    quarantined = {a.node for a in actions if isinstance(a, Quarantine)}
    released = {a.node for a in actions if isinstance(a, Release)}
    acknowledged = {a.node for a in actions if isinstance(a, Acknowledge)}
    return quarantined, released, acknowledged


def _in_service(
    node: NodeView, quarantined: set[str], released: set[str], acknowledged: set[str]
) -> bool:
    """Out: not Ready, cordoned by anyone, or quarantined by gridloop (before or now).

    A Release this cycle uncordons a node gridloop quarantined, and an
    Acknowledge drops gridloop's record from one a person uncordoned: both are
    back in, though their views still show the record. Opted-out nodes are in
    service like any other.
    """
    if not node.ready or node.name in quarantined:
        return False
    if node.name in released:
        return True
    if node.name in acknowledged:
        return not node.unschedulable
    return not node.unschedulable and node.record is None


def capacity(
    flavors: Sequence[Flavor],
    nodes: Mapping[str, NodeView],
    actions: Sequence[Action],
    bad: Mapping[str, int],
) -> dict[str, FlavorCapacity]:
    """flavor name -> its capacity; every flavor gets an entry (total 0: no node matched)."""
    changes = _changes(actions)
    up = {name: _in_service(node, *changes) for name, node in nodes.items()}
    out: dict[str, FlavorCapacity] = {}
    for flavor in flavors:
        members = [node for node in nodes.values() if matches(flavor, node)]
        serving = [node for node in members if up[node.name]]
        out[flavor.name] = FlavorCapacity(
            flavor=flavor.name,
            total=sum(node.gpus_expected for node in members),
            healthy=sum(max(0, node.gpus_expected - bad.get(node.name, 0)) for node in serving),
            nodes=len(members),
            healthy_nodes=len(serving),
        )
    return out

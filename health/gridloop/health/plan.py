"""The health service's pure core: `plan(observed, policy, breaker, now) -> actions`.

No I/O, no clock, no globals: everything it knows comes in as arguments, and
everything it decides goes out as plain data (actions.py). Rules, in order:

1. Unsure means do nothing: Prometheus unreachable or failing, its newest sample older
   than two scrape intervals, or no DCGM sample for the whole fleet -> Hold. One
   exception: when only what is read once per scrape interval in the background is late
   or missing (a busy or just started Prometheus), while this cycle's own read of the
   fault events is fresh, those events (an XID that quarantines, an ECC double-bit
   increase) still quarantine, under the breaker; nothing else is decided
   (Hold(fault_events_only=True)). A fault event in this cycle's read also counts on a
   node the background read saw without a running exporter: its scrape succeeded since.
2. A node whose exporter is down is unknown, not broken -> Warn, no action.
3. Nodes gridloop quarantined: a person uncordoned it -> Acknowledge (never
   re-quarantined for the same faults); healthy -> MarkHealthy, then Release
   after the hold-down; a fault during the hold-down -> ClearHealthy.
4. Nodes opted out or cordoned by someone else are never touched.
5. New faults -> Quarantine, most severe first, under the limits (per pool and
   fleet-wide, count and percentage, the lower wins), which bound two things:
   - how fast: quarantines within the window; one more would pass it -> TripBreaker,
     and every further quarantine is a Skip until a reset (a storm: stop, ask a human);
   - how many are out: nodes quarantined now (and, with `limits.countCordoned`, nodes
     cordoned by someone else); one more would pass it -> Skip with Warn, and the node
     waits for a release to free a place (a slow stream never empties a pool).
"""

from __future__ import annotations

import math
from collections import Counter

from gridloop.health.actions import (
    Acknowledge,
    Action,
    ClearHealthy,
    Hold,
    MarkHealthy,
    Quarantine,
    Release,
    Skip,
    TripBreaker,
    Warn,
)
from gridloop.health.observed import OTHER_SCRAPE, Breaker, GpuReading, NodeView, Observed
from gridloop.health.policy import XID_ROW_REMAP_EVENT, Policy, XidAction

NODE = "node"  # the subject of node-level faults (a vanished GPU has no series to name it)


def gpu_faults(gpu: GpuReading, policy: Policy) -> list[str]:
    """The faults one GPU shows this cycle, by name (empty when healthy)."""
    s, out = policy.signals, []
    if gpu.xid:
        if gpu.xid == XID_ROW_REMAP_EVENT and gpu.xid not in policy.xid:
            if gpu.row_remap_pending:
                out.append(f"xid-{gpu.xid}")
        elif policy.xid_action(gpu.xid) is XidAction.QUARANTINE:
            out.append(f"xid-{gpu.xid}")
        elif (
            policy.xid_action(gpu.xid) is XidAction.COUNT
            and gpu.xid_repeats >= policy.xid_repeat_count
        ):
            out.append(f"xid-{gpu.xid}-repeated")
    if s.ecc_dbe_volatile and gpu.ecc_dbe_increase > 0:
        out.append("ecc-dbe")
    if s.row_remap_failure and gpu.row_remap_failure:
        out.append("row-remap-failure")
    if s.retired_pages_pending and gpu.retired_pages_pending:
        out.append("retired-pages-pending")
    for name, threshold, value in (
        ("thermal-violation", s.thermal_violation, gpu.thermal_violation),
        ("power-violation", s.power_violation, gpu.power_violation),
        ("nvlink-errors", s.nvlink_errors, gpu.nvlink_error_rate),
        ("pcie-replays", s.pcie_replays, gpu.pcie_replay_rate),
    ):
        if threshold is not None and value > 0 and value >= threshold.value:
            out.append(name)
    return out


def node_faults(node: NodeView, gpus: dict[str, GpuReading], policy: Policy) -> frozenset[str]:
    faults = {f"{uuid}:{f}" for uuid, gpu in gpus.items() for f in gpu_faults(gpu, policy)}
    if policy.signals.vanished_gpu and len(gpus) < node.gpus_expected:
        faults.add(f"{NODE}:gpu-vanished")
    return frozenset(faults)


_MEMORY_AND_BUS = frozenset(
    {"ecc-dbe", "row-remap-failure", "retired-pages-pending", "gpu-vanished"}
)


def _severity(faults: frozenset[str]) -> int:
    """Reset-class XIDs first, then memory and bus faults, then rates and repeats."""

    def rank(kind: str) -> int:
        if kind.startswith("xid-") and not kind.endswith("-repeated"):
            return 0
        return 1 if kind in _MEMORY_AND_BUS else 2

    return min(rank(f.split(":", 1)[1]) for f in faults)


def _reason(faults: frozenset[str], gpus: dict[str, GpuReading]) -> str:
    parts = []
    for fault in sorted(faults):
        subject, kind = fault.split(":", 1)
        where = f"GPU {gpus[subject].index} ({subject})" if subject in gpus else "node"
        parts.append(f"{kind} on {where}")
    return "; ".join(parts)


def limit(max_nodes: int, max_percent: float, size: int) -> int:
    """How many of `size` nodes may be quarantined in a window: the lower limit wins.

    A percentage never rounds a non-empty scope down to zero (one node of a
    small pool may still be taken out), but an explicit `max_nodes: 0` does.
    """
    by_percent = max(1, math.floor(size * max_percent / 100)) if size else 0
    return min(max_nodes, by_percent)


def plan(observed: Observed, policy: Policy, breaker: Breaker, now: float) -> list[Action]:
    if observed.prometheus_error:
        return [Hold(f"cannot read Prometheus: {observed.prometheus_error}")]
    unsure = _baseline_problem(observed, policy)
    if unsure is None:
        return _everything(observed, policy, breaker, now)
    age = observed.faults_read_age_s
    if age is None or age > policy.stale_after_s:
        return [Hold(unsure)]
    # the background read is late (a busy or just started Prometheus): this cycle's own
    # read of the fault events is fresh, and a GPU reporting XID 79 now is failing now
    return [Hold(unsure, fault_events_only=True), *_fault_events(observed, policy, breaker, now)]


def _baseline_problem(observed: Observed, policy: Policy) -> str | None:
    """Why what is read once per scrape interval cannot be trusted this cycle, or None."""
    unmatched = _unmatched(observed)
    if unmatched:
        return unmatched
    if observed.baseline_error and (
        observed.newest_sample_age_s is None or observed.newest_sample_age_s > policy.stale_after_s
    ):
        return f"the background read failed: {observed.baseline_error}"
    if observed.newest_sample_age_s is None or not any(observed.gpus.values()):
        return "no DCGM samples for the whole fleet"
    if observed.newest_sample_age_s > policy.stale_after_s:
        # the age itself is in the staleness metric; the reason stays the same while it lasts
        return f"DCGM samples are stale: the newest is older than {policy.stale_after_s:.0f}s"
    return None


def event_faults(gpu: GpuReading, policy: Policy) -> list[str]:
    """The faults a GPU shows from the fault events alone (its last XID, a fresh ECC
    double-bit increase): what needs no window, no state and no other GPU's series."""
    return gpu_faults(
        GpuReading(
            uuid=gpu.uuid, index=gpu.index, xid=gpu.xid, ecc_dbe_increase=gpu.ecc_dbe_increase
        ),
        policy,
    )


def _events(observed: Observed, name: str, policy: Policy) -> frozenset[str]:
    """The fault events this cycle's own read shows on one node."""
    gpus = observed.fault_gpus.get(name, {})
    return frozenset(f"{uuid}:{f}" for uuid, gpu in gpus.items() for f in event_faults(gpu, policy))


def _on_events(node: NodeView, events: frozenset[str]) -> tuple[list[Action], bool]:
    """What fresh fault events alone decide for a node: (its actions, whether it is a
    quarantine candidate). Only what errs on the side of keeping a failing GPU out: a
    quarantine, or a hold-down restarted; never a release or an acknowledgement."""
    if node.opted_out or not events:
        return [], False
    if node.record is not None:
        restart = node.unschedulable and node.record.healthy_since is not None
        return ([ClearHealthy(node.name)] if restart else []), False
    if node.unschedulable:
        return [Skip(node.name, "cordoned by someone else: left alone")], False
    return [], bool(events - node.acknowledged)


def _fault_events(observed: Observed, policy: Policy, breaker: Breaker, now: float) -> list[Action]:
    """Quarantines from this cycle's fault read alone. Nothing else is decided without the
    baseline: no release or hold-down (a fault the late read would show may be there), no
    acknowledgement, no vanished GPU, no exporter warning."""
    actions: list[Action] = []
    candidates: list[tuple[NodeView, frozenset[str]]] = []
    for name in sorted(observed.fault_gpus.keys() & observed.nodes.keys()):
        node, events = observed.nodes[name], _events(observed, name, policy)
        done, candidate = _on_events(node, events)
        actions += done
        if candidate:
            candidates.append((node, events))
    candidates.sort(key=lambda c: (_severity(c[1]), c[0].name))
    return actions + _admit(candidates, observed, policy, breaker, now)


def _everything(observed: Observed, policy: Policy, breaker: Breaker, now: float) -> list[Action]:
    actions: list[Action] = []
    candidates: list[tuple[NodeView, frozenset[str]]] = []
    for name in sorted(observed.nodes):
        node = observed.nodes[name]
        if node.opted_out:
            continue
        events = _events(observed, name, policy)
        if not observed.exporter_up.get(name, False):
            # `up` comes from the background read; a fault event in this cycle's own read
            # is from a scrape that succeeded since (a target scraped for the first time)
            done, candidate = _on_events(node, events)
            if not events:
                done = [Warn(name, "DCGM exporter is down: GPU health unknown, not acting")]
            actions += done
            if candidate:
                candidates.append((node, events))
            continue
        # a GPU the background read has not seen yet still shows its fault events
        faults = node_faults(node, observed.gpus.get(name, {}), policy) | events
        if node.record is not None:
            actions += _ours(node, faults, policy, now)
        elif node.unschedulable:
            if faults:
                actions.append(Skip(name, "cordoned by someone else: left alone"))
        elif faults - node.acknowledged:
            candidates.append((node, faults))

    candidates.sort(key=lambda c: (_severity(c[1]), c[0].name))
    actions += _admit(candidates, observed, policy, breaker, now)
    return actions


def _unmatched(observed: Observed) -> str | None:
    """Why not to act when the exporter's GPU series name no node, or are ignored
    (reading.place), while nodes whose exporter is up report no GPU: their GPUs would look
    vanished, and healthy nodes be quarantined up to the breaker's limit. None when
    nothing is amiss."""
    misplaced = [i for i in observed.ignored if i.reason != OTHER_SCRAPE]
    if not observed.unmatched and not misplaced:
        return None
    silent = [
        name
        for name, node in observed.nodes.items()
        if not node.opted_out and observed.exporter_up.get(name) and not observed.gpus.get(name)
    ]
    if not silent:
        return None  # e.g. a deleted node's series, until Prometheus lets them go
    while_silent = f"while {len(silent)} GPU nodes with a running exporter report no GPU"
    if misplaced:
        return (
            f"the exporter's GPU series are no node's ({_few([i.source for i in misplaced])}) "
            f"{while_silent}: relabel `node` from the exporter pod's node in the scrape (the "
            "chart's ServiceMonitor does); an exporter's NODE_NAME must be its pod's "
            "spec.nodeName"
        )
    return (
        f"GPU series name nodes that are no node ({_few(list(observed.unmatched))}) "
        f"{while_silent}: relabel `node` from the exporter pod's node in the scrape"
    )


def _few(items: list[str]) -> str:
    more = f" (+{len(items) - 3} more)" if len(items) > 3 else ""
    return ", ".join(items[:3]) + more


def _ours(node: NodeView, faults: frozenset[str], policy: Policy, now: float) -> list[Action]:
    record = node.record
    assert record is not None
    if not node.unschedulable:
        return [Acknowledge(node.name, record.faults | faults)]
    if faults:
        return [ClearHealthy(node.name)] if record.healthy_since is not None else []
    if record.healthy_since is None:
        return [MarkHealthy(node.name, now)]
    if now - record.healthy_since >= policy.hold_down_s:
        return [Release(node.name)]
    return []


def _admit(
    candidates: list[tuple[NodeView, frozenset[str]]],
    observed: Observed,
    policy: Policy,
    breaker: Breaker,
    now: float,
) -> list[Action]:
    if breaker.tripped:
        reason = f"circuit breaker tripped ({breaker.reason}): reset it to resume"
        return [Skip(node.name, reason) for node, _ in candidates]
    lim = policy.limits
    pool_sizes = Counter(n.pool for n in observed.nodes.values())
    fleet_max = limit(lim.fleet_max_nodes, lim.fleet_max_percent, len(observed.nodes))
    recent = [r for r in breaker.recent if now - r[0] < lim.window_s]
    out_now = Counter(n.pool for n in observed.nodes.values() if is_out(n, lim.count_cordoned))
    out: list[Action] = []
    for i, (node, faults) in enumerate(candidates):
        in_pool = sum(1 for _, _, pool in recent if pool == node.pool)
        pool_max = limit(lim.pool_max_nodes, lim.pool_max_percent, pool_sizes[node.pool])
        if in_pool + 1 > pool_max or len(recent) + 1 > fleet_max:
            scope = (
                f"pool {node.pool}: {in_pool} of {pool_max}"
                if in_pool + 1 > pool_max
                else f"fleet: {len(recent)} of {fleet_max}"
            )
            out.append(TripBreaker(f"quarantine limit reached in {scope} in the window"))
            out += [Skip(n.name, "circuit breaker tripped") for n, _ in candidates[i:]]
            break
        full = _out_limit(node.pool, out_now, pool_max, fleet_max, lim.count_cordoned)
        if full:
            out += [Skip(node.name, full), Warn(node.name, f"not quarantined: {full}")]
            continue
        # the GPUs as the fault read names them, and as the background read does
        gpus = {**observed.fault_gpus.get(node.name, {}), **observed.gpus.get(node.name, {})}
        out.append(
            Quarantine(
                node=node.name,
                faults=faults,
                gpus=tuple(sorted({f.split(":", 1)[0] for f in faults} & gpus.keys())),
                reason=_reason(faults, gpus),
                no_execute=policy.taint_no_execute,
                drain=policy.drain,
            )
        )
        recent.append((now, node.name, node.pool))
        out_now[node.pool] += 1
    return out


def is_out(node: NodeView, count_cordoned: bool) -> bool:
    """Counts against the limits on nodes out: quarantined by gridloop (until released),
    or cordoned by someone else when the policy says so."""
    return node.record is not None or (count_cordoned and node.unschedulable)


def _out_limit(
    pool: str, out_now: Counter[str], pool_max: int, fleet_max: int, count_cordoned: bool
) -> str | None:
    """Why one more node of `pool` may not go out now; None when it may."""
    what = "quarantined or cordoned" if count_cordoned else "quarantined"
    if out_now[pool] + 1 > pool_max:
        where = f"pool {pool} has {out_now[pool]} of {pool_max} nodes {what}"
        field = "limits.pool"
    elif out_now.total() + 1 > fleet_max:
        where = f"the fleet has {out_now.total()} of {fleet_max} nodes {what}"
        field = "limits.fleet"
    else:
        return None
    return f"{where} (health policy {field}): waits for a release"

"""The quota controller's pure core: ClusterQueue GPU quota follows healthy capacity.

`plan_quotas(quotas, capacity, limits, recent, held, breaker_tripped, now)`
decides; the shell patches `nominalQuota` and keeps `configured` (the quota
before gridloop touched it) in an annotation on the ClusterQueue. No I/O, no
clock, no globals. Rules, in order:

1. Unsure means do nothing: the health plan held (Prometheus down, stale or
   empty) or its circuit breaker is tripped -> one HoldQuotas and nothing else;
   quotas move neither down nor up until then.
2. An operator's manual quota (annotation) is the target, always, even above
   the configured quota; it is neither capped nor counted in the window.
3. Per flavor, the other queues share S = min(sum of their configured quotas,
   healthy GPUs less the flavor's manual quotas: the operator's queues are
   served first), split in proportion to their configured quotas by the
   largest-remainder method (ties to the queue listed first): the shares add
   up to exactly S and none is above its configured quota.
4. A flavor with no capacity entry, or whose total is 0 (no matching node
   seen, e.g. nodes not listed yet), is left alone.
5. Increases (restores) are applied in full. Decreases are taken in order of
   flavor then queue name, and the GPUs removed within the window plus this
   cycle's may not pass min(max_removed_gpus, max_removed_percent of the sum
   of all configured quotas): a decrease cut short is set to what is allowed
   (if anything) and a CapQuota says why.
6. A quota already at its target produces nothing.
7. Every `reason` is one line saying what happened.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gridloop.apportion import largest_remainder
from gridloop.health.capacity import FlavorCapacity

# the limits are policy (policies/health.yaml, validated once); re-exported for callers here
from gridloop.health.policy import QuotaLimits as QuotaLimits


@dataclass(frozen=True)
class QueueQuota:
    """One ClusterQueue's GPU quota in one flavor, as read."""

    queue: str
    flavor: str
    nominal: int  # the nominalQuota now
    configured: int  # the quota before gridloop changed it (its record); = nominal if never
    manual: int | None = None  # an operator's manual quota (annotation): wins


@dataclass(frozen=True)
class Removal:
    """GPUs of quota gridloop took away (kept in the status record for the window)."""

    at: float
    queue: str
    flavor: str
    gpus: int


@dataclass(frozen=True)
class SetQuota:
    """Patch the queue's nominalQuota for this flavor; record `configured` beside it."""

    queue: str
    flavor: str
    before: int
    after: int
    configured: int
    reason: str
    manual: bool = False  # the operator's own quota: not a removal gridloop made


@dataclass(frozen=True)
class HoldQuotas:
    """Unsure this cycle: no quota moves."""

    reason: str


@dataclass(frozen=True)
class CapQuota:
    """A decrease cut short by the window limit: quota values, not GPU counts."""

    queue: str
    flavor: str
    wanted: int  # the target quota
    allowed: int  # the quota it may go down to this cycle (= before when nothing is allowed)
    reason: str


QuotaAction = SetQuota | HoldQuotas | CapQuota


def targets(
    quotas: Sequence[QueueQuota], capacity: Mapping[str, FlavorCapacity]
) -> dict[tuple[str, str], int]:
    """(queue, flavor) -> the quota it should have; quotas left alone have no entry."""
    out = {(q.queue, q.flavor): q.manual for q in quotas if q.manual is not None}
    for flavor in dict.fromkeys(q.flavor for q in quotas):
        cap = capacity.get(flavor)
        if cap is None or cap.total == 0:
            continue
        shared = [q for q in quotas if q.flavor == flavor and q.manual is None]
        manual = sum(q.manual or 0 for q in quotas if q.flavor == flavor)
        weights = [max(0, q.configured) for q in shared]
        parts = largest_remainder(min(sum(weights), max(0, cap.healthy - manual)), weights)
        out.update(((q.queue, q.flavor), part) for q, part in zip(shared, parts, strict=True))
    return out


def removal_limit(quotas: Sequence[QueueQuota], limits: QuotaLimits) -> int:
    configured = sum(q.configured for q in quotas)
    return min(limits.max_removed_gpus, math.floor(limits.max_removed_percent * configured / 100))


def plan_quotas(
    quotas: Sequence[QueueQuota],
    capacity: Mapping[str, FlavorCapacity],
    limits: QuotaLimits,
    recent: Sequence[Removal],
    held: str | None,
    breaker_tripped: bool,
    now: float,
) -> list[QuotaAction]:
    if held is not None:
        return [HoldQuotas(held)]
    if breaker_tripped:
        return [HoldQuotas("circuit breaker tripped: quotas stay as they are until it is reset")]
    wanted = targets(quotas, capacity)
    allowed = removal_limit(quotas, limits)
    removed = sum(r.gpus for r in recent if now - r.at < limits.window_s)
    out: list[QuotaAction] = []
    for q in sorted(quotas, key=lambda q: (q.flavor, q.queue)):
        target = wanted.get((q.queue, q.flavor), q.nominal)
        if target == q.nominal:
            continue
        if q.manual is not None:
            reason = f"manual quota {q.manual} (annotation)"
            out.append(
                SetQuota(q.queue, q.flavor, q.nominal, target, q.configured, reason, manual=True)
            )
            continue
        reason = _reason(capacity[q.flavor], restored=q.nominal < target == q.configured)
        room = max(0, allowed - removed)
        if q.nominal - target <= room:  # an increase always fits: restores are never capped
            removed += max(0, q.nominal - target)
            out.append(SetQuota(q.queue, q.flavor, q.nominal, target, q.configured, reason))
            continue
        partial = q.nominal - room
        if room:
            removed += room
            out.append(SetQuota(q.queue, q.flavor, q.nominal, partial, q.configured, reason))
        why = (
            f"removal limit: {removed} of {allowed} GPUs of quota removed in the last "
            f"{limits.window_s:.0f}s; {q.nominal - target} wanted, {room} allowed"
        )
        out.append(CapQuota(q.queue, q.flavor, target, partial, why))
    return out


def _reason(cap: FlavorCapacity, restored: bool) -> str:
    healthy = f"{cap.healthy} of {cap.total} GPUs healthy"
    return f"{cap.flavor} restored: {healthy}" if restored else f"{cap.flavor}: {healthy}"


def advance(
    recent: Sequence[Removal], applied: Sequence[QuotaAction], now: float, window_s: float
) -> tuple[Removal, ...]:
    """Keep the removals inside the window and add this cycle's applied decreases.

    Manual quotas are the operator's, not gridloop's: they never count.
    """
    kept = [r for r in recent if now - r.at < window_s]
    kept += [
        Removal(now, a.queue, a.flavor, a.before - a.after)
        for a in applied
        if isinstance(a, SetQuota) and a.after < a.before and not a.manual
    ]
    return tuple(kept)

"""The health service's second controller: Kueue GPU quota follows healthy capacity.

    cycle's nodes + its done actions + GPU faults -> capacity() per ResourceFlavor
      + ClusterQueues (queues.read) -> plan_quotas() -> QuotaExecutor -> Events, metrics

It runs in the same cycle as quarantine, right after it, so a node taken out
this cycle is out of the quota this cycle too. It is off, and says so once,
while Kueue's API is not installed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kubernetes import client

from gridloop.errors import one_line
from gridloop.health.actions import Action
from gridloop.health.capacity import FlavorCapacity, bad_gpus, capacity
from gridloop.health.metrics import Metrics
from gridloop.health.observed import MANAGER, Observed
from gridloop.health.policy import Policy
from gridloop.health.queues import read
from gridloop.health.quota_acting import QuotaExecutor, QuotaOutcome
from gridloop.health.quotas import (
    CapQuota,
    HoldQuotas,
    QueueQuota,
    Removal,
    SetQuota,
    advance,
    plan_quotas,
)

Log = Callable[[str], None]


def _change(o: QuotaOutcome) -> str:
    a = o.action
    if isinstance(a, CapQuota):
        return "capped"
    assert isinstance(a, SetQuota)
    return "lowered" if a.after < a.before else "restored"


class Rebalancer:
    def __init__(
        self,
        api: client.ApiClient,
        policy: Policy,
        metrics: Metrics,
        log: Log,
        instance: str = MANAGER,
    ) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.policy, self.metrics, self.log = policy, metrics, log
        self.executor = QuotaExecutor(api, dry_run=policy.dry_run, instance=instance)
        self._said: frozenset[str] = frozenset()

    def cycle(
        self,
        observed: Observed,
        done: Sequence[Action],
        held: str | None,
        breaker_tripped: bool,
        removals: tuple[Removal, ...],
        now: float,
    ) -> tuple[Removal, ...]:
        """Plan and apply this cycle's quota changes; returns the removal window after it."""
        said: set[str] = set()
        try:
            kueue = read(self.custom)
        except Exception as err:  # the API server away: quotas stay as they are
            self._holding({"cannot read Kueue's queues"})
            self._say({f"quota: cannot read Kueue's queues: {one_line(err)}"})
            return removals
        if kueue is None:
            self._holding({"Kueue's API is not installed"})
            self._say({"quota: Kueue's API is not installed: no quota to rebalance"})
            return removals
        said |= {f"quota: {queue} left alone: {why}" for queue, why in kueue.problems.items()}
        cap = capacity(kueue.flavors, observed.nodes, done, bad_gpus(observed, self.policy))
        limits = self.policy.quota_limits
        actions = plan_quotas(kueue.quotas, cap, limits, removals, held, breaker_tripped, now)
        outcomes = self.executor.apply(actions, kueue.queues)
        applied = [o.action for o in outcomes if o.applied]
        after = advance(removals, applied, now, limits.window_s)
        holds = [a.reason for a in actions if isinstance(a, HoldQuotas)]
        said |= {f"quota: holding: {reason}" for reason in holds}
        self._holding(
            {reason.split(":")[0] for reason in holds}
            | ({"a ClusterQueue it cannot read"} if kueue.problems else set())
        )
        self._record(cap, kueue.quotas, outcomes, after)
        self._say(said)
        return after

    def _holding(self, reasons: set[str]) -> None:
        """gridloop_health_quota_holding: one series per short reason, none when all moves."""
        self.metrics.quota_held.clear()
        for reason in reasons:
            self.metrics.quota_held.labels(reason[:60]).set(1)

    def _record(
        self,
        cap: dict[str, FlavorCapacity],
        quotas: Sequence[QueueQuota],
        outcomes: list[QuotaOutcome],
        removals: tuple[Removal, ...],
    ) -> None:
        m = self.metrics
        m.flavor_gpus.clear()  # a flavor or queue deleted since must not linger
        m.quota.clear()
        for flavor, c in cap.items():
            m.flavor_gpus.labels(flavor, "total").set(c.total)
            m.flavor_gpus.labels(flavor, "healthy").set(c.healthy)
        changed = {
            (o.action.queue, o.action.flavor): o.action.after
            for o in outcomes
            if o.applied and isinstance(o.action, SetQuota)
        }
        for q in quotas:
            key = (q.queue, q.flavor)
            m.quota.labels(*key, "nominal").set(changed.get(key, q.nominal))
            m.quota.labels(*key, "configured").set(q.configured)
        m.quota_removed.set(sum(r.gpus for r in removals))
        for o in outcomes:
            outcome = "failed" if o.failed else "applied" if o.applied else "planned"
            m.quota_changes.labels(_change(o), outcome).inc()
            a = o.action
            assert isinstance(a, SetQuota | CapQuota)
            dry = " (dry-run)" if self.policy.dry_run else ""
            detail = f" ({o.detail})" if o.detail else ""
            done = f"not {_change(o)} (tried again next cycle)" if o.failed else _change(o)
            self.log(f"quota {done} {a.queue}/{a.flavor}{dry}: {a.reason}{detail}")

    def _say(self, said: set[str]) -> None:
        """Lasting conditions are logged when they start and when they end."""
        now = frozenset(said)
        for line in sorted(now - self._said):
            self.log(line)
        for line in sorted(self._said - now):
            self.log(f"resolved: {line}")
        self._said = now

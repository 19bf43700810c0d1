"""The circuit breaker's bookkeeping (pure): what a cycle's actions do to it.

plan() decides with the breaker as it was; `advance` records the cycle's
quarantines in the sliding window, trips it when plan() said so, and drops
entries older than the window. Only `reset` (an explicit human act) untrips.
"""

from __future__ import annotations

import json
from dataclasses import replace

from gridloop.health.actions import Action, Quarantine, TripBreaker
from gridloop.health.observed import Breaker, NodeView


def advance(
    breaker: Breaker, actions: list[Action], nodes: dict[str, NodeView], now: float, window_s: float
) -> Breaker:
    recent = [r for r in breaker.recent if now - r[0] < window_s]
    recent += [(now, a.node, nodes[a.node].pool) for a in actions if isinstance(a, Quarantine)]
    trips = [a for a in actions if isinstance(a, TripBreaker)]
    return replace(
        breaker,
        tripped=breaker.tripped or bool(trips),
        reason=trips[0].reason if trips and not breaker.tripped else breaker.reason,
        recent=tuple(recent),
    )


def reset(breaker: Breaker) -> Breaker:
    """Untrip, and forget the window: the operator has looked at the fleet."""
    return Breaker()


def to_json(breaker: Breaker) -> str:
    return json.dumps(
        {"tripped": breaker.tripped, "reason": breaker.reason, "recent": list(breaker.recent)},
        sort_keys=True,
    )


def from_json(text: str) -> Breaker:
    """A missing or unreadable record reads as a tripped breaker: unsure means stop."""
    try:
        data = json.loads(text)
        recent = tuple((float(t), str(n), str(p)) for t, n, p in data.get("recent", []))
        return Breaker(
            tripped=bool(data["tripped"]), reason=str(data.get("reason", "")), recent=recent
        )
    except (ValueError, KeyError, TypeError) as err:
        return Breaker(tripped=True, reason=f"breaker record unreadable ({err}): reset it")

"""When the health service counts as alive: its loop has gone round recently (pure).

`/healthz` used to answer 200 whatever the loop did, so a loop stuck on a hung call
(an API server that accepts and never answers, a lock) kept a pod that quarantined
nothing. The loop now beats at the start of each round and after each cycle; the
kubelet's liveness probe restarts the container once no beat came for `stuck_after`
seconds: ten intervals, and never less than a minute (a storm's long cycle is not a
stuck one).
"""

from __future__ import annotations

STUCK_MIN_S = 60.0
STUCK_INTERVALS = 10


def stuck_after(interval_s: float) -> float:
    return max(STUCK_MIN_S, STUCK_INTERVALS * interval_s)


def alive(last_beat: float, now: float, interval_s: float) -> bool:
    """Whether a loop that last beat at `last_beat` (monotonic seconds) is still going."""
    return now - last_beat <= stuck_after(interval_s)

"""The slow signal families, re-read from Prometheus in the background.

The families measured over windows of minutes (signals.SLOW_FAMILIES) are worth asking
once per scrape interval, and they are the expensive queries. Asked
inside a cycle, every few cycles one would take several times as long as the others,
and a fault arriving then would wait for it. So a cycle takes the latest answers and,
when they are due, starts the next read in a thread of its own.

Unsure still means do nothing: answers older than the policy's staleness limit are not
used; the cycle then reads them itself, and a failure there is a Prometheus failure
like any other.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from gridloop.health.reading import Sample, read


class Refresher:
    def __init__(self, prom: Any, queries: dict[str, str], every_s: float, stale_s: float):
        self.prom, self.queries = prom, queries
        self.every_s, self.stale_s = every_s, stale_s
        self._answers: dict[str, list[Sample]] = {}
        self._at = -float("inf")  # monotonic time of the answers
        self._lock = threading.Lock()
        self._busy = False

    def answers(self) -> dict[str, list[Sample]] | str:
        """The answers, or why Prometheus could not give them.

        Fresh enough answers come from memory (a newer read is started when one is due);
        otherwise this reads now, in the caller's thread.
        """
        with self._lock:
            answers, at, busy = self._answers, self._at, self._busy
            age = time.monotonic() - at
            if age >= self.every_s and not busy and age < self.stale_s:
                self._busy = True
                threading.Thread(target=self._refresh, name="health-slow", daemon=True).start()
        if age < self.stale_s:
            return answers
        fresh = read(self.prom, self.queries)
        if isinstance(fresh, str):
            return fresh
        self._keep(fresh, time.monotonic())
        return fresh

    def _refresh(self) -> None:
        started = time.monotonic()
        try:
            fresh = read(self.prom, self.queries)
            if not isinstance(fresh, str):  # a failure: the answers age until a cycle asks
                self._keep(fresh, started)
        finally:
            with self._lock:
                self._busy = False

    def _keep(self, answers: dict[str, list[Sample]], at: float) -> None:
        with self._lock:
            if at >= self._at:
                self._answers, self._at = answers, at

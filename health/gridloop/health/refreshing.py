"""What changes only once per scrape, re-read from Prometheus in the background.

signals.BACKGROUND_FAMILIES (the families measured over windows of minutes, the states a
GPU keeps until it is reset, which GPUs report and whether each exporter is up) are worth
asking once per scrape interval, and they are the expensive part: windows over every GPU,
and an answer naming all of them. Asked inside a cycle, they would make every cycle as
slow as they are, and a fault arriving meanwhile would wait for them. So a cycle takes the
latest answers and, when they are due, starts the next read in a thread of its own. They
are read together, at one evaluation time.

Unsure still means do nothing: answers older than the policy's staleness limit are not
used for anything but fault events (plan.py). A one-off cycle (`--once`) reads them itself
when they are stale, and a failure there is a Prometheus failure like any other. The
running service never waits for them (`background=True`): a late read (Prometheus busy or
just started, a first read over every GPU) must not hold back a cycle whose own read of
the fault events is fresh; the cycle gets the answers it has, however old, and why the
last read failed (`error`), and the next read is started.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from gridloop.health.reading import Sample, read

T = TypeVar("T")


class Refresher(Generic[T]):
    """`digest` turns one read's answers into what cycles use; it runs in the reading
    thread. `at_once`: how many of the queries Prometheus is asked side by side (one at a
    time leaves its other cores to the cycles' own reads)."""

    def __init__(
        self,
        prom: Any,
        queries: dict[str, str],
        every_s: float,
        stale_s: float,
        digest: Callable[[dict[str, list[Sample]]], T],
        at_once: int = 1,
        background: bool = False,
        on_read: Callable[[float, dict[str, float], str | None], None] | None = None,
    ):
        self.prom, self.queries, self.digest, self.at_once = prom, queries, digest, at_once
        self.every_s, self.stale_s, self.background = every_s, stale_s, background
        # told of each background read: how long it took, each query's time, its failure
        self.on_read = on_read
        self.error: str | None = None  # why the last background read failed
        self._answers: T = digest({})
        self._at = -float("inf")  # monotonic time of the answers
        self._lock = threading.Lock()
        self._busy = False
        self._took = 0.0  # how long the last read took

    def answers(self, defer: bool = False) -> T | str:
        """The answers, or why Prometheus could not give them.

        Fresh enough answers come from memory (a newer read is started when one is due);
        otherwise this reads now, in the caller's thread, unless `background`: then the
        answers in memory come back whatever their age. `defer` (a fault storm under way:
        its cycles' own reads come first) starts a new read only just in time for the answers
        not to go stale (as long before as the last read took).
        """
        with self._lock:
            answers, at, busy = self._answers, self._at, self._busy
            age = time.monotonic() - at
            # a slow Prometheus is left as long between two reads as the last one took, so
            # the service's own load on it stays flat (at most half its time), but never so
            # long that the answers go stale before the next read is back
            every = max(self.every_s, min(2 * self._took, self.stale_s - self._took))
            # deferred (a storm): started just in time to be back before the answers go stale
            due = age >= (self.stale_s - self._took if defer else every)
            if due and not busy and (age < self.stale_s or self.background):
                self._busy = True
                threading.Thread(target=self._refresh, name="health-slow", daemon=True).start()
        if age < self.stale_s or self.background:
            return answers
        fresh = self._read()
        if isinstance(fresh, str):
            return fresh
        self._keep(fresh, time.monotonic())
        return fresh

    def age_s(self) -> float:
        """How old the answers in memory are (inf before the first read)."""
        with self._lock:
            return time.monotonic() - self._at

    def _refresh(self) -> None:
        started = time.monotonic()
        took: dict[str, float] = {}
        try:
            fresh = self._read(took)
            self._took = time.monotonic() - started
            if isinstance(fresh, str):  # a failure: the answers age until a cycle asks
                self.error = fresh
            else:
                self._keep(fresh, started)
                self.error = None
            if self.on_read:
                self.on_read(self._took, took, self.error)
        finally:
            with self._lock:
                self._busy = False

    def _read(self, took: dict[str, float] | None = None) -> T | str:
        answers = read(
            self.prom, self.queries, at_once=self.at_once, timeout_s=self.stale_s, took=took
        )
        return answers if isinstance(answers, str) else self.digest(answers)

    def _keep(self, answers: T, at: float) -> None:
        with self._lock:
            if at >= self._at:
                self._answers, self._at = answers, at

"""What changes only once per scrape, re-read from Prometheus in the background.

signals.BACKGROUND_FAMILIES (the families measured over windows of minutes, the states a
GPU keeps until it is reset, which GPUs report and whether each exporter is up) are worth
asking once per scrape interval, and they are the expensive part: windows over every GPU,
and an answer naming all of them. Asked inside a cycle, they would make every cycle as
slow as they are, and a fault arriving meanwhile would wait for them. So a cycle takes the
latest answers and, when they are due, starts the next read in a thread of its own. They
are read together, at one evaluation time.

Unsure still means do nothing: answers older than the policy's staleness limit are not
used; the cycle then reads them itself, and a failure there is a Prometheus failure
like any other.
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
    ):
        self.prom, self.queries, self.digest, self.at_once = prom, queries, digest, at_once
        self.every_s, self.stale_s = every_s, stale_s
        self._answers: T = digest({})
        self._at = -float("inf")  # monotonic time of the answers
        self._lock = threading.Lock()
        self._busy = False

    def answers(self) -> T | str:
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
        fresh = self._read()
        if isinstance(fresh, str):
            return fresh
        self._keep(fresh, time.monotonic())
        return fresh

    def _refresh(self) -> None:
        started = time.monotonic()
        try:
            fresh = self._read()
            if not isinstance(fresh, str):  # a failure: the answers age until a cycle asks
                self._keep(fresh, started)
        finally:
            with self._lock:
                self._busy = False

    def _read(self) -> T | str:
        answers = read(self.prom, self.queries, at_once=self.at_once)
        return answers if isinstance(answers, str) else self.digest(answers)

    def _keep(self, answers: T, at: float) -> None:
        with self._lock:
            if at >= self._at:
                self._answers, self._at = answers, at

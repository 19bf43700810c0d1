"""Between two cycles: does a fault read show what the last cycle did not see? (pure)

A cycle every `--interval` (5 s as the chart ships) keeps the API server and the status
ConfigMap quiet, but a fault that waited for the next cycle would wait up to an interval.
So between cycles the service reads the fault events alone (the light read: the fault
families of signals.py, answers filtered to non-zero, small) every `--fault-read-interval`
(1 s as shipped), and a read that shows an event the last cycle did not see starts the next
cycle at once, on that read. A read that shows nothing new costs that read and nothing
else: no plan, no API call. The heavy families keep their own pace (refreshing.py).
"""

from __future__ import annotations

from gridloop.health.reading import Sample
from gridloop.health.signals import EVENTS_AND_DOWN, FRESHNESS

Event = tuple[str, tuple[tuple[str, str], ...], str]  # family, labels, value ("" if none)


def events(answer: dict[str, list[Sample]]) -> frozenset[Event]:
    """What a fault read says is happening: each fault series, by family and labels, with
    the XID code (a new code on a GPU already failing is news). Values that drift while
    nothing new happens (an ECC increase as its window slides, the freshness timestamp)
    are not part of it."""
    out: set[Event] = set()
    for family, samples in answer.items():
        if family == FRESHNESS:
            continue
        for sample in samples:
            labels = tuple(sorted((sample.get("metric") or {}).items()))
            value = str((sample.get("value") or ["", ""])[1]) if family == EVENTS_AND_DOWN else ""
            out.add((family, labels, value))
    return frozenset(out)


def news(seen: frozenset[Event], answer: dict[str, list[Sample]]) -> bool:
    """Whether `answer` holds an event that `seen` (the last cycle's read) did not."""
    return not events(answer) <= seen

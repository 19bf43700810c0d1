"""The background read: a cycle of the running service never waits for it."""

from __future__ import annotations

import threading
import time

from gridloop.health.refreshing import Refresher


class SlowPrometheus:
    """Answers each query once `release` is set (a busy, or just started, Prometheus)."""

    def __init__(self, fail: bool = False) -> None:
        self.release = threading.Event()
        self.asked = 0
        self.fail = fail
        self.times: list[float] = []  # when each query was asked (monotonic)

    def custom_query(self, query: str, params: dict, timeout: float | None = None) -> list:
        self.asked += 1
        self.times.append(time.monotonic())
        self.release.wait(10)
        if self.fail:
            raise ConnectionError("Prometheus went away")
        return [{"metric": {"q": query}, "value": [0, "1"]}]


def count(answers: dict) -> int:
    return sum(len(v) for v in answers.values())


def refresher(prom: SlowPrometheus, background: bool) -> Refresher[int]:
    return Refresher(prom, {"up": "up", "present": "p"}, 15, 30, count, background=background)


def test_the_running_service_gets_what_it_has_at_once_while_the_first_read_is_slow():
    prom = SlowPrometheus()
    slow = refresher(prom, background=True)

    started = time.monotonic()
    first = slow.answers()

    assert first == 0  # nothing yet: plan() sees no baseline and acts on fault events only
    assert time.monotonic() - started < 1
    prom.release.set()
    deadline = time.monotonic() + 5
    while slow.answers() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert slow.answers() == 2 and slow.error is None


def test_one_cycle_on_its_own_reads_stale_answers_itself():
    prom = SlowPrometheus()
    prom.release.set()
    once = refresher(prom, background=False)

    assert once.answers() == 2  # read in the caller's thread
    assert prom.asked == 2


def test_a_failed_background_read_says_why_and_the_answers_stay_as_they_were():
    prom = SlowPrometheus(fail=True)
    prom.release.set()
    slow = refresher(prom, background=True)

    slow.answers()
    deadline = time.monotonic() + 5
    while slow.error is None and time.monotonic() < deadline:
        time.sleep(0.01)

    assert slow.error is not None and "Prometheus went away" in slow.error
    assert slow.answers() == 0


def test_only_one_background_read_at_a_time():
    prom = SlowPrometheus()
    slow = refresher(prom, background=True)

    for _ in range(5):
        slow.answers()
    time.sleep(0.1)

    assert prom.asked == 1  # the first query of the one read under way (one at a time)
    prom.release.set()


def test_in_a_storm_a_new_read_starts_only_just_in_time_before_the_answers_go_stale():
    prom = SlowPrometheus()
    slow = Refresher(prom, {"up": "up"}, 0.05, 0.5, count, background=True)
    slow.answers()
    time.sleep(0.1)  # the first read takes 0.1 s
    prom.release.set()
    deadline = time.monotonic() + 5
    while len(prom.times) < 2 and time.monotonic() < deadline:
        slow.answers(defer=True)
        time.sleep(0.01)

    first, second = prom.times[:2]
    # not every 0.05 s, not once stale (0.5 s), but 0.5 - 0.1 s after the first began
    assert 0.38 <= second - first < 0.5


def test_a_slow_read_is_followed_by_a_pause_as_long_so_the_load_stays_flat():
    prom = SlowPrometheus()
    slow = Refresher(prom, {"up": "up"}, 0.01, 10, count, background=True)
    slow.answers()
    time.sleep(0.2)  # the read takes 0.2 s
    prom.release.set()
    deadline = time.monotonic() + 5
    while slow.answers() == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    asked = prom.asked

    time.sleep(0.1)  # due by the interval (0.01 s), but within twice the last read
    slow.answers()
    assert prom.asked == asked

    time.sleep(0.35)
    slow.answers()
    deadline = time.monotonic() + 5
    while prom.asked == asked and time.monotonic() < deadline:
        time.sleep(0.01)
    assert prom.asked == asked + 1


def test_the_pause_never_lets_the_answers_go_stale_before_the_next_read_is_back():
    prom = SlowPrometheus()
    slow = Refresher(prom, {"up": "up"}, 0.01, 0.6, count, background=True)
    slow.answers()
    time.sleep(0.3)  # the read takes 0.3 s: twice that is 0.6 s, when the answers go stale
    prom.release.set()
    deadline = time.monotonic() + 5
    while len(prom.times) < 2 and time.monotonic() < deadline:
        slow.answers()
        time.sleep(0.01)

    first, second = prom.times[:2]
    assert 0.3 <= second - first < 0.55  # from 0.6 - 0.3 on, not at 0.6

"""The health service reads the fault events at most once per interval, storm or not."""

from __future__ import annotations

import math

from gridloop.health.service import read_delay


def test_a_read_due_starts_at_once():
    assert read_delay(last_started=10.0, now=11.5, gap_s=1.0) == 0.0
    assert read_delay(last_started=-math.inf, now=0.0, gap_s=1.0) == 0.0  # the first read


def test_a_read_that_would_come_too_soon_waits_for_the_rest_of_the_interval():
    assert read_delay(last_started=10.0, now=10.25, gap_s=1.0) == 0.75


def test_no_gap_means_no_pacing():
    assert read_delay(last_started=10.0, now=10.0, gap_s=0.0) == 0.0

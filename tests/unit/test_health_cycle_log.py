"""`gridloop health run --log-cycles`: one line per cycle says where its time went."""

from __future__ import annotations

from collections import Counter

from gridloop.health.reading import slowest
from gridloop.health.service import _baseline_line, _cycle_line


def test_a_cycle_line_names_its_phases_the_baselines_age_and_what_it_did():
    line = _cycle_line(
        0.31,
        0.02,
        0.44,
        0.80,
        Counter({"Quarantine": 12, "Warn": 3}),
        12,
        7.25,
        "prefetched",
        8.0,
        None,
    )
    assert line == (
        "cycle 0.80s: read 0.31s (prefetched) plan 0.02s act 0.44s; baseline 7.2s old, "
        "newest sample 8.0s old; planned Quarantine=12, applied 12"
    )


def test_a_held_cycle_says_why_and_a_missing_baseline_says_so():
    line = _cycle_line(
        2.5, 0.0, 0.0, 2.5, Counter({"Hold": 1}), 0, float("inf"), "", None, "no samples"
    )
    assert line.endswith(
        "no baseline yet, newest sample none; planned Hold=1, applied 0; held: no samples"
    )


def test_a_slow_read_names_its_slowest_query_and_a_dropped_prefetch():
    took = {"xid": 4.9, "fresh": 0.02, "ecc_dbe": 3.1}
    line = _cycle_line(
        5.01, 0.0, 0.45, 5.5, Counter({"Quarantine": 43}), 43, 20.1,
        "prefetch too old, read again", 20.6, None, slowest(took),
    )  # fmt: skip
    assert line.startswith(
        "cycle 5.50s: read 5.01s (prefetch too old, read again) (slowest: xid 4.90s) plan"
    )


def test_a_background_read_says_how_long_it_took_and_why_it_failed():
    assert _baseline_line(3.214, {"presence": 1.2, "thermal": 0.4}, None) == (
        "background read 3.21s (slowest: presence 1.20s): done"
    )
    assert _baseline_line(30.0, {}, "query 'presence' failed: timeout") == (
        "background read 30.00s (slowest: none): failed: query 'presence' failed: timeout"
    )

"""`gridloop health run --log-cycles`: one line per cycle says where its time went."""

from __future__ import annotations

from collections import Counter

from gridloop.health.service import _cycle_line


def test_a_cycle_line_names_its_phases_the_baselines_age_and_what_it_did():
    line = _cycle_line(
        0.31, 0.02, 0.44, 0.80, Counter({"Quarantine": 12, "Warn": 3}), 12, 7.25, True, 8.0, None
    )
    assert line == (
        "cycle 0.80s: read 0.31s (prefetched) plan 0.02s act 0.44s; baseline 7.2s old, "
        "newest sample 8.0s old; planned Quarantine=12, applied 12"
    )


def test_a_held_cycle_says_why_and_a_missing_baseline_says_so():
    line = _cycle_line(
        2.5, 0.0, 0.0, 2.5, Counter({"Hold": 1}), 0, float("inf"), False, None, "no samples"
    )
    assert line.endswith(
        "no baseline yet, newest sample none; planned Hold=1, applied 0; held: no samples"
    )

"""The largest-remainder split (gridloop.apportion): healthy GPUs over queues in the
health service, nodes over pools in the fleet generator."""

from __future__ import annotations

import pytest

from gridloop.apportion import largest_remainder as split


@pytest.mark.parametrize(
    ("total", "weights", "parts"),
    [
        pytest.param(48, [32, 32], [24, 24], id="two-teams-48-of-64"),
        pytest.param(10, [3, 1], [8, 2], id="3-to-1-tie-goes-to-the-first"),
        pytest.param(7, [3, 1], [5, 2], id="3-to-1-larger-remainder-wins"),
        pytest.param(1, [1, 1], [1, 0], id="tie-to-first-listed"),
        pytest.param(5, [2, 3, 5], [1, 2, 2], id="three-way-remainders"),
        pytest.param(0, [32, 32], [0, 0], id="nothing-healthy"),
        pytest.param(64, [32, 32], [32, 32], id="everything-healthy"),
        pytest.param(4, [0, 8], [0, 4], id="a-zero-quota-gets-nothing"),
        pytest.param(0, [0, 0], [0, 0], id="all-zero"),
    ],
)
def test_split_by_largest_remainder(total, weights, parts):
    assert split(total, weights) == parts


@pytest.mark.parametrize("total", range(0, 41))
def test_split_adds_up_and_never_exceeds_a_weight(total):
    weights = [17, 13, 7, 3]
    parts = split(total, weights)
    assert sum(parts) == total
    assert all(0 <= p <= w for p, w in zip(parts, weights, strict=True))

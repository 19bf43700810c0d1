"""Whole units shared out in proportion to weights: the one split the fleet generator (nodes
over pools) and the health service (healthy GPUs over queues) both make. Pure and stdlib
only: the health service's image reads it too."""

from __future__ import annotations

from collections.abc import Sequence


def largest_remainder(total: int, weights: Sequence[int]) -> list[int]:
    """`total` split in proportion to `weights` by largest remainder (Hamilton).

    Everyone gets the floor of their share and the leftover units go to the largest
    fractional parts, ties to the earliest weight, so the result is deterministic. The
    parts add up to `total` when any weight is positive (all zero: every part is 0); with
    total <= sum(weights) no part exceeds its weight.
    """
    whole = sum(weights)
    if whole <= 0:
        return [0] * len(weights)
    parts = [total * w // whole for w in weights]
    rests = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % whole), i))
    for i in rests[: total - sum(parts)]:
        parts[i] += 1
    return parts

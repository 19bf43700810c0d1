"""Durations as people write them in the health policy ("500ms", "15s", "10m", "1h").

One number and one unit, nothing else: a bare "5" could mean seconds or minutes, and
"-5s" or "0s" would switch a safety window off, so all of them are refused. Pure text
in, seconds out; the caller decides how to report a bad value.
"""

from __future__ import annotations

import math
import re

# Largest first: format_duration picks the largest unit that divides evenly.
UNITS: dict[str, float] = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}

_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Seconds in a positive duration such as '500ms', '1.5m' or '1h'; ValueError otherwise."""
    match = _DURATION.fullmatch(text)
    if match is None:
        raise ValueError(f"not a duration: {text!r}")
    seconds = float(match.group(1)) * UNITS[match.group(2)]
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"not a positive duration: {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest way to write ``seconds`` for ``parse_duration`` (exact for whole units)."""
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"not a positive duration: {seconds!r}")
    for suffix, size in UNITS.items():
        count = seconds / size
        if count >= 1 and count == int(count):
            return f"{int(count)}{suffix}"
    # Below a millisecond or not a whole number of them: fractional milliseconds.
    return f"{seconds * 1000:.6f}".rstrip("0").rstrip(".") + "ms"

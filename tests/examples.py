"""The files under examples/ that users are told to run, found by their path there.

Tests name each example through `example("dir/file")`, so tests/unit/test_examples.py
can list which tests use which example, and fail for an example no test uses."""

from __future__ import annotations

from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def example(path: str) -> Path:
    """examples/<path>, which must exist."""
    found = EXAMPLES / path
    assert found.is_file(), f"no such example: examples/{path}"
    return found

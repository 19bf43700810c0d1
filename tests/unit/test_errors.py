"""Errors a person sees are one line, with an exit code that says whose fault it is."""

from __future__ import annotations

import pytest

from gridloop.errors import BuildError, ClusterError, GridloopError, UsageError


@pytest.mark.parametrize(
    ("message", "shown"),
    [
        ("port 36443 is busy", "port 36443 is busy"),
        (
            "build failed:\n  go: missing module\n\tsee build.log\n",
            "build failed: go: missing module see build.log",
        ),
        ("  padded   with\r\nspaces  ", "padded with spaces"),
    ],
    ids=["one-line", "multi-line", "stray-whitespace"],
)
def test_message_is_folded_into_one_line(message: str, shown: str) -> None:
    assert str(GridloopError(message)) == shown


@pytest.mark.parametrize("error", [GridloopError, UsageError, BuildError, ClusterError])
def test_every_error_keeps_one_line(error: type[GridloopError]) -> None:
    assert "\n" not in str(error("first\nsecond"))


@pytest.mark.parametrize(
    ("error", "exit_code"),
    [(GridloopError, 1), (UsageError, 2), (BuildError, 1), (ClusterError, 1)],
)
def test_exit_code_says_whose_fault_it_is(error: type[GridloopError], exit_code: int) -> None:
    assert error("x").exit_code == exit_code


@pytest.mark.parametrize("error", [UsageError, BuildError, ClusterError])
def test_every_user_facing_error_is_a_gridloop_error(error: type[GridloopError]) -> None:
    with pytest.raises(GridloopError):
        raise error("x")

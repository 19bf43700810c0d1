"""The errors gridloop shows to a person.

Every failure a user can cause or fix (bad input, a busy port, a missing
toolchain, a failed build) is a `GridloopError`: its message is one line that
names the thing at fault, and the CLI prints it as `error: <message>` with a
non-zero exit code and no traceback. Anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations


class GridloopError(Exception):
    """A failure the user can act on; `str()` is one line naming what is wrong."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        # One line, always: multi-line upstream errors are folded here once.
        super().__init__(" ".join(message.split()))


class UsageError(GridloopError):
    """Bad flags, bad files, bad values: nothing was changed."""

    exit_code = 2


class BuildError(GridloopError):
    """Building an upstream component failed; the message names it and its log."""


class Unfetchable(BuildError):
    """An upstream component could not be downloaded (no route to where it is published).
    `reason` is the short form: what could not be fetched, and why."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class ClusterError(GridloopError):
    """The local cluster could not be started, reached or stopped."""


def one_line(err: BaseException, limit: int = 300) -> str:
    """Any exception as one line of at most `limit` characters, for logs and outcomes."""
    return " ".join(str(err).split())[:limit] or type(err).__name__

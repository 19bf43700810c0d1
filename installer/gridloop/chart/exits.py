"""The exit codes of gridloop's cluster commands, and the errors that carry them.

0 and the codes of gridloop.errors (1: a tool or the cluster failed, 2: bad input,
nothing changed) hold for every command; the installer adds three, each meaning
"nothing more was done" so a script can tell them apart.
"""

from __future__ import annotations

from gridloop.errors import GridloopError


class ChecksFailed(GridloopError):
    """doctor found a failing check (install stops there, before changing anything)."""

    exit_code = 3


class NotReady(GridloopError):
    """--wait timed out; the message names every workload that is not ready."""

    exit_code = 4


class Refused(GridloopError):
    """A safety refusal: --purge not confirmed, or custom resources still exist."""

    exit_code = 5


CODES = (
    (0, "success (doctor: no check failed; warnings allowed)"),
    (1, "error: a tool or the cluster failed, or the cluster cannot be reached"),
    (2, "bad input (flags, values, files): nothing was changed"),
    (ChecksFailed.exit_code, "doctor found a failing check: nothing was changed"),
    (NotReady.exit_code, "--wait timed out: the message names what is not ready"),
    (Refused.exit_code, "refused for safety (--purge): nothing was deleted"),
    (130, "interrupted"),
)

EPILOG = "exit codes:\n" + "\n".join(f"  {code:<4} {meaning}" for code, meaning in CODES)

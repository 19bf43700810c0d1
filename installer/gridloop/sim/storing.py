"""Reading and writing the faults file the command line and the exporter server share.

The file is replaced atomically (write a temporary file beside it, then ``os.replace``), so
the server, which re-reads it whenever it changes, never sees half a file. Writers take an
exclusive lock on a sibling ``.lock`` file for the whole read-change-write, so two
``gridloop sim inject`` run at once both land.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from gridloop.errors import UsageError
from gridloop.sim.faults import FaultSet

FAULTS_FILE = Path("sim") / "faults.json"  # under the local cluster's state directory
FLEET_FILE = Path("fleet.yaml")


def read_faults(path: Path) -> FaultSet:
    """The faults in ``path``; none when the file does not exist yet."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return FaultSet()
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"{path}: cannot read faults file: {err}") from err
    return FaultSet.from_json(text, source=str(path))


def write_faults(path: Path, faults: FaultSet) -> None:
    """Replace ``path`` with ``faults`` in one step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(faults.to_json() + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def update_faults(path: Path, change: Callable[[FaultSet], FaultSet]) -> tuple[FaultSet, FaultSet]:
    """Apply ``change`` to the file's faults under the lock; returns (before, after).

    Nothing is written when ``change`` raises or changes nothing.
    """
    with _locked(path):
        before = read_faults(path)
        after = change(before)
        if after != before:
            write_faults(path, after)
        return before, after

"""The cgroups a container node runs in: how `down` finds, by pid, everything it started.

containerd starts in `<hierarchy>/gridloop/<node>/runtime`, so its shims (and gVisor's
sandboxes they start) inherit that cgroup; the kubelet puts every pod below
`<hierarchy>/gridloop/<node>/kubepods`. A process in a node's cgroup is the node's, by
the kernel's word, even after containerd or the kubelet is gone: that is what `down`
signals, and nothing else. cgroup v1 only (this machine's); each hierarchy mounted
under /sys/fs/cgroup gets the same path, as the kubelet's cgroupfs driver expects.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")
TRACKING = "pids"  # the hierarchy `down` reads pids from (every process is in each one)


def hierarchies(root: Path = CGROUP_FS) -> list[Path]:
    """The mounted v1 hierarchies (cpu, memory, pids, ..., and named ones like systemd)."""
    if not root.is_dir():
        return []
    return sorted(
        p
        for p in root.iterdir()
        if p.is_dir() and not p.is_symlink() and (p / "cgroup.procs").exists()
    )


def _cgroup_dir(hierarchy: Path, path: str) -> Path:
    return hierarchy / path.strip("/")


def ensure(path: str, root: Path = CGROUP_FS) -> None:
    """Create `path` in every hierarchy; a cpuset cgroup gets its parent's cpus and mems
    (a new cpuset is empty, and a process cannot join an empty one)."""
    for hierarchy in hierarchies(root):
        target = _cgroup_dir(hierarchy, path)
        parts = target.relative_to(hierarchy).parts
        for depth in range(1, len(parts) + 1):
            folder = hierarchy.joinpath(*parts[:depth])
            if not folder.is_dir():
                folder.mkdir()
            for knob in ("cpuset.cpus", "cpuset.mems"):
                mine = folder / knob
                if mine.exists() and not mine.read_text().strip():
                    mine.write_text((folder.parent / knob).read_text())


def join(path: str, pid: int, root: Path = CGROUP_FS) -> None:
    """Move `pid` into `path` in every hierarchy (call `ensure` first)."""
    for hierarchy in hierarchies(root):
        (_cgroup_dir(hierarchy, path) / "cgroup.procs").write_text(str(pid))


def _walk(folder: Path) -> Iterator[Path]:
    """`folder` and every cgroup below it, deepest first."""
    if not folder.is_dir():
        return
    for child in sorted(p for p in folder.iterdir() if p.is_dir()):
        yield from _walk(child)
    yield folder


def pids(path: str, root: Path = CGROUP_FS) -> set[int]:
    """Every process in `path` or below it, in the tracking hierarchy."""
    found: set[int] = set()
    for folder in _walk(_cgroup_dir(root / TRACKING, path)):
        with contextlib.suppress(OSError):
            found |= {int(x) for x in (folder / "cgroup.procs").read_text().split()}
    return found


def kill_all(path: str, timeout: float = 10.0, root: Path = CGROUP_FS) -> int:
    """SIGKILL every process in `path` until none is left (a child forked between a read
    and the kill is found by the next read); return how many were killed."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while (left := pids(path, root)) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed |= left
        time.sleep(0.05)
    return len(killed)


def remove(path: str, root: Path = CGROUP_FS) -> list[str]:
    """Remove `path` and its children in every hierarchy; return what could not be."""
    stuck: list[str] = []
    for hierarchy in hierarchies(root):
        for folder in _walk(_cgroup_dir(hierarchy, path)):
            try:
                folder.rmdir()
            except OSError as err:
                stuck.append(f"{folder} ({err.strerror})")
    return stuck

"""Start, find and stop the control-plane processes, by pid, on loopback.

A process is ours only if its pid is alive *and* the kernel's start time of
that pid is the one recorded when we launched it: a recycled pid is never
signalled. (The command line is no proof: right after `exec` the kernel may
not have filled in the new `/proc/PID/cmdline` yet, so a freshly started
kube-apiserver can look nameless for a moment.)
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gridloop.errors import ClusterError, UsageError
from gridloop.local.ports import LOOPBACK


@dataclass(frozen=True)
class Proc:
    name: str
    pid: int
    argv: tuple[str, ...]
    log: str
    # field 22 of /proc/PID/stat: clock ticks after boot when the pid was created
    start_ticks: int = 0


def start(
    name: str,
    argv: list[str],
    log: Path,
    cwd: Path,
    env: dict[str, str] | None = None,
    before_exec: Callable[[], None] | None = None,
) -> Proc:
    """Start `argv` in its own session; `env` is added to this process's environment;
    `before_exec` runs in the child before it becomes `argv` (to join a cgroup, so that
    whatever the program starts is found by its cgroup too)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        child = subprocess.Popen(
            argv,
            env={**os.environ, **env} if env else None,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            start_new_session=True,  # survives the CLI; stopped by `down`
            preexec_fn=before_exec,
        )
    stat = _stat(child.pid)
    ticks = int(stat[19]) if stat else 0
    return Proc(name=name, pid=child.pid, argv=tuple(argv), log=str(log), start_ticks=ticks)


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat fields after the command name (state first), or [] if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    except OSError:
        return []
    return raw.rsplit(")", 1)[-1].split()


def _reap(pid: int) -> None:
    # our own children (started in this process) must be reaped to disappear
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def alive(proc: Proc) -> bool:
    """Running, not exited (a zombie has exited), and the very process we started."""
    _reap(proc.pid)
    stat = _stat(proc.pid)
    if not stat or stat[0] in ("Z", "X"):
        return False
    return int(stat[19]) == proc.start_ticks


STOP_GRACE_S = 15.0  # SIGTERM to SIGKILL


def stop(proc: Proc, timeout: float = STOP_GRACE_S) -> None:
    """SIGTERM, wait, then SIGKILL: returns once the process is gone."""
    if not alive(proc):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(proc):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    while alive(proc):
        time.sleep(0.05)


def wait_healthy(proc: Proc, ready: Callable[[], bool], timeout: float) -> None:
    """Return once `ready()`; a ClusterError if `proc` exits first or `timeout` passes."""
    t0 = time.monotonic()
    while not ready():
        if not alive(proc):
            raise exited_error(proc, "start-up")
        if time.monotonic() - t0 > timeout:
            raise ClusterError(
                f"{proc.name} did not become healthy within {timeout:.0f}s (log: {proc.log})"
            )
        time.sleep(0.1)


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # as Go's listeners do: connections in TIME_WAIT do not make a port busy
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError as err:
            if err.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def check_ports_free(ports: dict[str, int]) -> None:
    for owner, port in ports.items():
        if port_in_use(port):
            raise UsageError(
                f"port {port} on {LOOPBACK} (for {owner}) is already in use: "
                "stop what holds it or choose other ports with --base-port"
            )


def listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((LOOPBACK, port)) == 0


def last_log_line(proc: Proc) -> str:
    try:
        lines = Path(proc.log).read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def exited_error(proc: Proc, during: str) -> ClusterError:
    last = last_log_line(proc) or "no output"
    return ClusterError(f"{proc.name} exited during {during}: {last} (log: {proc.log})")

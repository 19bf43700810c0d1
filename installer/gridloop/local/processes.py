"""Start, find and stop the control-plane processes, by pid, on loopback.

A process is ours only if its pid is alive *and* its command line still starts
with the binary we launched: a recycled pid is never signalled.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from gridloop.errors import ClusterError, UsageError
from gridloop.local.flags import LOOPBACK


@dataclass(frozen=True)
class Proc:
    name: str
    pid: int
    argv: tuple[str, ...]
    log: str


def start(name: str, argv: list[str], log: Path, cwd: Path) -> Proc:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        child = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            start_new_session=True,  # survives the CLI; stopped by `down`
        )
    return Proc(name=name, pid=child.pid, argv=tuple(argv), log=str(log))


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _reap(pid: int) -> None:
    # our own children (started in this process) must be reaped to disappear
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def alive(proc: Proc) -> bool:
    _reap(proc.pid)
    cmd = _cmdline(proc.pid)
    if not cmd or cmd[0] != proc.argv[0]:
        return False
    stat = Path(f"/proc/{proc.pid}/stat").read_text(errors="replace")
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def stop(proc: Proc, timeout: float = 15.0) -> None:
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

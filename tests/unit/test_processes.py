"""Processes are found and stopped by pid and start time, never by a recycled pid."""

from __future__ import annotations

import dataclasses
import shutil
import socket
import time

from gridloop.local import cluster, processes
from gridloop.local.ports import Ports
from gridloop.local.state import State


def _sleeper(tmp_path, name: str = "sleeper") -> processes.Proc:
    sleep = shutil.which("sleep")
    assert sleep
    return processes.start(name, [sleep, "60"], tmp_path / f"{name}.log", tmp_path)


def test_a_started_process_is_alive_at_once_and_gone_after_stop(tmp_path):
    proc = _sleeper(tmp_path)
    assert processes.alive(proc)

    processes.stop(proc)

    assert not processes.alive(proc)


def test_a_process_that_ignores_sigterm_is_killed_when_its_grace_runs_out(tmp_path):
    shell = shutil.which("sh")
    assert shell
    argv = [shell, "-c", "trap '' TERM; echo trapped; while :; do sleep 0.1; done"]
    proc = processes.start("stubborn", argv, tmp_path / "stubborn.log", tmp_path)
    deadline = time.monotonic() + 10
    while "trapped" not in (tmp_path / "stubborn.log").read_text():
        assert time.monotonic() < deadline, "the shell never set its trap"
        time.sleep(0.05)

    processes.stop(proc, timeout=0.5)

    assert not processes.alive(proc)


def test_down_gives_kube_apiserver_a_short_grace_and_every_other_process_the_default(
    tmp_path, monkeypatch
):
    """kube-apiserver v1.35 stops listening on SIGTERM but did not exit in 15 s."""
    names = ("etcd", "kube-apiserver", "kube-controller-manager")
    procs = [processes.Proc(n, 1000 + i, (n,), str(tmp_path / n), 1) for i, n in enumerate(names)]
    state = State(tmp_path / "gone", 27400, Ports.from_base(27400), procs)
    given: dict[str, float] = {}
    monkeypatch.setattr(processes, "alive", lambda proc: True)
    monkeypatch.setattr(processes, "stop", lambda proc, timeout: given.update({proc.name: timeout}))

    assert cluster._stop_processes(state) == list(reversed(names))

    assert given == {
        "kube-controller-manager": processes.STOP_GRACE_S,
        "kube-apiserver": 2.0,
        "etcd": processes.STOP_GRACE_S,
    }


def test_a_pid_with_another_start_time_is_not_ours_and_is_never_signalled(tmp_path):
    proc = _sleeper(tmp_path)
    impostor = dataclasses.replace(proc, start_ticks=proc.start_ticks + 1)
    try:
        assert not processes.alive(impostor)
        processes.stop(impostor)  # must not signal the real process
        assert processes.alive(proc)
    finally:
        processes.stop(proc)


def test_a_listening_port_is_in_use_and_a_closed_one_is_not():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert processes.port_in_use(port)
        assert processes.listening(port)
    assert not processes.port_in_use(port)

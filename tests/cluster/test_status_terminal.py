"""`gridloop status` in a real terminal: the installed command started in tmux (Debian's
tmux, on this machine) against the local cluster, driven by keystrokes, read off the screen."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

# the control plane, kwok and the GPU-health processes: no container node needed
pytestmark = [pytest.mark.cluster, pytest.mark.kwok_cluster]

GRIDLOOP = str(Path(sys.executable).parent / "gridloop")  # the installed console script


class Terminal:
    def __init__(self, command: list[str], width: int = 200, height: int = 50) -> None:
        tmux = shutil.which("tmux")
        assert tmux, "tmux is needed for this test (Debian package tmux)"
        self.tmux = [tmux, "-L", f"gridloop-{uuid.uuid4().hex[:8]}", "-f", "/dev/null"]
        self.run("new-session", "-d", "-s", "t", "-x", str(width), "-y", str(height),
                 "-e", "TERM=xterm-256color", *command)  # fmt: skip
        self.run("set-option", "-t", "t", "remain-on-exit", "on")

    def run(self, *args: str) -> str:
        return subprocess.run(
            [*self.tmux, *args], capture_output=True, text=True, check=True, timeout=30
        ).stdout

    def screen(self) -> str:
        return self.run("capture-pane", "-t", "t", "-p")

    def keys(self, *keys: str) -> None:
        for key in keys:
            self.run("send-keys", "-t", "t", key)
            time.sleep(0.1)

    def wait_for(self, text: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.2)
        pytest.fail(f"{text!r} not on the screen within {timeout:.0f}s:\n{self.screen()}")

    def wait_for_gone(self, text: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text not in self.screen():
                return
            time.sleep(0.2)
        pytest.fail(f"{text!r} still on the screen after {timeout:.0f}s:\n{self.screen()}")

    def exited(self) -> bool:
        return self.run("list-panes", "-t", "t", "-F", "#{pane_dead}").strip() == "1"

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True, check=False)


def test_status_runs_in_a_terminal_filters_switches_views_and_quits(local_cluster):
    term = Terminal([GRIDLOOP, "status", "--kubeconfig", str(local_cluster.kubeconfig)])
    try:
        screen = term.wait_for("24 GPU nodes")
        assert "view fleet" in screen and "us-east-h100-000" in screen
        assert "onprem-fra-a100-007" in screen

        term.keys("/", "onprem", "Enter")
        screen = term.wait_for("filter /onprem")
        assert "onprem-fra-a100-000" in screen and "us-east-h100-000" not in screen

        # the prompt takes keys once it has the focus, which the app gives it a moment after
        # `:`; typed sooner they go to the table (the likely cause of the one failure seen,
        # `view events` never shown, on a loaded cold run): wait for the prompt
        term.keys(":")
        term.wait_for("view: fleet, queues, inference, sandboxes, events")
        term.keys("ev", "Enter")
        term.wait_for("view events")

        term.keys("?")
        term.wait_for("gridloop status — keys")
        # `?` closes the help again (an Esc followed at once by `q` reads as Alt+q)
        term.keys("?")
        term.wait_for_gone("gridloop status — keys")
        term.keys("q")
        deadline = time.monotonic() + 10
        while not term.exited() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert term.exited(), term.screen()
    finally:
        term.close()

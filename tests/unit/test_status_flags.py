"""`gridloop status` refuses bad flags with one line naming the flag, before it reads anything
(the kubeconfig named here points at a server nothing listens on: a read would fail
differently)."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

GRIDLOOP = str(Path(sys.executable).parent / "gridloop")

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--interval", "0"], "error: --interval 0: between 0.2 and 3600 seconds"),
        (["--once", "--allow-actions"], "error: --allow-actions: only for the live UI"),
        (["--screenshot", "shot.png"], "error: --screenshot shot.png: must end in .svg"),
        (["--screenshot", "/nope/shot.svg"], "error: --screenshot /nope/shot.svg: no such folder"),
        (["--prometheus-url", "ftp://x"], "error: --prometheus-url ftp://x: not an http://"),
        (
            ["--context", "nope", "--once"],
            "error: --context nope: not in the kubeconfig (contexts: x)",
        ),
        ([], "error: stdout is not a terminal: use --once (and --output json)"),
        (
            ["--prometheus-url", "https://p:9090", "--prometheus-token-file", "/nope/token"],
            "error: --prometheus-token-file /nope/token: no such file",
        ),
        (
            ["--prometheus-url", "http://p:9090", "--prometheus-ca-file", "/etc/passwd"],
            "error: --prometheus-url http://p:9090: TLS files given, so an https:// URL",
        ),
        (  # not meant for the local cluster's plain Prometheus, the fallback without a URL
            ["--prometheus-ca-file", "/etc/passwd"],
            "error: --prometheus-ca-file /etc/passwd: for the Prometheus --prometheus-url "
            "names; none given",
        ),
        (
            ["--prometheus-token-file", "/etc/hostname"],
            "error: --prometheus-token-file /etc/hostname: for the Prometheus --prometheus-url "
            "names; none given",
        ),
    ],
)
def test_a_bad_flag_is_one_line_naming_it(flags, expected, tmp_path, gridloop):
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG)
    result = gridloop("status", "--kubeconfig", str(config), *flags)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(expected), line


def test_a_missing_kubeconfig_is_named(tmp_path, gridloop):
    result = gridloop("status", "--once", "--kubeconfig", str(tmp_path / "none"))
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: --kubeconfig {tmp_path / 'none'}: no such file"


def _on_a_terminal(args: list[str], stderr_too: bool) -> tuple[int, str]:
    """Run `gridloop status` with stdout (and stderr when `stderr_too`) on a terminal;
    return its exit code and what it wrote on stderr, wherever that went."""
    primary, terminal = pty.openpty()
    drawn: list[bytes] = []
    drained = threading.Thread(target=_drain, args=(primary, drawn), daemon=True)
    drained.start()
    proc = subprocess.Popen(
        [GRIDLOOP, "status", *args],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal if stderr_too else subprocess.PIPE,
        text=True,
        env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "30"},
    )
    os.close(terminal)
    try:
        _, piped = proc.communicate(timeout=60)
    finally:
        proc.kill()
        drained.join(5)
    return proc.returncode, piped if not stderr_too else b"".join(drawn).decode(errors="replace")


def test_the_live_ui_reports_a_bad_context_found_after_its_first_frame_as_one_line(tmp_path):
    """The live UI connects only once it is on screen; an unknown context found then
    still ends the command with the same one line and exit code as before the UI."""
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG)

    code, written = _on_a_terminal(["--kubeconfig", str(config), "--context", "nope"], True)

    # Textual draws on stderr; the error comes after the UI has put the screen back
    assert code == 2, written
    *_, after_ui = written.rpartition("\x1b[?1049l")  # the UI leaves the alternate screen
    assert re.sub(r"\x1b\[[0-9;?<>=$]*[A-Za-z~]", "", after_ui).strip() == (
        "error: --context nope: not in the kubeconfig (contexts: x)"
    )


def test_the_live_ui_refuses_when_stderr_is_not_a_terminal(tmp_path):
    """Textual draws on stderr: with it sent elsewhere, the UI would draw where nobody
    looks (`gridloop status 2>/dev/null` showed a blank terminal until q)."""
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG)

    code, written = _on_a_terminal(["--kubeconfig", str(config)], False)

    assert code == 2
    assert written.strip() == "error: stderr is not a terminal: use --once (and --output json)"


def _drain(fd: int, drawn: list[bytes]) -> None:
    """Read what the UI draws, so it never blocks on a full terminal."""
    try:
        while chunk := os.read(fd, 65536):
            drawn.append(chunk)
    except OSError:  # the last process holding the terminal closed it
        pass
    finally:
        os.close(fd)

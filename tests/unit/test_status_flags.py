"""`gridloop status` refuses bad flags with one line naming the flag, before it reads anything
(the kubeconfig named here points at a server nothing listens on: a read would fail
differently)."""

from __future__ import annotations

import pytest

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

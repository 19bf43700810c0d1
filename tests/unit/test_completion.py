"""`gridloop completion bash`, sourced into a real bash and asked what it completes."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gridloop import cli, completion

GRIDLOOP = str(Path(sys.executable).parent / "gridloop")


def complete(*words: str) -> list[str]:
    """What bash offers after `words` (the last one is being typed)."""
    script = (
        f"source <({shlex.quote(GRIDLOOP)} completion bash)\n"
        f"COMP_WORDS=(gridloop {' '.join(shlex.quote(w) for w in words)})\n"
        "COMP_CWORD=$((${#COMP_WORDS[@]} - 1))\n"
        '_gridloop; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert out.stderr == ""
    return [line for line in out.stdout.splitlines() if line]


def test_sourcing_it_registers_a_completion_for_gridloop() -> None:
    script = f"source <({shlex.quote(GRIDLOOP)} completion bash); complete -p gridloop"

    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)

    assert out.stdout.strip() == "complete -o default -F _gridloop gridloop"


def test_every_top_level_command_of_the_parser_is_offered() -> None:
    parser = cli.make_parser()
    (sub,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]

    assert complete("") == sorted(sub.choices)
    assert complete("un") == ["uninstall"]


def test_flags_of_the_command_typed_so_far_are_offered() -> None:
    assert complete("install", "--sk") == ["--skip-doctor"]
    assert complete("install", "--profile", "local", "--dry") == ["--dry-run"]
    assert complete("uninstall", "--purge", "--") == [
        "--context", "--force", "--helm", "--help", "--kubeconfig", "--kubectl", "--namespace",
        "--purge", "--release", "--timeout", "--yes",
    ]  # fmt: skip
    assert complete("local", "up", "--no-") == ["--no-gpu-health", "--no-health-service"]


def test_a_flag_with_choices_completes_its_choices_and_a_file_flag_file_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "gridloop-0.1.0.tgz").write_text("")
    monkeypatch.chdir(tmp_path)

    assert complete("doctor", "-o", "") == ["table", "json"]
    assert complete("completion", "") == ["bash", "zsh"]
    assert complete("install", "--bundle", "grid") == ["gridloop-0.1.0.tgz"]
    assert complete("install", "--namespace", "") == [], "a free-form value: nothing to offer"


def test_zsh_gets_the_same_tables_through_bashcompinit() -> None:
    zsh = completion.script(cli.make_parser(), "zsh")

    assert "autoload -U +X bashcompinit && bashcompinit" in zsh
    assert zsh.split("\n", 2)[2] == completion.script(cli.make_parser(), "bash").split("\n", 1)[1]

"""`gridloop sim inject|clear|list`: one line per change, one line per refusal."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from gridloop.errors import UsageError
from gridloop.sim import commands
from gridloop.sim.storing import FAULTS_FILE, read_faults

FLEET = """\
apiVersion: gridloop.io/v1alpha1
kind: Fleet
metadata: {name: test}
sites:
  - name: us-east
    type: cloud
    region: us-east-1
    zones: [us-east-1a]
    pools:
      - {name: h100, gpu: H100-80GB, nodes: 2, gpusPerNode: 8}
"""
NODE = "us-east-h100-000"


@pytest.fixture
def state(tmp_path: Path) -> Path:
    (tmp_path / "fleet.yaml").write_text(FLEET)
    return tmp_path


def run(state: Path, *argv: str) -> int:
    parser = argparse.ArgumentParser(prog="gridloop")
    commands.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["sim", *argv, "--state-dir", str(state)])
    result: int = args.func(args)
    return result


def test_inject_prints_one_line_per_fault_and_writes_the_file(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(state, "inject", "--node", NODE, "--gpu", "3", "--xid", "79", "--ecc-dbe")

    assert code == 0
    assert capsys.readouterr().out.splitlines() == [
        f"injected xid 79 on {NODE} GPU 3",
        f"injected ecc-dbe on {NODE} GPU 3",
    ]
    assert read_faults(state / FAULTS_FILE)[(NODE, 3)].summary() == {"xid": 79, "ecc-dbe": 1}


def test_inject_without_gpu_applies_to_the_whole_node(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(state, "inject", "--node", NODE, "--exporter-down")

    assert capsys.readouterr().out == f"injected exporter-down on {NODE} (all GPUs)\n"
    assert read_faults(state / FAULTS_FILE).exporter_down(NODE)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["inject", "--xid", "79"], "--node: required", id="inject-without-node"),
        pytest.param(["inject", "--node", NODE], f"--node {NODE}: nothing", id="no-fault"),
        pytest.param(
            ["inject", "--node", "nope", "--vanish"], "--node nope: no such node", id="bad-node"
        ),
        pytest.param(
            ["inject", "--node", NODE, "--gpu", "8", "--vanish"],
            f"--gpu 8: node {NODE} has GPUs 0-7",
            id="gpu-out-of-range",
        ),
        pytest.param(
            ["inject", "--node", NODE, "--gpu", "x", "--vanish"],
            "--gpu x: must be a whole number",
            id="gpu-not-a-number",
        ),
        pytest.param(
            ["inject", "--node", NODE, "--temp", "hot"], "--temp hot: must be a number", id="temp"
        ),
        pytest.param(
            ["inject", "--node", NODE, "--pcie-replays", "-3"],
            "--pcie-replays -3: must be a non-negative rate",
            id="negative-rate",
        ),
        pytest.param(["clear", "--gpu", "3"], "--gpu 3: needs --node", id="clear-gpu-alone"),
        pytest.param(["clear", "--node", "nope"], "--node nope: no such node", id="clear-typo"),
    ],
)
def test_bad_flags_are_one_line_naming_the_flag_and_change_nothing(
    state: Path, argv: list[str], message: str
) -> None:
    with pytest.raises(UsageError) as caught:
        run(state, *argv)

    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)
    assert not (state / FAULTS_FILE).exists()


def test_without_a_fleet_the_state_dir_is_named(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=rf"^--state-dir {tmp_path}: no fleet.yaml there"):
        run(tmp_path, "inject", "--node", NODE, "--vanish")


def test_clear_one_gpu_prints_what_it_removed_and_what_stays(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(state, "inject", "--node", NODE, "--gpu", "3", "--xid", "79")
    run(state, "inject", "--node", NODE, "--thermal-violation")
    capsys.readouterr()

    run(state, "clear", "--node", NODE, "--gpu", "3")

    assert capsys.readouterr().out.splitlines() == [
        f"cleared xid 79 on {NODE} GPU 3",
        f"node-wide faults on {NODE} stay: clear them with --node {NODE} alone",
    ]
    assert list(read_faults(state / FAULTS_FILE)) == [(NODE, None)]


def test_clear_everything(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(state, "inject", "--node", NODE, "--gpu", "1", "--vanish")
    run(state, "clear")

    assert capsys.readouterr().out.splitlines()[-1] == f"cleared vanish on {NODE} GPU 1"
    assert len(read_faults(state / FAULTS_FILE)) == 0


def test_list_shows_a_table_or_json(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(state, "inject", "--node", NODE, "--gpu", "3", "--xid", "79", "--nvlink-errors", "2.5")
    run(state, "inject", "--node", "us-east-h100-001", "--exporter-down")
    capsys.readouterr()

    run(state, "list")
    table = capsys.readouterr().out.splitlines()
    run(state, "list", "-o", "json")
    rows = json.loads(capsys.readouterr().out)

    assert table == [
        "NODE              GPU  FAULTS",
        "us-east-h100-000  3    xid 79, nvlink-errors 2.5/s",
        "us-east-h100-001  all  exporter-down",
    ]
    assert rows == [
        {"node": NODE, "gpu": 3, "faults": {"xid": 79, "nvlink-errors": 2.5}},
        {"node": "us-east-h100-001", "gpu": None, "faults": {"exporter-down": True}},
    ]


def test_list_with_nothing_injected(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(state, "list")

    assert capsys.readouterr().out == "no faults injected\n"

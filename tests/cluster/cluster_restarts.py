"""For the test modules that restart the shared local cluster (tests/conftest.py) with more
container nodes: their markers (they run after every other test, and never on a user's
cluster), the restart, and the fleet files to restart with and to go back to."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from gridloop.local import cluster

MARKS = [
    pytest.mark.cluster,
    pytest.mark.restarts_cluster,
    pytest.mark.skipif(
        bool(os.environ.get("GRIDLOOP_TEST_STATE")),
        reason="GRIDLOOP_TEST_STATE reuses a user's running cluster: this test restarts it",
    ),
]


def restart(state_dir: Path, fleet: Path, base_port: int) -> list[str]:
    """`local down`, then `local up` from `fleet`; what `up` said."""
    stopped = cluster.down(state_dir)
    assert not stopped.busy and not stopped.left, stopped.left.describe()
    said: list[str] = []
    cluster.up(state_dir, fleet, base_port, say=said.append, health_service=False)
    return said


def fleet_files(state_dir: Path, work: Path, nodes: int) -> tuple[Path, Path]:
    """The fleet the cluster runs (copied to `work`) and the same with `nodes` container
    nodes."""
    now = work / "fleet-now.yaml"
    shutil.copyfile(state_dir / "fleet.yaml", now)
    fleet = yaml.safe_load(now.read_text())
    fleet.setdefault("containerNodes", {})["nodes"] = nodes
    resized = work / f"fleet-{nodes}-container-nodes.yaml"
    resized.write_text(yaml.safe_dump(fleet, sort_keys=False))
    return now, resized

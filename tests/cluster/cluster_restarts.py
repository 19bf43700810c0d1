"""For the test modules that restart the shared local cluster (tests/conftest.py) with more
container nodes: their markers (they run after every other test, and never on a user's
cluster), the restart, and the fleet files to restart with and to go back to.

The modules that need two container nodes share one restart: the first restarts the
cluster with two, and leaves them for the next (`with_container_nodes`); only the module
that loses a node for good (`LOSES_A_NODE`, run last of all) gives the cluster its one
node back, as part of what it tests. After the last module the session's cluster goes
down: nothing restarts it for nobody."""

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
# a module that stops a container node for good: after every other restarting module
LOSES_A_NODE = pytest.mark.loses_a_node


def nothing_after(request: pytest.FixtureRequest) -> bool:
    """No test after `request`'s module uses the shared cluster, and this session started
    it: the session stops it, purged, right after (tests/conftest.py), so putting it back
    (an uninstall, faults cleared and scraped, a restart) would be minutes spent for
    nobody. False on a user's cluster (GRIDLOOP_TEST_STATE): that one stays."""
    if os.environ.get("GRIDLOOP_TEST_STATE"):
        return False
    items = request.session.items
    last = max(i for i, item in enumerate(items) if item.module is request.module)
    return not any("local_cluster" in getattr(i, "fixturenames", ()) for i in items[last + 1 :])


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


def container_nodes(state_dir: Path) -> int:
    """How many container nodes the cluster in `state_dir` was started with."""
    fleet = yaml.safe_load((state_dir / "fleet.yaml").read_text())
    return int((fleet.get("containerNodes") or {}).get("nodes", 1))


def with_container_nodes(state_dir: Path, work: Path, nodes: int, base_port: int) -> Path:
    """The shared cluster with `nodes` container nodes: restarted with them unless it
    runs them already (a module before left them); the same fleet with one, to go back."""
    _, wanted = fleet_files(state_dir, work, nodes)
    _, one = fleet_files(state_dir, work, 1)
    if container_nodes(state_dir) != nodes:
        restart(state_dir, wanted, base_port)
    return one

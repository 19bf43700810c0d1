"""Test harness: one real local cluster per test run, one namespace per test.

Unit tests (tests/unit) need nothing, except those marked `needs_binaries`: they
run binaries `gridloop local build` builds into the cache (helm, kubectl, trivy-k8s-config...).
`make test-unit` leaves them out; run without the build, they fail at setup naming
what is missing, so a missing binary is never a skip counted as passing.

Cluster tests (tests/cluster, marked `cluster`) share one control plane started here
on its own ports and state directory, so it never collides with a demo cluster a user
has running:

- GRIDLOOP_TEST_STATE=DIR reuses a cluster already running from DIR (started
  with `gridloop local up --state-dir DIR ...`) and leaves it running;
- otherwise a cluster is started under pytest's temporary directory on
  GRIDLOOP_TEST_BASE_PORT (default 27400, below the ephemeral port range so
  no client connection can take one of its ports) with the default fleet, and stopped
  at the end of the run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from examples import example
from gridloop import kube
from gridloop.errors import BuildError
from gridloop.local import cluster
from gridloop.local.build import building
from gridloop.local.container import starting as container
from gridloop.local.state import State, load
from suite_timing import SuiteTiming

REPO = Path(__file__).resolve().parents[1]
DEFAULT_FLEET = example("fleets/default.yaml")
TEST_BASE_PORT = int(os.environ.get("GRIDLOOP_TEST_BASE_PORT", "27400"))
# `make test` runs its tests in two lanes at once (tests/suite.py): the tests marked
# `kwok_cluster`, and the unit tests, against a kwok-only cluster of the same GPU fleet;
# the rest against the cluster with the container node. Unset: one cluster, every test.
KWOK_LANE = os.environ.get("GRIDLOOP_TEST_LANE") == "kwok"


def kwok_only(fleet: Path, out: Path) -> Path:
    """The fleet file without its container nodes: its GPU nodes, names and pools alike."""
    doc = yaml.safe_load(fleet.read_text())
    doc.pop("containerNodes", None)
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def pytest_configure(config: pytest.Config) -> None:
    """Where the minutes go: per module, per slow fixture, how busy the cores were."""
    config.pluginmanager.register(SuiteTiming(), "suite-timing")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that stop and restart the shared cluster run after all the others, the one
    that loses a container node for good last (tests/cluster/cluster_restarts.py); before
    them the modules that run the heavy images (`heavy_images`: under `make test` they
    build beside the tests, so these wait for them as late as they can); before those, one
    after the other, the modules that share one install of the chart (`kueue_platform`,
    tests/cluster/conftest.py), so it is installed once, those of them that run a heavy
    image (test_training.py) last."""

    def order(item: pytest.Item) -> tuple[bool, bool, bool, bool, bool]:
        restarts = item.get_closest_marker("restarts_cluster") is not None
        loses_a_node = item.get_closest_marker("loses_a_node") is not None
        fixtures = getattr(item, "fixturenames", ())
        heavy, shared = "heavy_images" in fixtures, "kueue_platform" in fixtures
        return restarts, loses_a_node, heavy and not shared, shared, heavy

    items.sort(key=order)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A `needs_binaries("helm", ...)` test without those binaries built fails, loudly."""
    names = dict.fromkeys(n for m in item.iter_markers("needs_binaries") for n in m.args)
    missing = []
    for name in names:
        try:
            building.binary(name)
        except BuildError as err:
            missing.append(str(err))
    if missing:
        pytest.fail(
            "; ".join(missing) + " (`make build` builds them; `make test-unit` leaves out "
            "the tests marked needs_binaries)",
            pytrace=False,
        )


@dataclass(frozen=True)
class LocalCluster:
    state: State
    api: client.ApiClient

    @property
    def kubeconfig(self) -> Path:
        return self.state.kubeconfig

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)


@pytest.fixture(autouse=True)
def _lane(request: pytest.FixtureRequest) -> None:
    """In the kwok lane, a cluster test that is not marked `kwok_cluster` fails: it would
    find no container node (tests/suite.py selects none; a hand-made run could)."""
    if (
        KWOK_LANE
        and request.node.get_closest_marker("cluster")
        and not request.node.get_closest_marker("kwok_cluster")
    ):
        pytest.fail("this cluster test needs the container node: not in the kwok lane")


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    reuse = os.environ.get("GRIDLOOP_TEST_STATE")
    if reuse:
        state = load(Path(reuse))
        if not cluster.fully_running(state):
            pytest.fail(f"GRIDLOOP_TEST_STATE={reuse}: no running local cluster there")
        yield LocalCluster(state, kube.api_client(state.kubeconfig))
        return
    work = tmp_path_factory.mktemp("cluster")
    state_dir = work / "state"
    fleet = kwok_only(DEFAULT_FLEET, work / "kwok-fleet.yaml") if KWOK_LANE else DEFAULT_FLEET
    # a disk that fills while the node pulls the vLLM image evicts every pod: say so now,
    # not as install timeouts an hour later
    note = container.disk_note(cluster.read_fleet(fleet), state_dir)
    if note:
        pytest.fail(f"the cluster tests serve a model: {note}", pytrace=False)
    # the exporters and Prometheus run; health tests drive their own health service
    result = cluster.up(state_dir, fleet, TEST_BASE_PORT, say=lambda _m: None, health_service=False)
    try:
        yield LocalCluster(result.state, kube.api_client(result.state.kubeconfig))
    finally:
        # purged: the node's containerd holds the images it pulled (the vLLM CPU image
        # unpacks to 7 GiB), and pytest keeps its last three runs' folders
        cluster.down(state_dir, purge=True)


@pytest.fixture
def namespace(local_cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test, deleted afterwards."""
    stem = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower())[:40].strip("-")
    name = f"{stem}-{uuid.uuid4().hex[:5]}"
    local_cluster.core.create_namespace(
        {"metadata": {"name": name, "labels": {"gridloop-test": "true"}}}
    )
    try:
        yield name
    finally:
        local_cluster.core.delete_namespace(name, propagation_policy="Background")


GRIDLOOP = str(Path(sys.executable).parent / "gridloop")


def run_gridloop(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed `gridloop` console script as a user would."""
    return subprocess.run(
        [GRIDLOOP, *args], capture_output=True, text=True, env=env, timeout=600, check=False
    )


@pytest.fixture
def gridloop() -> Callable[..., subprocess.CompletedProcess[str]]:
    return run_gridloop


@pytest.fixture(scope="session")
def bundled_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart as `gridloop bundle` writes it (KAITO left out: it cannot be fetched
    here), made once per run for every test that only reads it."""
    from gridloop.bundle import bundling

    out, chart = tmp_path_factory.mktemp("bundled") / "dist", REPO / "charts" / "gridloop"
    request = bundling.Request(out=out, chart=chart, skip=frozenset({"kaito"}))
    return bundling.bundle(request).folder


Eventually = Callable[..., object]


@pytest.fixture
def eventually() -> Eventually:
    """`eventually(check, what, timeout)`: poll `check()` until it returns a truthy value.

    The cluster is level-triggered and asynchronous; tests wait for the state
    they assert instead of sleeping a fixed time.
    """

    def wait(check: Callable[[], object], what: str, timeout: float = 30.0) -> object:
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            last = check()
            if last:
                return last
            time.sleep(0.2)
        pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")

    return wait

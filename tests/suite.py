"""`make test`'s runner: the build, then the tests in two lanes at once, then one line.

    python tests/suite.py [pytest args...]

It builds every binary and image the suite needs but the heavy ones (`gridloop local
build --mirror DIR`, KAITO's controller from the upstream mirror included: seconds when
cached) and assembles the chart's bundle once (so no two lanes fetch
it at once). The heavy images (vLLM CPU, Ray, the trainer: `gridloop local build vllm-cpu
ray trainer`) build beside the tests, on the cores the waiting tests leave idle, instead
of slowing the Go builds; the tests that run them come last and wait for them
(`heavy_images`, tests/cluster/conftest.py). Then two pytest processes run side by side,
each with the given arguments:

- the **container lane**: the cluster tests that need the container node (pods that
  really run: the chart's controllers, models, sandboxes, RayJobs), against the cluster
  with the default fleet, on base port 27400;
- the **kwok lane**: the unit tests and the cluster tests marked `kwok_cluster`, against a
  kwok-only cluster of the same GPU fleet on base port 28400 (tests/conftest.py).

Most of the container lane's time is spent waiting on pods, so the second lane fills
the idle core (docs/local-cluster.md has the figures); the kwok lane and the heavy build
run niced (BESIDE_NICE), so where both lanes want the cores the container lane, the run's
length, comes first. The container lane's output streams; the kwok lane's is written to
a log and printed when both are done. It ends
with one line counted by pytest itself (tests/suite_timing.py writes the counts and
the cluster's setup time):

    make test: 2051 passed, 0 failed in 1837s (build 61s, cluster setup 97s, tests 1761s)

With GRIDLOOP_SUITE_REPORTS=DIR, each lane's figures (JSON: seconds per module and per
slow fixture, cores busy, counts) and the kwok lane's log are kept in DIR.
Its exit code is the build's when the build fails, else 0 only when both lanes pass.
Nothing is retried: a test that fails once has failed. GRIDLOOP_TEST_LANES=1 runs every
test in one pytest process against the container node's cluster, as plain `pytest` does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import upstream_mirror

BIN = Path(sys.executable).parent
KWOK_BASE_PORT = "28400"
# pytest's exit code when a lane's selection holds no test (a run of chosen files)
NO_TESTS = 5
# The niceness of what runs beside the container lane (the kwok lane with its cluster, the
# heavy images' build): the container lane is the run's length, and in the first minutes,
# when both lanes are busy, its modules took longer than alone (docs/local-cluster.md);
# niced, the side work takes the cores it leaves.
BESIDE_NICE = 5


def beside(command: list[str]) -> list[str]:
    """`command` run at BESIDE_NICE: it yields the cores to the container lane."""
    return ["nice", "-n", str(BESIDE_NICE), *command]


HEAVY_IMAGES = ("vllm-cpu", "ray", "trainer")
# where the heavy images' build says it is done: `<log>.rc` holds its exit code
HEAVY_BUILD_ENV = "GRIDLOOP_HEAVY_BUILD_LOG"


@dataclass(frozen=True)
class Lane:
    name: str
    marks: str
    env: dict[str, str]


LANES = (
    Lane("container", "cluster and not kwok_cluster", {}),
    Lane(
        "kwok",
        "not cluster or kwok_cluster",
        {"GRIDLOOP_TEST_LANE": "kwok", "GRIDLOOP_TEST_BASE_PORT": KWOK_BASE_PORT},
    ),
)


def main(argv: list[str]) -> int:
    t0 = time.monotonic()
    lanes = os.environ.get("GRIDLOOP_TEST_LANES") != "1"
    what = [] if lanes else ["all"]  # in lanes, the heavy images build beside the tests
    # KAITO's controller, from its release in the upstream mirror (tests/cluster/test_kaito.py)
    mirror = upstream_mirror.find()
    what += ["--mirror", str(mirror)] if mirror is not None else []
    build = subprocess.run([str(BIN / "gridloop"), "local", "build", *what], check=False)
    if build.returncode == 0:
        with tempfile.TemporaryDirectory(prefix="gridloop-bundle-") as out:
            bundle = [str(BIN / "gridloop"), "bundle", "--skip", "kaito", "--out", out]
            build = subprocess.run(bundle, stdout=subprocess.DEVNULL, check=False)
    built = time.monotonic() - t0
    if build.returncode != 0:
        print(f"make test: the build failed after {built:.0f}s (exit {build.returncode})")
        return build.returncode
    t1 = time.monotonic()
    heavy: Heavy | None = None
    with tempfile.TemporaryDirectory(prefix="gridloop-suite-") as tmp:
        work = Path(tmp)
        if not lanes:
            codes, reports = _one(work, argv)
        else:
            heavy = Heavy.start(work / "heavy-images.log")
            codes, reports = _lanes(work, argv)
            codes.append(heavy.wait())
        keep = os.environ.get("GRIDLOOP_SUITE_REPORTS")
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            for kept in [*work.glob("*.json"), *work.glob("*.log")]:
                shutil.copy2(kept, Path(keep) / kept.name)
    tested = time.monotonic() - t1
    line = summary(reports, built, tested, time.monotonic() - t0)
    if heavy is not None:
        line = line[:-1] + f", heavy images {heavy.seconds:.0f}s beside the tests)"
    print(line, flush=True)
    failed = [c for c in codes if c not in (0, NO_TESTS)]
    if failed:
        return failed[0]
    return NO_TESTS if all(c == NO_TESTS for c in codes) else 0


@dataclass
class Heavy:
    """The heavy images' build, running beside the lanes; `<log>.rc` says when it is done
    (the `heavy_images` fixture waits for it) and how it ended."""

    proc: subprocess.Popen[bytes]
    log: Path
    started: float
    seconds: float = 0.0
    thread: threading.Thread | None = None

    @classmethod
    def start(cls, log: Path) -> Heavy:
        os.environ[HEAVY_BUILD_ENV] = str(log)  # the lanes inherit it
        with log.open("wb") as out:
            proc = subprocess.Popen(
                beside([str(BIN / "gridloop"), "local", "build", *HEAVY_IMAGES]),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        heavy = cls(proc, log, time.monotonic())
        heavy.thread = threading.Thread(target=heavy._finish, daemon=True)
        heavy.thread.start()
        return heavy

    def _finish(self) -> None:
        code = self.proc.wait()
        self.seconds = time.monotonic() - self.started
        rc = self.log.with_name(self.log.name + ".rc")
        partial = rc.with_name(rc.name + ".tmp")
        partial.write_text(f"{code}\n")
        partial.replace(rc)  # whole or absent: a reader never sees half of it

    def wait(self) -> int:
        """Its exit code once it is done (the lanes may not have needed it); its log is
        printed when it failed."""
        code = self.proc.wait()
        if self.thread is not None:
            self.thread.join()
        if code != 0:
            print(f"\n== the heavy images' build failed (exit {code}) ==", flush=True)
            sys.stdout.write(self.log.read_text(errors="replace"))
        return code


def _pytest(work: Path, name: str, argv: list[str]) -> list[str]:
    return [str(BIN / "pytest"), f"--basetemp={work / name}", *argv]


def _env(work: Path, name: str, extra: dict[str, str]) -> dict[str, str]:
    return {**os.environ, **extra, "GRIDLOOP_TEST_TIMINGS": str(work / f"{name}.json")}


def _one(work: Path, argv: list[str]) -> tuple[list[int], list[dict[str, Any]]]:
    env = _env(work, "all", {})
    code = subprocess.run(_pytest(work, "all", argv), env=env, check=False).returncode
    return [code], [_report(work, "all")]


def _lanes(work: Path, argv: list[str]) -> tuple[list[int], list[dict[str, Any]]]:
    container, kwok = LANES
    log = work / "kwok.log"
    kwok_env = _env(work, kwok.name, kwok.env)
    with log.open("w") as out:
        side = subprocess.Popen(
            # its own cache folder: two runs writing .pytest_cache at once could tear a file
            beside(
                _pytest(work, kwok.name, ["-m", kwok.marks, "-o", f"cache_dir={work}/cache", *argv])
            ),
            env=kwok_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        env = _env(work, container.name, container.env)
        print(f"== {container.name} lane (the kwok lane's output follows when both end) ==")
        sys.stdout.flush()
        main_code = subprocess.run(
            _pytest(work, container.name, ["-m", container.marks, *argv]),
            env=env,
            check=False,
        ).returncode
        side_code = side.wait()
    print(f"\n== {kwok.name} lane ==", flush=True)
    sys.stdout.write(log.read_text())
    sys.stdout.flush()
    return [main_code, side_code], [_report(work, container.name), _report(work, kwok.name)]


def _report(work: Path, name: str) -> dict[str, Any]:
    path = work / f"{name}.json"
    return dict(json.loads(path.read_text())) if path.is_file() else {}


def summary(reports: list[dict[str, Any]], built: float, tested: float, total: float) -> str:
    counts: dict[str, int] = {}
    for report in reports:
        for key, n in (report.get("counts") or {}).items():
            counts[key] = counts.get(key, 0) + n
    failed = counts.get("failed", 0) + counts.get("error", 0)
    line = f"make test: {counts.get('passed', 0)} passed, {failed} failed"
    if counts.get("skipped"):
        line += f", {counts['skipped']} skipped"
    setups = [r["cluster_setup"] for r in reports if r.get("cluster_setup") is not None]
    cluster = f"cluster setup {max(setups):.0f}s, " if setups else ""
    return f"{line} in {total:.0f}s (build {built:.0f}s, {cluster}tests {tested:.0f}s)"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

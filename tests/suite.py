"""`make test`'s runner: the build, then pytest, then one line that says how it went.

    python tests/suite.py [pytest args...]

It builds every binary and image the suite needs (`gridloop local build all`: seconds
when cached), runs pytest with the given arguments, and ends with

    make test: 2051 passed, 0 failed, 3 skipped in 2837s (build 61s, cluster setup 97s, tests 2679s)

counted by pytest itself (tests/suite_timing.py writes its counts and the cluster's
setup time). Its exit code is pytest's, or the build's when the build fails. Nothing is
retried: a test that fails once has failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def main(argv: list[str]) -> int:
    t0 = time.monotonic()
    build = subprocess.run([str(BIN / "gridloop"), "local", "build", "all"], check=False)
    built = time.monotonic() - t0
    if build.returncode != 0:
        print(f"make test: the build failed after {built:.0f}s (exit {build.returncode})")
        return build.returncode
    with tempfile.TemporaryDirectory(prefix="gridloop-suite-") as work:
        timings = Path(work) / "timings.json"
        env = {**os.environ, "GRIDLOOP_TEST_TIMINGS": str(timings)}
        t1 = time.monotonic()
        tests = subprocess.run([str(BIN / "pytest"), *argv], env=env, check=False)
        tested = time.monotonic() - t1
        report = json.loads(timings.read_text()) if timings.is_file() else {}
    print(summary(report, built, tested, time.monotonic() - t0), flush=True)
    return tests.returncode


def summary(report: dict, built: float, tested: float, total: float) -> str:
    counts = report.get("counts") or {}
    failed = counts.get("failed", 0) + counts.get("error", 0)
    line = f"make test: {counts.get('passed', 0)} passed, {failed} failed"
    if counts.get("skipped"):
        line += f", {counts['skipped']} skipped"
    setup = report.get("cluster_setup")
    cluster = f"cluster setup {setup:.0f}s, " if setup is not None else ""
    return f"{line} in {total:.0f}s (build {built:.0f}s, {cluster}tests {tested:.0f}s)"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

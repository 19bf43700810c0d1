"""Where the suite's minutes go: wall time per test module, per slow fixture setup and
teardown, and how busy the machine's cores were meanwhile (sampled from /proc/stat).

Loaded by tests/conftest.py. At the end of a run it writes the figures as JSON to
$GRIDLOOP_TEST_TIMINGS (when set) and prints the slowest modules and fixtures, so a
run's report says where the time went (docs/local-cluster.md keeps the table). It
measures only: it never changes what runs or how long anything may take.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

SAMPLE_SECONDS = 2.0
# a fixture setup or teardown slower than this is listed on its own
SLOW_SECONDS = 5.0


def _cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of all cores, from /proc/stat's first line."""
    fields = [float(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    total = sum(fields[:8])
    return total - idle, total


class CpuSampler:
    """Samples the share of all cores that was busy, every SAMPLE_SECONDS, in a thread."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []  # (monotonic end of interval, busy 0..1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="cpu-sampler")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        busy, total = _cpu_times()
        while not self._stop.wait(SAMPLE_SECONDS):
            busy2, total2 = _cpu_times()
            if total2 > total:
                self.samples.append((time.monotonic(), (busy2 - busy) / (total2 - total)))
            busy, total = busy2, total2

    def busy_between(self, start: float, end: float) -> float | None:
        """Mean busy share of the samples that ended within [start, end + one interval]."""
        inside = [b for t, b in self.samples if start < t <= end + SAMPLE_SECONDS]
        return sum(inside) / len(inside) if inside else None


@dataclass
class Span:
    """One module's time: the sum of its tests' setup, call and teardown (a module the
    run splits, as the shared install's ordering may, is not charged for what ran
    between its parts)."""

    name: str
    start: float
    end: float
    tests: int = 0
    intervals: list[tuple[float, float]] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(b - a for a, b in self.intervals)


class SuiteTiming:
    """The pytest plugin: collects spans and prints/writes them at the end."""

    def __init__(self) -> None:
        self.cpu = CpuSampler()
        self.begin = time.monotonic()
        self.modules: dict[str, Span] = {}
        self.fixtures: list[dict[str, Any]] = []

    # -- hooks -----------------------------------------------------------------------
    @pytest.hookimpl
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.begin = time.monotonic()
        self.cpu.start()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        module = item.nodeid.split("::", 1)[0]
        start = time.monotonic()
        span = self.modules.setdefault(module, Span(module, start, start))
        yield
        span.end = time.monotonic()
        span.intervals.append((start, span.end))
        span.tests += 1

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        module = report.nodeid.split("::", 1)[0]
        if report.when == "teardown" and report.duration >= SLOW_SECONDS:
            self.fixtures.append(
                {
                    "what": "teardown",
                    "name": report.nodeid,
                    "module": module,
                    "seconds": round(report.duration, 1),
                }
            )

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(
        self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
    ) -> Generator[None, None, None]:
        start = time.monotonic()
        yield
        end = time.monotonic()
        if end - start >= SLOW_SECONDS or fixturedef.scope in ("session", "package", "module"):
            node = getattr(request, "node", None)
            nodeid = getattr(node, "nodeid", "") or ""
            self.fixtures.append(
                {
                    "what": "setup",
                    "name": fixturedef.argname,
                    "scope": fixturedef.scope,
                    "module": nodeid.split("::", 1)[0],
                    "seconds": round(end - start, 1),
                    "busy": _percent(self.cpu.busy_between(start, end)),
                }
            )

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        self.cpu.stop()
        end = time.monotonic()
        report = self.report(end)
        stats = terminalreporter.stats
        # what pytest's own closing line counts
        report["counts"] = {
            key: len(stats.get(key, []))
            for key in ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
        }
        setups = [f["seconds"] for f in self.fixtures if f["name"] == "local_cluster"]
        report["cluster_setup"] = setups[0] if setups else None
        out = os.environ.get("GRIDLOOP_TEST_TIMINGS")
        if out:
            Path(out).write_text(json.dumps(report, indent=1) + "\n")
        slow = [m for m in report["modules"] if m["seconds"] >= 30]
        if not slow:
            return
        write = terminalreporter.write_line
        terminalreporter.section("where the time went (tests/suite_timing.py)")
        write(f"{'seconds':>8} {'cores busy':>10} {'tests':>6}  module")
        for m in slow:
            busy = "-" if m["busy"] is None else f"{m['busy']}%"
            write(f"{m['seconds']:>8.0f} {busy:>10} {m['tests']:>6}  {m['module']}")
        for f in sorted(report["fixtures"], key=lambda f: -f["seconds"])[:15]:
            if f["seconds"] >= SLOW_SECONDS:
                busy = "-" if f.get("busy") is None else f"{f['busy']}%"
                write(f"{f['seconds']:>8.0f} {busy:>10}         {f['what']} {f['name']}")
        total = report["busy"]
        write(f"{report['seconds']:>8.0f} {'-' if total is None else f'{total}%':>10}  whole run")

    # -- the figures -------------------------------------------------------------------
    def _busy(self, intervals: list[tuple[float, float]]) -> float | None:
        """The busy share over these intervals, weighted by their length."""
        weighted = total = 0.0
        for a, b in intervals:
            share = self.cpu.busy_between(a, b) if b - a >= SAMPLE_SECONDS else None
            if share is not None:
                weighted, total = weighted + share * (b - a), total + (b - a)
        return weighted / total if total else None

    def report(self, end: float) -> dict[str, Any]:
        modules = sorted(self.modules.values(), key=lambda s: -s.seconds)
        return {
            "seconds": round(end - self.begin, 1),
            "busy": _percent(self.cpu.busy_between(self.begin, end)),
            "modules": [
                {
                    "module": s.name,
                    "seconds": round(s.seconds, 1),
                    "tests": s.tests,
                    "busy": _percent(self._busy(s.intervals)),
                    "start": round(s.start - self.begin, 1),
                }
                for s in modules
            ],
            "fixtures": self.fixtures,
        }


def _percent(share: float | None) -> int | None:
    return None if share is None else round(share * 100)


def markdown(report: dict[str, Any], top: int = 40) -> str:
    """The figures as the Markdown tables docs/local-cluster.md keeps: modules by wall time,
    then the slow fixture setups and teardowns."""
    rows = ["| module | tests | wall s | cores busy |", "| --- | ---: | ---: | ---: |"]
    for m in report["modules"][:top]:
        busy = "-" if m["busy"] is None else f"{m['busy']}%"
        rows.append(f"| `{m['module']}` | {m['tests']} | {m['seconds']:.0f} | {busy} |")
    rows.append(f"| whole run | | {report['seconds']:.0f} | {report['busy']}% |")
    slow = sorted(
        (f for f in report["fixtures"] if f["seconds"] >= SLOW_SECONDS), key=lambda f: -f["seconds"]
    )
    rows += ["", "| fixture | of | s | cores busy |", "| --- | --- | ---: | ---: |"]
    for f in slow[:top]:
        busy = "-" if f.get("busy") is None else f"{f['busy']}%"
        name = f["name"] if f["what"] == "setup" else f"teardown after {f['name'].split('::')[-1]}"
        rows.append(f"| {f['what']} `{name}` | `{f['module']}` | {f['seconds']:.0f} | {busy} |")
    return "\n".join(rows)


if __name__ == "__main__":
    import sys

    print(markdown(json.loads(Path(sys.argv[1]).read_text())))

"""Benchmark: `gridloop status` on a 5,000-node fleet (40,000 GPUs): first paint and the
CPU one refresh costs.

Everything is real: the local control plane with a generated fleet of 5,000 kwok nodes,
the simulated DCGM exporters and Debian's Prometheus (scraping every 60 s: 40,000 GPUs'
series every 5 s is more than two cores can take in, and the answers status parses are
the same size either way). Measuring starts once every exporter is up and the GPU
count has held for a minute (Prometheus takes minutes to get round 5,000 exporters).
The UI is the real Textual app, run headless (Textual's test driver) in a fresh
process, fed by the real collector. Each window reports its node updates a second,
CPU per thread, and what moved (node versions, Prometheus answers, fleet rebuilds).

- first paint: from the process's start (as the kernel records it, so interpreter
  start-up and imports count) to the UI's first frame, and to the first frame with
  all 5,000 nodes' data;
- refresh CPU: the process's CPU time (every thread: watches, Prometheus reads,
  polling, the table) over a window, divided by the refreshes in it, at one refresh a
  second: (a) an idle fleet; (b) 50 nodes changing per second (the benchmark patches
  a label on them from another process), so the watches deliver and rows are redrawn;
- baseline in the same run: the plain way of refreshing, listing every node again each
  refresh into a Textual DataTable that holds every row, measured in the same process
  (the best of three).

Reference (not measured here): k9s users report about 7 s to start with ~1,000 pods.

Usage (binaries built, nothing else running):

    .venv/bin/python bench/bench_status.py [--nodes 5000] [--seconds 20] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# Nothing heavy is imported here: the child process measures first paint from its own
# start, so it must import only what `gridloop status` imports. The parent's imports are
# in main().

BASE_PORT = 28700  # below the ephemeral port range; other benches use 28400-28600
SIZE = (200, 50)


def _age() -> float:
    """Seconds since this process started, from /proc: the start in clock ticks since
    boot against /proc/uptime (both from boot, 10 ms resolution). (Boot time in
    /proc/stat is whole seconds: an earlier version added up to a second here.)"""
    ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return uptime - ticks / os.sysconf("SC_CLK_TCK")


def _thread_cpu() -> dict[str, float]:
    """CPU seconds of each live thread, by name (threads of one name summed), from /proc."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended
            continue
        name = names.get(int(tid), "other").rstrip("_0123456789")
        ticks = int(fields[11]) + int(fields[12])
        out[name] = out.get(name, 0.0) + ticks / os.sysconf("SC_CLK_TCK")
    return out


def child(kubeconfig: str, prometheus: str, nodes: int, seconds: float) -> None:
    """Runs in a fresh process: prints one JSON line per measurement."""
    # as `gridloop status` does: the app first, the collector on its first poll
    from gridloop.status.app import StatusApp
    from gridloop.status.commands import Later
    from gridloop.status.sources import Source

    def say(**kw: object) -> None:
        print(json.dumps(kw), flush=True)

    later = Later(Source(kubeconfig, prometheus_url=prometheus), interval=1.0)
    app = StatusApp(later.snapshot, interval=1.0)

    async def run() -> None:
        async with app.run_test(size=SIZE) as pilot:
            while app.first_data_at is None or len(app.shown) < nodes:
                await pilot.pause(0.01)
            age, at = _age(), time.monotonic()  # the process's age at this moment
            assert app.first_frame_at is not None and later.collector is not None
            collector = later.collector

            def since_start(then: float | None) -> float | None:
                return None if then is None else round(age - (at - then), 3)

            say(
                first_frame_s=since_start(app.first_frame_at),
                first_data_s=since_start(app.first_data_at),
                nodes_listed_s=since_start(collector.nodes.synced_at),
                first_poll_s=since_start(collector.first_poll_at),
                rows=len(app.shown),
            )
            while collector.prometheus_at is None:  # the GPU columns fill in later
                await pilot.pause(0.1)
            say(phase="prometheus", first_answer_s=since_start(collector.prometheus_at))
            # what moved in each window: node versions (a change status shows), new
            # Prometheus answers, and rebuilds of the fleet's rows
            moved = {"node_versions": 0, "prometheus_answers": 0, "fleet_rebuilds": 0}
            fleet = collector._fleet
            seen = {"version": collector.nodes.version, "prom": collector._polled.prom}

            def counted(prom: Any, last: Any) -> Any:
                rows = fleet(prom, last)
                moved["fleet_rebuilds"] += rows is not last.nodes
                moved["prometheus_answers"] += prom is not seen["prom"]
                moved["node_versions"] += collector.nodes.version != seen["version"]
                seen.update(version=collector.nodes.version, prom=prom)
                return rows

            collector._fleet = counted  # type: ignore[method-assign]
            for phase in ("idle", "churn"):
                say(phase=phase, ready=True)
                if phase == "churn":
                    await pilot.pause(3.0)  # let the other process start patching
                cpu0, n0, e0 = time.process_time(), app.refreshes, collector.nodes.events
                threads0 = _thread_cpu()
                moved.update(dict.fromkeys(moved, 0))
                await pilot.pause(seconds)
                cpu, n = time.process_time() - cpu0, app.refreshes - n0
                per = round(1000 * cpu / n, 1) if n else None
                updates = round((collector.nodes.events - e0) / seconds, 1)
                per_thread = {name: round(1000 * (c - threads0.get(name, 0.0)) / seconds, 1)
                              for name, c in _thread_cpu().items()}  # fmt: skip
                # threads that started and ended inside the window (a read's pool)
                per_thread["ended"] = round(1000 * cpu / seconds - sum(per_thread.values()), 1)
                say(phase=phase, refreshes=n, cpu_ms_per_refresh=per, cpu_s=round(cpu, 2),
                    node_updates_per_s=updates, thread_ms_per_s=per_thread, **moved)  # fmt: skip
            await pilot.press("q")
        later.stop()
        from textual.app import App
        from textual.widgets import DataTable

        from gridloop.status import views
        from gridloop.status.collecting import node_row
        from gridloop.status.snapshot import Snapshot

        # baseline: the plain way, each refresh lists every node again and a DataTable holds
        # every row (what a Textual table over `kubectl get nodes` would do)
        plain = App[None]()
        samples = []
        async with plain.run_test(size=SIZE) as pilot:
            table: DataTable[str] = DataTable()
            await plain.mount(table)
            table.add_columns(*(c.title for c in views.columns("fleet")))
            for _ in range(3):
                cpu0 = time.process_time()
                raw = collector.core.list_node(label_selector="nvidia.com/gpu.present=true",
                                               _preload_content=False)  # fmt: skip
                rows = views.fleet(Snapshot(0.0, nodes=tuple(
                    node_row(o) for o in json.loads(raw.data)["items"]))).rows  # fmt: skip
                table.clear()
                for row in rows:
                    table.add_row(*row.cells, key=row.key)
                await pilot.pause(0.5)  # the table measures and renders on idle
                samples.append(time.process_time() - cpu0)
        say(phase="baseline", cpu_ms_per_refresh=round(1000 * min(samples), 1))

    asyncio.run(run())


def _exporters(prometheus: str) -> tuple[int, int]:
    """(exporters up, GPUs reporting) as Prometheus answers now."""
    import urllib.parse
    import urllib.request

    def one(expr: str) -> int:
        url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=60) as resp:
            result = json.load(resp)["data"]["result"]
        return int(float(result[0]["value"][1])) if result else 0

    return one('sum(up{job="dcgm-exporter"})'), one("count(DCGM_FI_DEV_GPU_TEMP)")


def wait_settled(prometheus: str, nodes: int, least: float, most: float) -> float:
    """Wait until every exporter is up and the GPU count has held for a minute (after
    the scrape interval changes, Prometheus takes minutes to get round 5,000 exporters,
    and the GPU columns change for thousands of rows meanwhile). Returns the wait."""
    t0, held, last = time.monotonic(), 0.0, (-1, -1)
    while time.monotonic() - t0 < most:
        now = _exporters(prometheus)
        print(f"  {time.monotonic() - t0:4.0f}s: exporters up {now[0]}, GPUs {now[1]}", flush=True)
        held = held + 10 if now == last and now[0] == nodes else 0.0
        last = now
        if held >= 60 and time.monotonic() - t0 >= least:
            return time.monotonic() - t0
        time.sleep(10)
    raise SystemExit(f"Prometheus did not settle in {most:.0f}s: {last} (up, GPUs)")


def churn(api: Any, names: list[str], per_second: int, stop: threading.Event) -> int:
    from kubernetes import client

    core = client.CoreV1Api(api)
    done, i = 0, 0
    while not stop.is_set():
        t0 = time.monotonic()
        for _ in range(per_second):
            name = names[i % len(names)]
            core.patch_node(name, {"metadata": {"labels": {"bench.gridloop.io/tick": str(i)}}})
            i += 1
            done += 1
        time.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))
    return done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--child", nargs=2, metavar=("KUBECONFIG", "PROMETHEUS"), help=argparse.SUPPRESS
    )
    args = ap.parse_args()
    if args.child:
        child(*args.child, args.nodes, args.seconds)
        return
    from kubernetes import client

    from gridloop import kube
    from gridloop.fleet import dump_fleet, generate_fleet
    from gridloop.local import cluster

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_health import _set_scrape_interval

    results: dict[str, object] = {
        "machine": f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}",
        "nodes": args.nodes,
    }
    with tempfile.TemporaryDirectory(prefix="bench-status-") as tmp:
        work = Path(tmp)
        fleet_file = work / "fleet.yaml"
        fleet_file.write_text(dump_fleet(generate_fleet(args.nodes)))
        t0 = time.monotonic()
        res = cluster.up(work / "state", fleet_file, BASE_PORT, say=lambda _m: None,
                         health_service=False)  # fmt: skip
        _set_scrape_interval(res.state, 60)
        print(f"cluster of {args.nodes} nodes up in {time.monotonic() - t0:.1f}s", flush=True)
        try:
            state = res.state
            prometheus = f"http://127.0.0.1:{state.ports.prometheus}"
            settled = wait_settled(prometheus, args.nodes, least=120, most=900)
            print(f"exporters settled after {settled:.0f}s", flush=True)
            results["settled_s"] = round(settled)
            api = kube.api_client(state.kubeconfig)
            names = sorted(n.metadata.name for n in client.CoreV1Api(api).list_node().items)
            proc = subprocess.Popen(
                [sys.executable, __file__, "--nodes", str(args.nodes), "--seconds",
                 str(args.seconds), "--child", str(state.kubeconfig), prometheus],
                stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            assert proc.stdout is not None
            stop = threading.Event()
            churner: threading.Thread | None = None
            for line in proc.stdout:
                data = json.loads(line)
                print(line.strip(), flush=True)
                if data.get("phase") == "churn" and data.get("ready"):
                    churner = threading.Thread(target=churn, args=(api, names, 50, stop))
                    churner.start()
                elif data.get("phase") == "churn":
                    stop.set()
                if not data.get("ready"):
                    results[data.pop("phase", "first_paint")] = data
            proc.wait()
            stop.set()
            if churner:
                churner.join()
        finally:
            cluster.down(work / "state")
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()

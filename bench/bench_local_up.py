"""Benchmark: warm `gridloop local up` to all nodes Ready, against a plain client loop.

For each fleet size, in the same run and on the same machine:

- gridloop: `cluster.up()` with the fleet (binaries already built): control
  plane start, concurrent node creation, wait until every node is Ready
  (without the GPU-health processes: this measures the cluster and its fleet);
- baseline: the same control plane started with an empty fleet, then the same
  Node objects created one by one in a plain `kubernetes` client loop, then the
  same wait for Ready.

Also reports the control plane's memory (resident set, and peak) once all
nodes are Ready. Usage:

    .venv/bin/python bench/bench_local_up.py [--nodes 24 5000] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
from pathlib import Path

import yaml
from kubernetes import client

from gridloop import kube, versions
from gridloop.fleet import dump_fleet, generate_fleet, load_fleet, node_manifest, planned_nodes
from gridloop.local import cluster
from gridloop.local.kwok import nodes as simulated_nodes
from gridloop.local.state import State

REPO = Path(__file__).resolve().parents[1]
BASE_PORT = 28400  # below the ephemeral port range (32768+)


def _fleet_file(workdir: Path, nodes: int) -> Path:
    path = workdir / f"fleet-{nodes}.yaml"
    if nodes == 24:
        shutil.copyfile(REPO / "examples" / "fleets" / "default.yaml", path)
    else:
        path.write_text(dump_fleet(generate_fleet(nodes)))
    return path


def _empty_like(fleet_file: Path) -> Path:
    doc = yaml.safe_load(fleet_file.read_text())
    for site in doc["sites"]:
        for pool in site["pools"]:
            pool["nodes"] = 0
    out = fleet_file.with_name(fleet_file.stem + "-empty.yaml")
    out.write_text(yaml.safe_dump(doc))
    return out


def _memory(state: State) -> dict[str, dict[str, int]]:
    out = {}
    for proc in state.processes:
        fields = {}
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) // 1024  # MiB
        out[proc.name] = fields
    return out


def run_gridloop(workdir: Path, fleet_file: Path) -> dict[str, object]:
    state_dir = workdir / "state-gridloop"
    t0 = time.monotonic()
    res = cluster.up(state_dir, fleet_file, BASE_PORT, say=lambda _m: None, gpu_health=False)
    total = time.monotonic() - t0
    mem = _memory(res.state)
    cluster.down(state_dir, purge=True)
    return {
        "total_s": round(total, 2),
        "control_plane_s": round(res.started_seconds, 2),
        "nodes_ready_after_start_s": round(total - res.started_seconds, 2),
        "memory_mib": mem,
    }


def run_baseline(workdir: Path, fleet_file: Path) -> dict[str, object]:
    state_dir = workdir / "state-baseline"
    fleet = load_fleet(fleet_file)
    t0 = time.monotonic()
    res = cluster.up(
        state_dir, _empty_like(fleet_file), BASE_PORT, say=lambda _m: None, gpu_health=False
    )
    started = time.monotonic() - t0
    core = client.CoreV1Api(kube.api_client(res.state.kubeconfig))
    t1 = time.monotonic()
    for planned in planned_nodes(fleet):
        core.create_node(body=node_manifest(planned))
    created = time.monotonic() - t1
    simulated_nodes.wait_ready(
        kube.api_client(res.state.kubeconfig), fleet.node_count, timeout=60 + fleet.node_count / 10
    )
    total = time.monotonic() - t0
    mem = _memory(res.state)
    cluster.down(state_dir, purge=True)
    return {
        "total_s": round(total, 2),
        "control_plane_s": round(started, 2),
        "create_loop_s": round(created, 2),
        "nodes_ready_after_start_s": round(total - started, 2),
        "memory_mib": mem,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[24, 5000])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results: dict[str, object] = {
        "machine": f"{platform.node()} {platform.machine()} {_cpus()} cores, {_mem_gib()} GiB",
        "kubernetes": versions.get("kubernetes").version,
        "runs": [],
    }
    with tempfile.TemporaryDirectory(prefix="gridloop-bench-") as tmp:
        workdir = Path(tmp)
        for nodes in args.nodes:
            fleet_file = _fleet_file(workdir, nodes)
            for i in range(args.repeat):
                g = run_gridloop(workdir, fleet_file)
                b = run_baseline(workdir, fleet_file)
                row = {"nodes": nodes, "repeat": i, "gridloop": g, "baseline": b}
                results["runs"].append(row)  # type: ignore[union-attr]
                _print(row)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


def _print(row: dict) -> None:
    g, b = row["gridloop"], row["baseline"]
    print(
        f"{row['nodes']:>6} nodes | gridloop up {g['total_s']:>7.2f}s "
        f"(control plane {g['control_plane_s']:.2f}s, "
        f"nodes Ready +{g['nodes_ready_after_start_s']:.2f}s)"
        f" | plain loop {b['total_s']:>7.2f}s (create loop {b['create_loop_s']:.2f}s, "
        f"nodes Ready +{b['nodes_ready_after_start_s']:.2f}s)",
        flush=True,
    )


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


def _mem_gib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 1024 / 1024)
    return 0


if __name__ == "__main__":
    main()

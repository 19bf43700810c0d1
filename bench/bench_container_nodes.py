"""Benchmark: what the container nodes cost, side by side in one run.

- `local up` (to all nodes Ready, registry, images pushed, kube-proxy and CoreDNS
  serving) of the default fleet, against the same fleet without its `containerNodes`
  block (kwok only), alternating A B A B; and `local down` of each. The binaries and
  images are built before the first run (warm), so this measures starting, not building.
- the images: a cold build (an empty buildah storage, image stamps and registry, with
  the binary cache shared) against a warm one (everything cached), and the size of
  gridloop's image (unpacked, and what a node pulls: its compressed layers).
- the memory (resident set) of each container-node process after `up`.

Usage (as root, with the binaries built: `gridloop local build`):

    .venv/bin/python bench/bench_container_nodes.py [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from gridloop import paths
from gridloop.local import cluster
from gridloop.local.build import building
from gridloop.local.build.images import gridloop_image, pushing, registry

REPO = Path(__file__).resolve().parents[1]
BASE_PORT = 28500  # below the ephemeral port range (32768+)
CONTAINER_PROCESSES = ("registry", "containerd/", "kubelet/", "kube-proxy")


def _fleets(workdir: Path) -> tuple[Path, Path]:
    with_nodes = workdir / "default.yaml"
    shutil.copyfile(REPO / "examples" / "fleets" / "default.yaml", with_nodes)
    doc = yaml.safe_load(with_nodes.read_text())
    doc.pop("containerNodes", None)
    kwok_only = workdir / "kwok-only.yaml"
    kwok_only.write_text(yaml.safe_dump(doc, sort_keys=False))
    return with_nodes, kwok_only


def _rss_mib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    return 0


def one_cycle(workdir: Path, fleet: Path, name: str) -> dict[str, object]:
    state_dir = workdir / f"state-{name}"
    t0 = time.monotonic()
    res = cluster.up(state_dir, fleet, BASE_PORT, say=lambda _m: None, health_service=False)
    up_s = time.monotonic() - t0
    memory = {
        p.name: _rss_mib(p.pid)
        for p in res.state.processes
        if p.name.startswith(CONTAINER_PROCESSES)
    }
    t1 = time.monotonic()
    down = cluster.down(state_dir, purge=True)
    down_s = time.monotonic() - t1
    if down.left:
        raise SystemExit(f"{name}: down left {down.left.describe()}")
    return {"up_s": round(up_s, 2), "down_s": round(down_s, 2), "rss_mib": memory}


def images_cold_and_warm(workdir: Path) -> dict[str, object]:
    """Build every image in a cache whose binaries are the real cache's (links) and whose
    buildah storage, image stamps and registry are empty: cold; then again: warm."""
    real = paths.cache_root()
    cold = workdir / "cache"
    cold.mkdir()
    for entry in real.iterdir():
        if entry.name not in ("buildah", "images", "registry"):
            (cold / entry.name).symlink_to(entry)
    binaries = {name: building.binary(name) for name in pushing.BINARIES}
    os.environ["GRIDLOOP_CACHE"] = str(cold)
    try:
        t0 = time.monotonic()
        pushing.build_all(binaries)
        cold_s = time.monotonic() - t0
        t1 = time.monotonic()
        pushing.build_all(binaries)
        warm_s = time.monotonic() - t1
        size = gridloop_image.size(gridloop_image.image_ref())
    finally:
        os.environ.pop("GRIDLOOP_CACHE")
        subprocess.run(["rm", "-rf", str(cold / "buildah")], check=False)
    return {"cold_s": round(cold_s, 1), "warm_s": round(warm_s, 1), "gridloop_unpacked": size}


def pulled_size(workdir: Path, fleet: Path) -> int:
    """What a node downloads for gridloop's image, from the local registry's manifest."""
    state_dir = workdir / "state-size"
    res = cluster.up(state_dir, fleet, BASE_PORT, say=lambda _m: None, health_service=False)
    try:
        return registry.pulled_bytes(res.state.ports.registry, gridloop_image.image_ref())
    finally:
        cluster.down(state_dir, purge=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("container nodes need root")
    results: dict[str, object] = {
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores",
        "runs": [],
    }
    with tempfile.TemporaryDirectory(prefix="gridloop-bench-") as tmp:
        workdir = Path(tmp)
        with_nodes, kwok_only = _fleets(workdir)
        # warm everything once (binaries, images, registry) before measuring
        one_cycle(workdir, with_nodes, "warm-up")
        runs: list[dict[str, object]] = []
        for i in range(args.repeat):
            a = one_cycle(workdir, with_nodes, f"with-{i}")
            b = one_cycle(workdir, kwok_only, f"kwok-{i}")
            runs.append({"with_container_node": a, "kwok_only": b})
            print(json.dumps(runs[-1]), flush=True)
        results["runs"] = runs
        for key in ("up_s", "down_s"):
            for side in ("with_container_node", "kwok_only"):
                values = [float(r[side][key]) for r in runs]  # type: ignore[index]
                results[f"{side}_{key}_median"] = statistics.median(values)
        results["images"] = images_cold_and_warm(workdir)
        results["gridloop_image_pulled_bytes"] = pulled_size(workdir, with_nodes)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

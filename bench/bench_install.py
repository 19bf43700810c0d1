"""Benchmark: `gridloop install --profile local --wait` to all-ready with real pods (the
chart's controllers and health service on a container node) against the same on a
kwok-only cluster (every pod a kwok fiction, ready as soon as it is scheduled).

Two clusters run side by side: the default fleet (one container node) and the same
fleet without its `containerNodes` block (only one cluster may have container nodes; a
kwok-only one may run beside it). On the kwok-only one the values undo the local
profile's Kueue and its pinning to container nodes, as tests/cluster/
test_installer_fresh_cluster.py does. One cycle is: install --wait (timed by the
script itself), then `gridloop uninstall` and the deletion of the namespaces uninstall
keeps, so the next cycle installs from clean again.

    python bench/bench_install.py setup            # start both clusters, bundle
    python bench/bench_install.py cycle real|kwok  # one cycle, prints the install's seconds
    python bench/bench_install.py teardown         # stop both

For the side-by-side figure, farm-bench runs the cycles in pairs:

    farm-bench -n 5 --timeout 1800 -- .venv/bin/python bench/bench_install.py cycle real \\
        --vs '.venv/bin/python bench/bench_install.py cycle kwok'
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from gridloop.fleet import GPU_TOLERATION

REPO = Path(__file__).resolve().parents[1]
WORK = Path(os.environ.get("GRIDLOOP_BENCH_DIR", "/tmp/gridloop-bench-install"))
GRIDLOOP = str(Path(sys.executable).parent / "gridloop")
CLUSTERS = {"real": 28500, "kwok": 28600}
KEPT = ("gridloop-system", "team-default", "agents", "agent-sandbox-system", "kueue-system")
KWOK_ONLY = {
    "kueue": {"enabled": False},
    # the only nodes are the simulated GPU nodes, tainted as a cloud's GPU pool is
    "systemNodes": {
        "nodeSelector": {"gridloop.io/container-node": None},
        "tolerations": [GPU_TOLERATION],
    },
}


def _state(name: str) -> Path:
    return WORK / f"state-{name}"


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([GRIDLOOP, *args], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"gridloop {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done


def setup() -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    fleet = yaml.safe_load((REPO / "examples" / "fleets" / "default.yaml").read_text())
    (WORK / "real.yaml").write_text(yaml.safe_dump(fleet, sort_keys=False))
    fleet.pop("containerNodes")
    (WORK / "kwok.yaml").write_text(yaml.safe_dump(fleet, sort_keys=False))
    (WORK / "kwok-values.yaml").write_text(yaml.safe_dump(KWOK_ONLY, sort_keys=False))
    for name, port in CLUSTERS.items():
        _run(
            "local", "up", "--state-dir", str(_state(name)), "--base-port", str(port),
            "--fleet", str(WORK / f"{name}.yaml"),
        )  # fmt: skip
    _run("bundle", "--skip", "kaito", "--skip", "dcgm-exporter", "--out", str(WORK / "dist"))


def cycle(name: str) -> float:
    kubeconfig = str(_state(name) / "kubeconfig")
    env = dict(os.environ, KUBECONFIG=kubeconfig)
    values = ["-f", str(WORK / "kwok-values.yaml")] if name == "kwok" else []
    t0 = time.monotonic()
    _run(
        "install", "--chart", str(WORK / "dist" / "gridloop"), "--profile", "local", *values,
        "--wait", "--timeout", "5m", "--kubeconfig", kubeconfig, env=env,
    )  # fmt: skip
    took = time.monotonic() - t0
    _run("uninstall", "--kubeconfig", kubeconfig, env=env)
    kubectl = str(_state(name) / "bin" / "kubectl")
    subprocess.run(
        [kubectl, "delete", "namespace", "--ignore-not-found", "--wait", *KEPT],
        capture_output=True,
        env=env,
        check=True,
    )
    print(f"{name}: install --wait {took:.1f}s", flush=True)
    return took


def teardown() -> None:
    for name in CLUSTERS:
        subprocess.run([GRIDLOOP, "local", "down", "--state-dir", str(_state(name))], check=False)


if __name__ == "__main__":
    match sys.argv[1:]:
        case ["setup"]:
            setup()
        case ["cycle", ("real" | "kwok") as which]:
            cycle(which)
        case ["teardown"]:
            teardown()
        case _:
            sys.exit(__doc__)

"""Benchmark: the learning loop's full run, held-out pass@1 by iteration.

Runs `gridloop loop run` for `--iterations` on a running local cluster whose release
serves the tiny model (docs/loop.md's steps: the bundle installed with the local profile
and examples/inference/tiny-cpu.yaml, revision r1 pushed), and reports, per iteration,
the attempts, the train pass@1 of the collect phase, the held-out pass@1 of the revision
served at its start and of the candidate it trained, the outcome, and the wall time of
each phase; beside them, the held-out pass@1 of the first revision served (the baseline,
measured in the same run on the same tasks with the same sampling seeds). Everything is
real but the GPUs: the model is a tiny random-weight Llama on vLLM's CPU build, the
sandboxes run under gVisor on the container node, training is a RayJob Kueue admits.

    eval "$(gridloop local env --state-dir /tmp/tstate)"
    .venv/bin/python bench/bench_loop.py --state-dir /tmp/tstate --run bench-1 \\
        --tasks 200 --iterations 3 --json /tmp/bench-loop.json --out docs/images/loop

A run keeps its trajectories and revisions in the object store (s3://loop/RUN/,
s3://models/tiny/RUN-N/): a second bench needs another --run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GRIDLOOP = str(Path(sys.executable).parent / "gridloop")


def machine() -> dict[str, object]:
    memory = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            memory = int(line.split()[1]) // 1024
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "memory_mib": memory,
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--state-dir", type=Path, required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--tasks", type=int, default=200)
    p.add_argument("--seed", type=int, default=21)
    p.add_argument("--train-tasks", type=int, default=0)
    p.add_argument("--heldout-tasks", type=int, default=0)
    p.add_argument("--attempts", type=int, default=4)
    p.add_argument("--eval-attempts", type=int, default=2)
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--margin", type=float, default=0.05)
    p.add_argument("--json", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True, help="summary.md, summary.json, heldout.png")
    args = p.parse_args()

    kubeconfig = args.state_dir / "kubeconfig"
    if not kubeconfig.is_file():
        raise SystemExit(f"--state-dir {args.state_dir}: no local cluster there")
    if "AWS_ENDPOINT_URL" not in os.environ:
        raise SystemExit('the object store: eval "$(gridloop local env --state-dir DIR)" first')
    command = [
        GRIDLOOP, "loop", "run", "--run", args.run, "--iterations", str(args.iterations),
        "--tasks", str(args.tasks), "--seed", str(args.seed),
        "--train-tasks", str(args.train_tasks), "--heldout-tasks", str(args.heldout_tasks),
        "--attempts", str(args.attempts), "--eval-attempts", str(args.eval_attempts),
        "--epochs", str(args.epochs), "--workers", str(args.workers),
        "--margin", str(args.margin), "--kubeconfig", str(kubeconfig), "--out", str(args.out),
    ]  # fmt: skip
    print("$", " ".join(command[1:]), flush=True)
    t0 = time.monotonic()
    done = subprocess.run(command, text=True)
    wall = time.monotonic() - t0
    summary = json.loads((args.out / "summary.json").read_text())
    first = summary[0]["heldout_serving"] if summary else None
    result = {
        "command": " ".join(["gridloop", *command[1:]]),
        "exit_code": done.returncode,
        "machine": machine(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(time.time() - wall)),
        "wall_s": round(wall, 1),
        "baseline_heldout_pass": first,
        "iterations": summary,
    }
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nwall {wall:.0f}s; first revision's held-out pass@1: {first}")
    for r in summary:
        print(
            f"iteration {r['iteration']}: served {r['served_before']} "
            f"held-out {r['heldout_serving']}, candidate {r['candidate']} "
            f"{r['heldout_candidate']}, {r['outcome']}, served after {r['served_after']}"
        )
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())

"""`gridloop loop run`: the learning loop on an installed release (running.py), its
summary table and its plot of held-out pass rate by iteration."""

from __future__ import annotations

import argparse
import json
from dataclasses import fields
from pathlib import Path
from typing import Any

from gridloop.errors import UsageError


def register(sub: Any) -> None:
    p = sub.add_parser(
        "loop", help="the learning loop: collect in sandboxes, train a RayJob, evaluate, roll out"
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    run = verbs.add_parser(
        "run",
        help="run N iterations of collect -> train -> evaluate -> roll out (resumes a run)",
        description="Each iteration: the agent works the suite's train tasks in sandboxes "
        "against the served model; a RayJob queued by Kueue fine-tunes the serving revision "
        "on the passing attempts; the new revision is served as <model>-candidate and "
        "evaluated on the held-out tasks; it replaces the serving revision behind the same "
        "Service only when it beats it by --margin. Everything is kept in the object store "
        "under s3://BUCKET/RUN/, so a re-run of the same --run goes on where it stopped.",
    )
    defaults = _defaults()
    run.add_argument("--run", default=defaults["run"], help="the run's name (default demo)")
    for name, help_text in (
        ("iterations", "iterations in all, counting those done before"),
        ("tasks", "the task suite's size (about a quarter is held out)"),
        ("seed", "the suite's and the sampling's seed"),
        ("train-tasks", "train tasks worked per iteration (0: all)"),
        ("heldout-tasks", "held-out tasks per evaluation (0: all)"),
        ("attempts", "samples per train task"),
        ("eval-attempts", "samples per held-out task"),
        ("workers", "sandboxes at a time"),
        ("epochs", "training epochs over the passing attempts"),
    ):
        key = name.replace("-", "_")
        run.add_argument(
            f"--{name}",
            type=int,
            default=defaults[key],
            help=f"{help_text} (default {defaults[key]})",
        )
    run.add_argument(
        "--temperature",
        type=float,
        default=defaults["temperature"],
        help=f"sampling temperature (default {defaults['temperature']})",
    )
    run.add_argument(
        "--margin",
        type=float,
        default=defaults["margin"],
        help="held-out pass@1 a candidate must gain to roll out, as a share "
        f"(default {defaults['margin']})",
    )
    for name, help_text in (
        ("model", "the served model (inference.models[].name)"),
        ("namespace", "the release's namespace"),
        ("release", "the release"),
        ("team-namespace", "where the training RayJob runs"),
        ("queue", "the team's LocalQueue"),
        ("sandbox-namespace", "the sandboxes' namespace"),
        ("warm-pool", "the SandboxWarmPool the agent claims sandboxes from"),
        ("router-namespace", "the sandbox router's namespace (agentSandbox.router.namespace)"),
        ("bucket", "the loop's bucket"),
        ("cluster-endpoint", "the object store's URL from pods"),
    ):
        key = name.replace("-", "_")
        run.add_argument(
            f"--{name}", default=defaults[key], help=f"{help_text} (default {defaults[key]})"
        )
    run.add_argument(
        "--secret",
        default="",
        help="the Secret in the team namespace with the training job's store keys "
        "(default: loop-RUN-s3, which on the local cluster is made for the run)",
    )
    run.add_argument(
        "--endpoint",
        default=None,
        help="the object store's URL from here (default: $AWS_ENDPOINT_URL)",
    )
    run.add_argument("--chart", default=None, help="the chart `gridloop upgrade` uses")
    run.add_argument("--kubeconfig", default=None, help="the cluster (default: $KUBECONFIG)")
    run.add_argument(
        "--timeout",
        type=float,
        default=defaults["timeout_s"],
        help="seconds a cluster phase may take (default 900)",
    )
    run.add_argument(
        "--candidate-timeout",
        type=float,
        default=defaults["candidate_timeout_s"],
        help="seconds the candidate's server may take to be ready (default 300)",
    )
    run.add_argument(
        "--out",
        type=Path,
        default=None,
        help="write summary.md, summary.json and heldout.png into this folder",
    )
    run.set_defaults(func=cmd_run)


def _defaults() -> dict[str, Any]:
    from gridloop.loop.running import Settings

    return {f.name: f.default for f in fields(Settings)}


def cmd_run(args: argparse.Namespace) -> int:
    from gridloop.loop import deciding
    from gridloop.loop.running import Loop, Settings

    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out: {args.out} is not a folder")
    values = {f.name: getattr(args, f.name) for f in fields(Settings) if hasattr(args, f.name)}
    values["timeout_s"] = args.timeout
    values["candidate_timeout_s"] = args.candidate_timeout
    settings = Settings(**values)
    records = Loop(settings, say=lambda line: print(line, flush=True)).run()
    table = deciding.summary_table(records)
    print()
    print(table)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "summary.md").write_text(table + "\n")
        (args.out / "summary.json").write_text(
            json.dumps([r.to_json() for r in records], indent=1) + "\n"
        )
        plot(records, args.out / "heldout.png", settings.run)
        print(f"wrote {args.out}/summary.md, summary.json, heldout.png")
    return 1 if records and records[-1].outcome == "stopped" else 0


def plot(records: list[Any], path: Path, run: str) -> None:
    """Held-out pass@1 of the revision served at the start of each iteration and of its
    candidate, with chance (one in four) drawn across."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
    xs = [r.iteration for r in records]
    served = [r.heldout_serving for r in records]
    cand = [r.heldout_candidate for r in records]
    ax.plot(
        xs,
        [v if v is not None else float("nan") for v in served],
        "o-",
        label="served at the start",
    )
    ax.plot(
        xs,
        [v if v is not None else float("nan") for v in cand],
        "s--",
        label="candidate trained in the iteration",
    )
    for r in records:
        if r.outcome == "promoted" and r.heldout_candidate is not None:
            ax.annotate(
                "rolled out",
                (r.iteration, r.heldout_candidate),
                textcoords="offset points",
                xytext=(0, 8),
                ha="center",
                fontsize=8,
            )
    ax.axhline(0.25, color="grey", linewidth=0.8, linestyle=":", label="chance (1 in 4)")
    ax.set_xlabel("iteration")
    ax.set_ylabel("held-out pass@1")
    ax.set_ylim(0, 1)
    ax.set_xticks(xs)
    if xs:
        ax.set_xlim(min(xs) - 0.4, max(xs) + 0.4)  # room for the labels at the ends
    ax.set_title(f"gridloop loop run --run {run}")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)

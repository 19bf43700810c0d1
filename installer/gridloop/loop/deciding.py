"""The loop's decisions and records (pure): which revision comes next, how the chart's
model list changes for a candidate and a rollout, whether a candidate is promoted, and
the per-iteration summary the command prints and stores.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import Any

from gridloop.loop.trajectories import PassRate

CANDIDATE_SUFFIX = "-candidate"


class ValuesError(ValueError):
    """The release's values do not serve the loop's model; names the field."""


def revision_name(root: str) -> str:
    """`s3://models/tiny/r1/` -> `r1` (the last path segment of a served root)."""
    name = root.rstrip("/").rsplit("/", 1)[-1]
    if not name or "://" in name:
        raise ValuesError(f"model root: {root!r} names no revision folder")
    return name


def sibling_uri(root: str, name: str) -> str:
    """The weights folder of revision `name` beside the served `root`."""
    return f"{root.rstrip('/').rsplit('/', 1)[0]}/{name}/"


def next_revision(run: str, iteration: int) -> str:
    return f"{run}-{iteration}"


def candidate_name(model: str) -> str:
    return f"{model}{CANDIDATE_SUFFIX}"


def _models(values: dict[str, Any], model: str) -> tuple[list[dict[str, Any]], int]:
    models = (values.get("inference") or {}).get("models")
    if not isinstance(models, list):
        raise ValuesError("inference.models: the release serves no models")
    for i, entry in enumerate(models):
        if isinstance(entry, dict) and entry.get("name") == model:
            return models, i
    names = [e.get("name") for e in models if isinstance(e, dict)]
    raise ValuesError(f"inference.models: no model named {model!r} (there: {names})")


def with_candidate(values: dict[str, Any], model: str, revision: str) -> dict[str, Any]:
    """The release's values plus `<model>-candidate`: the model's entry, one replica, at
    `revision` (the serving entry is left as it is)."""
    out = copy.deepcopy(values)
    models, i = _models(out, model)
    entry = {**copy.deepcopy(models[i]), "name": candidate_name(model), "revision": revision}
    entry["replicas"] = 1
    kept = [m for m in models if not (isinstance(m, dict) and m.get("name") == entry["name"])]
    out["inference"]["models"] = [*kept, entry]
    return out


def without_candidate(
    values: dict[str, Any], model: str, revision: str | None = None
) -> dict[str, Any]:
    """The release's values without the candidate; the model at `revision` when given
    (a rollout), else as it was."""
    out = copy.deepcopy(values)
    models, i = _models(out, model)
    if revision is not None:
        models[i]["revision"] = revision
    name = candidate_name(model)
    out["inference"]["models"] = [
        m for m in models if not (isinstance(m, dict) and m.get("name") == name)
    ]
    return out


@dataclass(frozen=True)
class Decision:
    promote: bool
    reason: str


def decide(serving: PassRate, candidate: PassRate, margin: float) -> Decision:
    """Promote when the candidate's held-out pass@1 beats the serving revision's by at
    least `margin` (a share: 0.05 is five points)."""
    if candidate.attempts == 0 or serving.attempts == 0:
        return Decision(False, "no held-out attempts to compare")
    gain = candidate.rate - serving.rate
    said = f"held-out pass@1 {candidate.rate:.1%} against {serving.rate:.1%} ({gain:+.1%})"
    if gain >= margin:
        return Decision(True, f"{said}: at least the margin of {margin:.1%}")
    return Decision(False, f"{said}: under the margin of {margin:.1%}")


@dataclass
class IterationRecord:
    """One iteration as the summary shows it; stored as JSON beside its trajectories."""

    iteration: int
    served_before: str  # revision name
    attempts: int = 0
    train_pass: float | None = None  # pass@1 of the collect phase (serving revision)
    heldout_serving: float | None = None
    candidate: str = ""  # the revision trained, "" if none
    heldout_candidate: float | None = None
    outcome: str = ""  # "promoted", "kept", or "stopped"
    reason: str = ""
    served_after: str = ""
    seconds: dict[str, float] = field(default_factory=dict)  # per phase

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> IterationRecord:
        return cls(**{k: doc[k] for k in cls.__dataclass_fields__ if k in doc})


PHASE_ORDER = ("collect", "baseline", "train", "candidate", "evaluate", "rollout")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def summary_table(records: list[IterationRecord]) -> str:
    """A Markdown table: one row per iteration."""
    head = (
        "| iteration | served | attempts | train pass@1 | held-out pass@1 (served) | "
        "candidate | held-out pass@1 (candidate) | outcome | served after | "
        + " | ".join(f"{p} s" for p in PHASE_ORDER)
        + " |"
    )
    rule = "| " + " | ".join("---" for _ in range(9 + len(PHASE_ORDER))) + " |"
    rows = []
    for r in records:
        times = " | ".join(f"{r.seconds[p]:.0f}" if p in r.seconds else "-" for p in PHASE_ORDER)
        rows.append(
            f"| {r.iteration} | {r.served_before} | {r.attempts} | {_pct(r.train_pass)} | "
            f"{_pct(r.heldout_serving)} | {r.candidate or '-'} | {_pct(r.heldout_candidate)} | "
            f"{r.outcome}{': ' + r.reason if r.outcome != 'promoted' and r.reason else ''} | "
            f"{r.served_after or '-'} | {times} |"
        )
    return "\n".join([head, rule, *rows])

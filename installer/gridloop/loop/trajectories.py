"""What one attempt at a failing build leaves behind, and what a set of them says (pure).

An attempt is one sample from the served model for one task: the prompt it was shown
(the failing file, the test's output, four candidate lines), the text it answered, the
line that answer put in, and what the task's test said afterwards in the sandbox. Its
reward is the test's verdict only (1.0 when the test passed after the patch, else 0.0):
the task's known fix is never read to score an attempt.

Attempts are stored as JSON lines, one object per task and phase: the train side's at
``<run>/iteration-<n>/collect/<task id>.jsonl`` (read by the iteration's training RayJob),
the held-out side's at ``<run>/evaluate/<revision>/<task id>.jsonl``. A re-run skips the
tasks whose object is already there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from gridloop import names

SPLITS = ("train", "heldout")
_RUN = re.compile(names.RUN_NAME)
# what every stored line must carry for training and summaries to read it
REQUIRED = ("task_id", "split", "attempt", "revision", "prompt", "completion", "reward")


class TrajectoryError(ValueError):
    """A stored line that is not an attempt; names the field."""


@dataclass(frozen=True)
class Attempt:
    task_id: str
    split: str  # "train" or "heldout"
    family: str
    attempt: int  # 0-based, per task and phase
    revision: str  # the weights the model served, e.g. s3://models/tiny/r1/
    temperature: float
    prompt: str
    completion: str  # the model's text, as sampled
    choice: int  # the candidate it named, -1 when it named none
    patched_line: str  # "" when nothing was applied
    reward: float  # 1.0 when the task's test passed after the patch
    test_exit_code: int  # -1 when the test did not run after the patch
    test_output: str  # the test's output after the patch (its last 2,000 characters)
    error: str = ""  # why no patch was applied ("" when one was)
    sandbox: str = ""  # the claim the attempt ran in
    seconds: dict[str, float] = field(default_factory=dict)  # model, test, total

    def line(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def collect_key(run: str, iteration: int, task_id: str) -> str:
    """Where a task's attempts on the train side of an iteration go in the loop's bucket."""
    return f"{collect_prefix(run, iteration)}{task_id}.jsonl"


def collect_prefix(run: str, iteration: int) -> str:
    return f"{run}/iteration-{iteration}/collect/"


def evaluate_key(run: str, revision: str, task_id: str) -> str:
    """Where a revision's held-out attempts go: by revision, not iteration, so the serving
    revision is evaluated once (as a candidate, or as the first revision served)."""
    return f"{evaluate_prefix(run, revision)}{task_id}.jsonl"


def evaluate_prefix(run: str, revision: str) -> str:
    return f"{run}/evaluate/{revision}/"


def check_run_name(run: str) -> str:
    """A run's name is a path segment and a label value: 1-40 of a-z, 0-9 and '-'."""
    if not isinstance(run, str) or not _RUN.match(run):
        raise TrajectoryError(
            f"run: {run!r} must be 1 to 40 lower-case letters, digits or '-', "
            "starting and ending with a letter or digit"
        )
    return run


def parse_lines(text: str, where: str) -> list[dict[str, Any]]:
    """The attempts of one stored object; a line that is not one names its place."""
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as err:
            raise TrajectoryError(f"{where}:{number}: not JSON ({err.msg})") from None
        if not isinstance(record, dict):
            raise TrajectoryError(f"{where}:{number}: not a JSON object")
        missing = [key for key in REQUIRED if key not in record]
        if missing:
            raise TrajectoryError(f"{where}:{number}: {missing[0]}: missing")
        if record["split"] not in SPLITS:
            split = record["split"]
            raise TrajectoryError(f"{where}:{number}: split: {split!r} is not one of {SPLITS}")
        if record["reward"] not in (0, 1, 0.0, 1.0):
            raise TrajectoryError(f"{where}:{number}: reward: {record['reward']!r} is not 0 or 1")
        out.append(record)
    return out


@dataclass(frozen=True)
class PassRate:
    attempts: int
    passed: int
    tasks: int
    tasks_solved: int  # tasks with at least one passing attempt

    @property
    def rate(self) -> float:
        """pass@1 over attempts: the share of single samples that fixed their build."""
        return self.passed / self.attempts if self.attempts else 0.0


def pass_rate(records: Iterable[dict[str, Any]]) -> PassRate:
    attempts = passed = 0
    solved: dict[str, bool] = {}
    for record in records:
        attempts += 1
        ok = float(record["reward"]) == 1.0
        passed += ok
        solved[record["task_id"]] = solved.get(record["task_id"], False) or ok
    return PassRate(attempts, passed, len(solved), sum(solved.values()))


def by_split(records: Sequence[dict[str, Any]]) -> dict[str, PassRate]:
    return {split: pass_rate(r for r in records if r["split"] == split) for split in SPLITS}

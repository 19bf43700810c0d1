"""From the model's answer to a changed repository.

The model answers a task's prompt with a letter (A to D, build_tasks.LETTERS); a sampled
answer may carry spaces, a closing parenthesis or more text after it. ``parse_choice``
takes the first letter that stands alone; an answer without one is a ``PatchError`` (the
attempt is recorded with reward 0 and that reason). ``apply_choice`` replaces the
failing line with the chosen candidate and returns the repository's files: the agent
writes them into the sandbox and runs the test there. Pure.
"""

from __future__ import annotations

import re

from gridloop.loop.build_tasks import LETTERS, Task

_CHOICE = re.compile(rf"(?<![A-Za-z])([{LETTERS}])(?![A-Za-z])")


class PatchError(ValueError):
    """The model's answer names no candidate."""


def parse_choice(answer: str) -> int:
    """The index of the candidate `answer` names: its first standalone letter A to D."""
    found = _CHOICE.search(answer.strip().upper())
    if found is None:
        shown = answer.strip()[:40]
        raise PatchError(f"answer: names no candidate (A to D): {shown!r}")
    return LETTERS.index(found.group(1))


def apply_choice(task: Task, index: int) -> dict[str, str]:
    """The task's files with its failing line replaced by candidate `index`."""
    if not 0 <= index < len(task.candidates):
        raise PatchError(f"answer: candidate {index} is not one of 0 to {len(task.candidates) - 1}")
    lines = task.files[task.module].splitlines()
    lines[task.line - 1] = task.candidates[index]
    return {**task.files, task.module: "\n".join(lines) + "\n"}

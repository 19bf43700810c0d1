"""The learning loop: `gridloop loop run` (docs/loop.md).

What decides, pure: ``build_tasks`` generates the failing builds the agent fixes (small
Python repositories, each with one bug from a few families and a test that catches it,
split into a train and a held-out set by a seed); ``patching`` turns the model's answer
into a changed repository; ``trajectories`` is what an attempt records and where it is
stored; ``deciding`` is the next revision, the chart values of a candidate and a
rollout, and the promotion by margin; ``training_job`` is the RayJob that trains.

What acts: ``agent`` runs attempts in claimed sandboxes against the served model;
``store`` reads and writes the object store; ``running`` drives the phases; ``commands``
is the CLI. ``train_revision`` is the program the training RayJob runs in the trainer
image (it imports no gridloop).
"""

from gridloop.loop.build_tasks import (
    FAMILIES,
    Suite,
    Task,
    TaskSuiteError,
    make_suite,
    split_of,
)
from gridloop.loop.patching import PatchError, apply_choice, parse_choice

__all__ = [
    "FAMILIES",
    "PatchError",
    "Suite",
    "Task",
    "TaskSuiteError",
    "apply_choice",
    "make_suite",
    "parse_choice",
    "split_of",
]

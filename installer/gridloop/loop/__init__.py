"""The learning loop's pieces that decide, apart from the cluster that runs them.

``build_tasks`` generates the failing builds the loop's agent fixes: small Python
repositories, each with one bug from a few families and a test that catches it, split
into a train and a held-out set by a seed. ``patching`` turns the model's answer into a
changed repository; nothing here runs code or talks to the cluster (the agent runs the
tests in a sandbox).
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

"""Every file under examples/ is used by a test: an example no test runs is already broken
(the container-nodes example did not parse for two days while the README told users to
apply it). A test names the examples it runs with `example("dir/file")` (tests/examples.py)."""

from __future__ import annotations

import re
from pathlib import Path

from examples import EXAMPLES

TESTS = Path(__file__).resolve().parents[1]
USE = re.compile(r"""\bexample\(\s*["']([^"']+)["']\s*\)""")


def used_examples() -> dict[str, set[str]]:
    """Each example path named by an `example(...)` call, with the test files naming it."""
    used: dict[str, set[str]] = {}
    for path in TESTS.rglob("*.py"):
        if path.name in ("examples.py", "test_examples.py"):
            continue  # their docstrings show the call
        for name in USE.findall(path.read_text()):
            used.setdefault(name, set()).add(str(path.relative_to(TESTS)))
    return used


def test_every_example_is_used_by_a_test() -> None:
    files = {
        str(p.relative_to(EXAMPLES))
        for p in EXAMPLES.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    unused = sorted(files - set(used_examples()))
    assert not unused, f"examples no test runs (name them with example(...)): {unused}"


def test_every_example_a_test_names_exists() -> None:
    missing = sorted(n for n in used_examples() if not (EXAMPLES / n).is_file())
    assert not missing, f"tests name examples that do not exist: {missing}"

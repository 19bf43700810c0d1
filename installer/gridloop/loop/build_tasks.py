"""Failing builds for the loop's agent to fix: generated, seeded, split once.

Each task is a repository of two files: a module with one function whose one line holds a
bug, and a unittest file that fails because of it. The bug comes from one of five families
(``FAMILIES``), the kinds a CI-fixing agent meets most in small diffs: a wrong constant, an
off-by-one loop bound, swapped arguments, a wrong comparison, a wrong arithmetic operator.
Names, constants and test values are drawn from a ``random.Random`` seeded by the suite's
seed and the task's index, so a suite is the same on every machine.

The action space is small enough for a tiny model to learn on one machine: the agent is
shown the failing file with line numbers, the test's output and four candidate lines for
the failing line (labelled A to D), and answers with a letter. Exactly one candidate makes
the test pass; the three others are drawn from the same family (other bounds, constants,
orders or operators) and each fails the task's test (the unit tests run every one). The
buggy line itself is never a candidate, so "change nothing" is not an answer.

Train and held-out sets are split by a hash of the seed and the task's id
(``split_of``); no two tasks of a suite have the same files, so a held-out task is never
a copy of a train task: it is another instance of the same families (other names,
constants, values and bug), which is what the loop's evaluation measures.

Pure: no file is written and nothing is run here.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

FAMILIES = (
    "wrong-constant",
    "off-by-one",
    "swapped-arguments",
    "wrong-comparison",
    "wrong-arithmetic",
)
LETTERS = "ABCD"
MAX_TASKS = 100_000
FAILURE_CHARS = 300  # of the test's output, in a prompt
_ERROR_LINE = re.compile(r"^[A-Za-z_.]*(Error|Exception)\b")
_DRAWS = 50  # attempts at a task whose files no earlier task has, before giving up

_NOUNS = (
    "price", "score", "weight", "speed", "level", "amount", "size", "depth", "rate",
    "height", "budget", "volume", "load", "margin", "stock", "quota",
)  # fmt: skip
_LISTS = ("values", "items", "prices", "scores", "weights", "samples", "readings", "points")
_MODULES = ("calc", "rules", "units", "checks", "metrics", "billing", "limits", "stats")


class TaskSuiteError(ValueError):
    """A suite asked for with a bad count, seed or held-out share; names the field."""


@dataclass(frozen=True)
class Task:
    """One failing build: its files, the failing line, and the four answers offered."""

    id: str
    family: str
    module: str  # the module's file name, e.g. "calc.py"
    files: dict[str, str] = field(hash=False)  # the repository: module and test file
    line: int  # 1-based line of the bug in `module`
    buggy: str  # that line as the repository has it
    fix: str  # the line that makes the test pass
    candidates: tuple[str, str, str, str]  # the fix and three wrong lines, shuffled

    @property
    def answer(self) -> str:
        """The letter of the fix among the candidates."""
        return LETTERS[self.candidates.index(self.fix)]

    @property
    def test_file(self) -> str:
        return next(name for name in self.files if name.startswith("test_"))

    @property
    def test_command(self) -> str:
        return f"python3 -m unittest -v {self.test_file.removesuffix('.py')}"

    def prompt(self, test_output: str) -> str:
        """What the model is shown: the file with line numbers, the test's failure (the
        failing assertion and the error, ``failure_of``) and the four candidates; it answers
        with one letter."""
        numbered = "\n".join(
            f"{n:>3} {text}" for n, text in enumerate(self.files[self.module].splitlines(), 1)
        )
        offered = "\n".join(f"{LETTERS[i]}) {c.strip()}" for i, c in enumerate(self.candidates))
        return (
            f"The test {self.test_file} fails.\n"
            f"--- {self.module}\n{numbered}\n"
            f"--- test failure\n{failure_of(test_output)}\n"
            f"--- replace line {self.line} with\n{offered}\n"
            "Answer:"
        )


def failure_of(test_output: str, limit: int = FAILURE_CHARS) -> str:
    """The lines of a unittest run that say what failed: each failing assertion's source
    line and the error after it (``AssertionError: 7168 != 7000``), without the banners,
    the traceback's file paths (a sandbox's, not the task's) or the timing. The output's
    tail when it has none of those (a crash); at most `limit` characters either way."""
    kept = [
        line.strip()
        for line in test_output.splitlines()
        if line.strip().startswith("self.assert") or _ERROR_LINE.match(line)
    ]
    text = "\n".join(kept) if kept else test_output.strip()
    return text[-limit:]


@dataclass(frozen=True)
class Suite:
    seed: int
    heldout_share: float
    train: tuple[Task, ...]
    heldout: tuple[Task, ...]


@dataclass(frozen=True)
class _Draft:
    """A family's output before the suite names and shuffles it."""

    module_lines: list[str]
    line: int  # 0-based index of the line with the bug
    fix: str
    bug: str
    wrong: list[str]  # at least three wrong lines, none equal to fix or bug
    test: str


def make_suite(count: int, seed: int, heldout_share: float = 0.25) -> Suite:
    """`count` tasks, the families taken in turn, split into train and held-out."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_TASKS:
        raise TaskSuiteError(f"count: must be an integer from 1 to {MAX_TASKS}, got {count!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise TaskSuiteError(f"seed: must be an integer >= 0, got {seed!r}")
    if not isinstance(heldout_share, float | int) or not 0 < heldout_share < 1:
        raise TaskSuiteError(
            "heldout_share: must be a number between 0 and 1 (both excluded), "
            f"got {heldout_share!r}"
        )
    seen: set[str] = set()
    tasks = [_task(seed, i, seen) for i in range(count)]
    sides = [split_of(t.id, seed, heldout_share) for t in tasks]
    train = tuple(t for t, side in zip(tasks, sides, strict=True) if side == "train")
    heldout = tuple(t for t, side in zip(tasks, sides, strict=True) if side == "heldout")
    return Suite(seed, float(heldout_share), train, heldout)


def split_of(task_id: str, seed: int, heldout_share: float) -> str:
    """'heldout' or 'train': a hash of the seed and the id, so a task's side never depends
    on which other tasks exist (growing a suite moves no task across)."""
    digest = hashlib.sha256(f"{seed}/{task_id}".encode()).digest()
    return "heldout" if int.from_bytes(digest[:8], "big") / 2**64 < heldout_share else "train"


def _task(seed: int, index: int, seen: set[str]) -> Task:
    family = FAMILIES[index % len(FAMILIES)]
    for attempt in range(_DRAWS):
        rng = random.Random(f"{seed}:{index}:{attempt}")
        draft = _DRAFTERS[family](rng)
        module = f"{rng.choice(_MODULES)}.py"
        lines = list(draft.module_lines)
        lines[draft.line] = draft.bug
        source = "\n".join(lines) + "\n"
        test = draft.test.replace("{module}", module.removesuffix(".py"))
        key = source + test
        if key in seen:
            continue
        seen.add(key)
        candidates = [draft.fix, *rng.sample(draft.wrong, 3)]
        rng.shuffle(candidates)
        return Task(
            id=f"{family}-{index:05d}",
            family=family,
            module=module,
            files={module: source, f"test_{module}": test},
            line=draft.line + 1,
            buggy=draft.bug,
            fix=draft.fix,
            candidates=(candidates[0], candidates[1], candidates[2], candidates[3]),
        )
    raise TaskSuiteError(f"count: no new {family} task after {_DRAWS} draws (suite too large)")


def _test(fn: str, cases: list[str]) -> str:
    body = "\n".join(f"        {c}" for c in cases)
    return (
        "import unittest\n\n"
        f"from {{module}} import {fn}\n\n\n"
        f"class {''.join(w.title() for w in fn.split('_'))}Test(unittest.TestCase):\n"
        f"    def test_{fn}(self):\n{body}\n\n\n"
        'if __name__ == "__main__":\n'
        "    unittest.main()\n"
    )


def _wrong_constant(rng: random.Random) -> _Draft:
    unit, into, factor = rng.choice(
        [
            ("minutes", "seconds", 60), ("hours", "minutes", 60), ("days", "hours", 24),
            ("weeks", "days", 7), ("kilometres", "metres", 1000), ("dozens", "eggs", 12),
            ("feet", "inches", 12), ("bytes", "bits", 8), ("hours", "seconds", 3600),
            ("kilograms", "grams", 1000), ("years", "months", 12), ("metres", "centimetres", 100),
        ]
    )  # fmt: skip
    fn = f"{into}_in_{unit}"
    others = [c for c in (7, 8, 10, 12, 24, 60, 100, 365, 1000, 1024, 3600) if c != factor]
    bug, *wrong = rng.sample(others, 5)
    n = rng.randint(2, 9)
    lines = [
        f"def {fn}({unit}):",
        f'    """How many {into} there are in {unit}."""',
        f"    return {unit} * {factor}",
    ]
    return _Draft(
        lines, 2, lines[2], f"    return {unit} * {bug}",
        [f"    return {unit} * {c}" for c in wrong],
        _test(fn, [f"self.assertEqual({fn}({n}), {n * factor})", f"self.assertEqual({fn}(0), 0)"]),
    )  # fmt: skip


def _off_by_one(rng: random.Random) -> _Draft:
    xs, k = rng.choice(_LISTS), rng.randint(2, 9)
    fn = rng.choice(("scaled_total", "weighted_sum", "sum_times", "total_of")) + f"_{k}"
    bounds = {
        "fix": f"range(len({xs}))",
        "short": f"range(len({xs}) - 1)",
        "late": f"range(1, len({xs}))",
        "long": f"range(len({xs}) + 1)",
        "shorter": f"range(len({xs}) - 2)",
        "later": f"range(2, len({xs}))",
    }
    loop = "    for i in {}:"
    # the bug drops values; the other wrong answers may also crash (past the end)
    bug = loop.format(bounds[rng.choice(("short", "late", "shorter", "later"))])
    wrong = [loop.format(b) for name, b in bounds.items() if name != "fix"]
    values = [rng.randint(1, 20) for _ in range(rng.randint(3, 6))]
    lines = [
        f"def {fn}({xs}):",
        f'    """The sum of all {xs}, each times {k}."""',
        "    result = 0",
        loop.format(bounds["fix"]),
        f"        result += {xs}[i] * {k}",
        "    return result",
    ]
    return _Draft(
        lines, 3, lines[3], bug, [w for w in wrong if w != bug],
        _test(fn, [f"self.assertEqual({fn}({values!r}), {sum(values) * k})"]),
    )  # fmt: skip


def _swapped_arguments(rng: random.Random) -> _Draft:
    noun = rng.choice(_NOUNS)
    low = rng.randint(0, 50)
    high = low + rng.randint(5, 50)
    fn = f"valid_{noun}"
    orders = [(low, high, noun), (high, low, noun), (noun, high, low), (high, noun, low),
              (low, noun, high), (noun, low, high)]  # fmt: skip
    calls = ["    return _between({}, {}, {})".format(*o) for o in orders]
    bug = rng.choice(calls[1:])
    lines = [
        "def _between(low, high, value):",
        "    return low <= value <= high",
        "",
        "",
        f"def {fn}({noun}):",
        f'    """Whether {noun} is from {low} to {high}."""',
        calls[0],
    ]
    mid = (low + high) // 2
    cases = [
        f"self.assertTrue({fn}({mid}))",
        f"self.assertTrue({fn}({low}))",
        f"self.assertFalse({fn}({high + 1}))",
        f"self.assertFalse({fn}({low - 1}))",
    ]
    return _Draft(lines, 6, calls[0], bug, [c for c in calls[1:] if c != bug], _test(fn, cases))


_OPERATORS = {
    ">=": lambda x, y: x >= y,
    ">": lambda x, y: x > y,
    "<=": lambda x, y: x <= y,
    "<": lambda x, y: x < y,
    "==": lambda x, y: x == y,
    "!=": lambda x, y: x != y,
}


def _wrong_comparison(rng: random.Random) -> _Draft:
    noun = rng.choice(_NOUNS)
    limit = rng.randint(3, 500)
    op, meaning = rng.choice(
        [(">=", "reaches"), (">", "exceeds"), ("<=", "stays within"), ("<", "stays below")]
    )
    fn = f"{noun}_{meaning.replace(' ', '_')}_{limit}"
    others = [o for o in _OPERATORS if o != op]
    bug, *wrong = rng.sample(others, 4)
    lines = [
        f"def {fn}({noun}):",
        f'    """Whether {noun} {meaning} {limit}."""',
        f"    return {noun} {op} {limit}",
    ]
    # two operators differ at one of limit - 1, limit, limit + 1: every wrong one fails
    cases = [
        f"self.assert{_OPERATORS[op](x, limit)}({fn}({x}))" for x in (limit - 1, limit, limit + 1)
    ]
    return _Draft(
        lines, 2, lines[2], f"    return {noun} {bug} {limit}",
        [f"    return {noun} {o} {limit}" for o in wrong], _test(fn, cases),
    )  # fmt: skip


_FORMULAS: tuple[tuple[str, str, str, str, Callable[[float], float]], ...] = (
    # name, docstring, the line's expression, the right operator, what wraps `a op b`
    ("average_of", "The average of {a} and {b}.", "({a} {op} {b}) / 2", "+", lambda v: v / 2),
    ("gap_between", "How far {a} is above {b}.", "{a} {op} {b}", "-", lambda v: v),
    ("area_of", "The area of a {a} by {b} rectangle.", "{a} {op} {b}", "*", lambda v: v),
    ("perimeter_of", "The perimeter of a {a} by {b} rectangle.", "2 * ({a} {op} {b})", "+",
     lambda v: 2 * v),
    ("share_of", "{a} split evenly {b} ways.", "{a} {op} {b}", "/", lambda v: v),
)  # fmt: skip
_ARITHMETIC: dict[str, Callable[[float, float], float]] = {
    "+": lambda x, y: x + y,
    "-": lambda x, y: x - y,
    "*": lambda x, y: x * y,
    "/": lambda x, y: x / y,
    "%": lambda x, y: x % y,
    "**": lambda x, y: x**y,
}


def _told_apart(
    outer: Callable[[float], float], op: str, pairs: list[tuple[int, int]], want: list[float]
) -> bool:
    """Whether the formula with `op` misses the wanted value for one of the inputs."""
    got = [outer(_ARITHMETIC[op](x, y)) for x, y in pairs]
    return any(abs(g - w) > 1e-6 for g, w in zip(got, want, strict=True))


def _wrong_arithmetic(rng: random.Random) -> _Draft:
    name, doc, formula, op, outer = rng.choice(_FORMULAS)
    a, b = rng.sample(("width", "height", "first", "second", "total", "parts", "x", "y"), 2)
    fn = f"{name}_{a}_{b}"
    # an operator is a wrong answer only if the test tells it apart from the right one:
    # draw test inputs until four operators are told apart
    while True:
        pairs = [(rng.randint(3, 9), rng.randint(2, 9)) for _ in range(2)]
        want = [outer(_ARITHMETIC[op](x, y)) for x, y in pairs]
        wrong_ops = [o for o in _ARITHMETIC if o != op and _told_apart(outer, o, pairs, want)]
        if len(wrong_ops) >= 4:
            break
    bug, *wrong = rng.sample(wrong_ops, 4)
    line = "    return " + formula.replace("{a}", a).replace("{b}", b)
    lines = [
        f"def {fn}({a}, {b}):",
        f'    """{doc.format(a=a, b=b)}"""',
        line.replace("{op}", op),
    ]
    cases = [
        f"self.assertAlmostEqual({fn}({x}, {y}), {w!r})"
        for (x, y), w in zip(pairs, want, strict=True)
    ]
    return _Draft(
        lines, 2, lines[2], line.replace("{op}", bug),
        [line.replace("{op}", o) for o in wrong], _test(fn, cases),
    )  # fmt: skip


_DRAFTERS: dict[str, Callable[[random.Random], _Draft]] = {
    "wrong-constant": _wrong_constant,
    "off-by-one": _off_by_one,
    "swapped-arguments": _swapped_arguments,
    "wrong-comparison": _wrong_comparison,
    "wrong-arithmetic": _wrong_arithmetic,
}

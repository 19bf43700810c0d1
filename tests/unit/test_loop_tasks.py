"""The learning loop's task suite: generated failing builds, each fixed by exactly one of
its four candidates, split into train and held-out sets that never share a task.

The tests of the generated repositories really run: each repository is written to a
temporary folder and `python3 -m unittest` runs there, with the buggy line, with the
fix, and with every wrong candidate."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from gridloop.loop import (
    FAMILIES,
    PatchError,
    TaskSuiteError,
    apply_choice,
    make_suite,
    parse_choice,
    split_of,
)
from gridloop.loop.build_tasks import Task, failure_of


def passes(files: dict[str, str], folder: Path, test_file: str) -> bool:
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "unittest", "-q", test_file.removesuffix(".py")],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode == 0


def every_task(count: int, seed: int) -> list[Task]:
    suite = make_suite(count, seed)
    return [*suite.train, *suite.heldout]


def test_each_task_fails_as_given_and_passes_with_its_fix_and_with_no_other_candidate(
    tmp_path: Path,
) -> None:
    tasks = every_task(30, seed=11)
    assert Counter(t.family for t in tasks) == {f: 6 for f in FAMILIES}
    for task in tasks:
        where = tmp_path / task.id
        assert not passes(task.files, where / "as-given", task.test_file), task.id
        for i, line in enumerate(task.candidates):
            passed = passes(apply_choice(task, i), where / f"candidate-{i}", task.test_file)
            assert passed == (line == task.fix), (task.id, line)


def test_candidates_are_four_different_lines_with_the_fix_and_without_the_buggy_line() -> None:
    for task in every_task(200, seed=5):
        assert len(set(task.candidates)) == 4, task.id
        assert task.candidates[ord(task.answer) - ord("A")] == task.fix
        assert task.buggy not in task.candidates
        lines = task.files[task.module].splitlines()
        assert lines[task.line - 1] == task.buggy


def test_the_same_seed_gives_the_same_suite_and_another_seed_another() -> None:
    assert make_suite(60, seed=3) == make_suite(60, seed=3)
    first = {t.files[t.module] for t in every_task(60, seed=3)}
    other = {t.files[t.module] for t in every_task(60, seed=4)}
    assert len(first & other) < 6


def test_train_and_heldout_share_no_task_and_no_files() -> None:
    suite = make_suite(500, seed=9)
    train_ids = {t.id for t in suite.train}
    heldout_ids = {t.id for t in suite.heldout}
    assert not train_ids & heldout_ids
    assert len(train_ids | heldout_ids) == 500
    # no held-out repository is a copy of a train repository
    train_files = {tuple(sorted(t.files.items())) for t in suite.train}
    assert not [t.id for t in suite.heldout if tuple(sorted(t.files.items())) in train_files]
    # every family is in both sides
    assert {t.family for t in suite.heldout} == set(FAMILIES)
    assert {t.family for t in suite.train} == set(FAMILIES)


def test_the_heldout_share_is_kept_and_growing_a_suite_moves_no_task_across() -> None:
    small, large = (
        make_suite(100, seed=2, heldout_share=0.3),
        make_suite(2000, seed=2, heldout_share=0.3),
    )
    assert 0.26 < len(large.heldout) / 2000 < 0.34
    assert {t.id for t in small.heldout} == {t.id for t in large.heldout if int(t.id[-5:]) < 100}
    assert small.heldout == tuple(t for t in large.heldout if int(t.id[-5:]) < 100)
    assert split_of("off-by-one-00001", 2, 0.3) == split_of("off-by-one-00001", 2, 0.3)


def test_the_prompt_shows_the_numbered_file_the_failure_and_the_lettered_candidates() -> None:
    task = make_suite(5, seed=1).train[0]
    prompt = task.prompt("x" * 2000 + "AssertionError: 136 != 176")

    assert f"{task.line:>3} {task.buggy}" in prompt
    assert "AssertionError: 136 != 176" in prompt
    for letter, line in zip("ABCD", task.candidates, strict=True):
        assert f"{letter}) {line.strip()}" in prompt
    assert prompt.endswith("Answer:")


def test_the_failure_keeps_the_assertion_and_the_error_not_the_banners_or_paths() -> None:
    output = """test_rate (test_units.RateTest.test_rate) ... FAIL

======================================================================
FAIL: test_rate (test_units.RateTest.test_rate)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/app/test_units.py", line 8, in test_rate
    self.assertEqual(rate(7), 7000)
AssertionError: 7168 != 7000

----------------------------------------------------------------------
Ran 1 test in 0.000s

FAILED (failures=1)
"""
    assert failure_of(output) == "self.assertEqual(rate(7), 7000)\nAssertionError: 7168 != 7000"


def test_a_failure_without_an_error_line_is_the_outputs_tail_within_the_limit() -> None:
    crash = "Segmentation fault " * 100
    assert failure_of(crash, limit=40) == crash.strip()[-40:]


@pytest.mark.parametrize(
    ("answer", "index"),
    [
        ("B", 1),
        (" c) for i in range(3):", 2),
        ("Answer: D\n", 3),
        ("(a)", 0),
        ("the answer is A", 0),
    ],
)
def test_an_answer_names_the_first_standalone_letter(answer: str, index: int) -> None:
    assert parse_choice(answer) == index


@pytest.mark.parametrize("answer", ["", "E", "none of these", "BAD"])
def test_an_answer_naming_no_candidate_is_refused_with_the_field(answer: str) -> None:
    with pytest.raises(PatchError, match=r"^answer: names no candidate"):
        parse_choice(answer)


def test_applying_a_choice_changes_only_the_failing_line() -> None:
    task = make_suite(3, seed=8).train[0]
    fixed = apply_choice(task, ord(task.answer) - ord("A"))

    before, after = task.files[task.module].splitlines(), fixed[task.module].splitlines()
    assert [i for i, (b, a) in enumerate(zip(before, after, strict=True)) if b != a] == [
        task.line - 1
    ]
    assert fixed[task.test_file] == task.files[task.test_file]
    with pytest.raises(PatchError, match=r"^answer: candidate 4"):
        apply_choice(task, 4)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"count": 0, "seed": 1}, "count"),
        ({"count": True, "seed": 1}, "count"),
        ({"count": 100_001, "seed": 1}, "count"),
        ({"count": 5, "seed": -1}, "seed"),
        ({"count": 5, "seed": "1"}, "seed"),
        ({"count": 5, "seed": 1, "heldout_share": 0}, "heldout_share"),
        ({"count": 5, "seed": 1, "heldout_share": 1.0}, "heldout_share"),
    ],
)
def test_a_bad_suite_request_names_its_field(kwargs: dict, field: str) -> None:
    with pytest.raises(TaskSuiteError, match=rf"^{field}: "):
        make_suite(**kwargs)

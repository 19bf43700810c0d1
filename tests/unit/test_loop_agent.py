"""The loop's agent on one machine: its attempts, what they record, and how a phase
stores, skips and reports.

The sandbox here is a folder on this machine where the task's test really runs
(`python3 -m unittest`), standing in for a claimed gVisor sandbox (the cluster test
tests/cluster/test_loop.py uses real ones); the model is a small HTTP server speaking
the two routes of vLLM's OpenAI API the agent calls, answering the letters it is given,
so what the agent sends (the prompt, the temperature, the structured choice) is checked
as it goes over the wire."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from gridloop.loop.agent import LoopError, Model, attempt, failing_output, run_phase
from gridloop.loop.build_tasks import LETTERS, make_suite
from gridloop.loop.trajectories import (
    Attempt,
    TrajectoryError,
    by_split,
    check_run_name,
    collect_key,
    evaluate_key,
    parse_lines,
)


@dataclass
class Ran:
    exit_code: int
    stdout: str
    stderr: str


class FolderSandbox:
    """Files in a folder; commands run there, as the sandbox runtime runs them."""

    def __init__(self, folder: Path, name: str = "sandbox-claim-local") -> None:
        self.folder, self.claim_name = folder, name
        folder.mkdir(parents=True, exist_ok=True)

    def write(self, path: str, content: bytes | str, timeout: int = 60) -> None:
        data = content.encode() if isinstance(content, str) else content
        (self.folder / path).write_bytes(data)

    def run(self, command: str, timeout: int = 60) -> Ran:
        # as the sandbox runtime's environment: bytecode is written unless told not to
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        done = subprocess.run(
            shlex.split(command), cwd=self.folder, capture_output=True, text=True,
            timeout=timeout, env=env,
        )  # fmt: skip
        return Ran(done.returncode, done.stdout, done.stderr)


class FakeVllm(BaseHTTPRequestHandler):
    answers: ClassVar[list[str]] = []  # popped in order
    requests: ClassVar[list[dict[str, Any]]] = []
    root = "s3://models/tiny/r1/"

    def do_GET(self) -> None:
        self._reply(200, {"data": [{"id": "tiny", "root": self.root}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        if not type(self).answers:
            self._reply(400, {"error": {"message": "no answer left"}})
            return
        self._reply(200, {"choices": [{"text": type(self).answers.pop(0)}]})

    def _reply(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def served() -> Iterator[Model]:
    FakeVllm.answers, FakeVllm.requests = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeVllm)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Model(f"http://127.0.0.1:{server.server_address[1]}", "tiny", timeout_s=10)
    finally:
        server.shutdown()


TASK = make_suite(10, seed=3).train[0]


def test_the_right_letter_fixes_the_build_and_is_rewarded(served: Model, tmp_path: Path) -> None:
    FakeVllm.answers = [TASK.answer]
    sandbox = FolderSandbox(tmp_path)
    failure = failing_output(TASK, sandbox)
    done = attempt(TASK, "train", 0, sandbox, served, "s3://m/r1/", 0.7, 5, failure)

    assert done.reward == 1.0 and done.test_exit_code == 0
    assert done.patched_line == TASK.fix
    assert done.completion == TASK.answer and done.choice == LETTERS.index(TASK.answer)
    assert done.revision == "s3://m/r1/" and done.sandbox == "sandbox-claim-local"
    (sent,) = FakeVllm.requests
    assert sent["prompt"] == done.prompt and sent["prompt"].endswith("Answer:")
    assert "AssertionError" in sent["prompt"] or "Error" in sent["prompt"]  # the real failure
    assert sent["temperature"] == 0.7 and sent["seed"] == 5
    assert sent["structured_outputs"] == {"choice": ["A", "B", "C", "D"]}
    assert set(done.seconds) == {"model", "test", "total"}
    # the module is put back for the next attempt
    assert (tmp_path / TASK.module).read_text() == TASK.files[TASK.module]


def test_a_wrong_letter_leaves_the_test_failing_and_earns_nothing(
    served: Model, tmp_path: Path
) -> None:
    wrong = next(letter for letter in LETTERS if letter != TASK.answer)
    FakeVllm.answers = [wrong]
    sandbox = FolderSandbox(tmp_path)
    done = attempt(TASK, "train", 0, sandbox, served, "r1", 1.0, 0, failing_output(TASK, sandbox))

    assert done.reward == 0.0 and done.test_exit_code != 0
    assert done.patched_line == TASK.candidates[LETTERS.index(wrong)]
    assert "FAILED" in done.test_output


def test_an_answer_naming_no_candidate_is_recorded_with_its_reason(
    served: Model, tmp_path: Path
) -> None:
    FakeVllm.answers = ["xyz"]
    done = attempt(TASK, "train", 0, FolderSandbox(tmp_path), served, "r1", 1.0, 0, "Error: x")

    assert (done.reward, done.choice, done.test_exit_code) == (0.0, -1, -1)
    assert done.error.startswith("answer: names no candidate")


def test_every_attempt_starts_from_the_failing_repository_without_a_stale_bytecode_cache(
    served: Model, tmp_path: Path
) -> None:
    """Patches of the buggy line's size, written within the second the module was
    imported in: each test must see its patch (python3 -B; a bytecode cache, keyed by the
    source's mtime in seconds and its size, would hold the module as it was)."""
    task = next(
        t for t in make_suite(30, seed=3).train
        if len({len(c) for c in t.candidates} | {len(t.buggy)}) == 1
    )  # fmt: skip
    sandbox = FolderSandbox(tmp_path)
    failure = failing_output(task, sandbox)
    wrong = next(letter for letter in LETTERS if letter != task.answer)
    FakeVllm.answers = [task.answer, wrong, task.answer]

    rewards = [
        attempt(task, "train", n, sandbox, served, "r1", 1.0, n, failure).reward for n in range(3)
    ]

    assert rewards == [1.0, 0.0, 1.0]
    assert not (tmp_path / "__pycache__").exists()


def test_a_task_whose_test_passes_unpatched_is_refused(tmp_path: Path) -> None:
    fixed = {**TASK.files, TASK.module: "\n".join(
        TASK.fix if n == TASK.line else line
        for n, line in enumerate(TASK.files[TASK.module].splitlines(), 1)
    ) + "\n"}  # fmt: skip
    broken = replace(TASK, files=fixed)
    with pytest.raises(LoopError, match=f"task {TASK.id}: its test passes before any patch"):
        failing_output(broken, FolderSandbox(tmp_path))


def test_a_model_that_is_not_served_is_named(served: Model) -> None:
    with pytest.raises(LoopError, match="model: 'other' is not served"):
        Model(served.url, "other").revision()


def test_a_phase_stores_each_task_once_skips_stored_ones_and_names_broken_ones(
    served: Model, tmp_path: Path
) -> None:
    suite = make_suite(6, seed=3)
    tasks = [(t, "train") for t in suite.train[:4]]
    stored_before = tasks[0][0].id
    broken = tasks[1][0].id
    # two attempts each for the two tasks that run, then nothing: the broken one's model
    # call fails (400)
    FakeVllm.answers = [tasks[2][0].answer, "A", tasks[3][0].answer, tasks[3][0].answer]
    store: dict[str, list[Attempt]] = {}

    @contextmanager
    def claim() -> Iterator[FolderSandbox]:
        yield FolderSandbox(tmp_path / f"sandbox-{len(list(tmp_path.iterdir()))}")

    order = [t for t, _ in tasks if t.id not in (stored_before, broken)] + [tasks[1][0]]
    result = run_phase(
        [(t, "train") for t in order] + [(tasks[0][0], "train")],
        attempts_per_task=2,
        claim=claim,
        model=served,
        store=lambda task, done: store.setdefault(task.id, done) and f"key/{task.id}",
        already=lambda task: task.id == stored_before,
        workers=1,
        temperature=1.0,
        seed="9/collect/1",
    )

    assert sorted(store) == sorted(t.id for t in order[:2])
    assert [a.reward for a in store[order[0].id]] == [1.0, float(order[0].answer == "A")]
    assert [a.attempt for a in store[order[1].id]] == [0, 1]
    assert result.skipped == [stored_before]
    (error,) = result.errors
    assert error.startswith(f"{broken}: LoopError: model: POST /v1/completions answered 400")
    assert broken not in store


def test_stored_lines_round_trip_and_pass_rates_count_samples_and_tasks() -> None:
    def one(task_id: str, split: str, reward: float) -> str:
        return Attempt(
            task_id=task_id, split=split, family="f", attempt=0, revision="r1", temperature=1.0,
            prompt="p", completion="A", choice=0, patched_line="x", reward=reward,
            test_exit_code=0 if reward else 1, test_output="",
        ).line()  # fmt: skip

    text = "\n".join([one("t1", "train", 1.0), one("t1", "train", 0.0), one("t2", "heldout", 0.0)])
    records = parse_lines(text, "s3://loop/k.jsonl")

    rates = by_split(records)
    assert (rates["train"].attempts, rates["train"].passed, rates["train"].rate) == (2, 1, 0.5)
    assert (rates["train"].tasks, rates["train"].tasks_solved) == (1, 1)
    assert (rates["heldout"].attempts, rates["heldout"].rate) == (1, 0.0)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{", "s3://loop/k.jsonl:1: not JSON"),
        ("[1]", "s3://loop/k.jsonl:1: not a JSON object"),
        ('{"task_id": "t"}', "s3://loop/k.jsonl:1: split: missing"),
    ],
)
def test_a_stored_line_that_is_not_an_attempt_is_named_by_place_and_field(
    line: str, message: str
) -> None:
    with pytest.raises(TrajectoryError, match=message):
        parse_lines(line, "s3://loop/k.jsonl")


def test_objects_are_keyed_by_run_and_iteration_or_by_run_and_revision() -> None:
    assert collect_key("demo", 2, "off-by-one-00001") == (
        "demo/iteration-2/collect/off-by-one-00001.jsonl"
    )
    assert evaluate_key("demo", "r3", "t") == "demo/evaluate/r3/t.jsonl"
    with pytest.raises(TrajectoryError, match="run: 'Demo_1'"):
        check_run_name("Demo_1")

"""The loop's agent: fixes failing builds in claimed sandboxes with the served model.

For each task it claims a sandbox through agent-sandbox's own client (k8s-agent-sandbox's
SandboxClient: a SandboxClaim served from the warm pool, requests through the sandbox
router), writes the repository in and runs the task's test (it fails); then, for each
attempt, shows the model the failing file, the test's failure and the four candidate lines
through vLLM's OpenAI-compatible `/v1/completions` (sampled at a temperature; vLLM's
structured outputs hold the answer to one of the letters A to D), writes the patched file,
runs the test again, puts the file back, and records the attempt (trajectories.Attempt).
The sandbox is released when the task's attempts are done (the claim is deleted; the
pool refills).

Tasks run in parallel, one claimed sandbox per worker at a time. Each task's attempts go
to the object store as one JSON-lines object as soon as they are done, so an interrupted
phase resumes from the tasks already stored. An attempt the infrastructure broke (a
sandbox that would not come, a model that did not answer) is not a model's failure: the
task is left unstored and named in the phase's errors.
"""

from __future__ import annotations

import hashlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from gridloop.errors import GridloopError
from gridloop.loop.build_tasks import LETTERS, Task
from gridloop.loop.patching import PatchError, apply_choice, parse_choice
from gridloop.loop.trajectories import Attempt

OUTPUT_CHARS = 2000
TEST_TIMEOUT_S = 30
# a task the infrastructure failed (a sandbox that never became ready, a dropped
# connection) is tried again from the start in a new sandbox, once; the model's and the
# task's own errors (LoopError) are not
TRIES = 2


class LoopError(GridloopError):
    """A phase that cannot go on; the message says why in one line."""


class Sandbox(Protocol):
    """What the agent uses of k8s_agent_sandbox's SandboxClient once it is entered."""

    claim_name: str

    def run(self, command: str, timeout: int = 60) -> Any: ...

    def write(self, path: str, content: bytes | str, timeout: int = 60) -> Any: ...


@dataclass(frozen=True)
class Model:
    """A model served by vLLM's OpenAI-compatible server (the chart's Service)."""

    url: str  # e.g. http://10.96.0.20:8000
    name: str  # the served model name, e.g. "tiny"
    timeout_s: float = 60.0

    def revision(self) -> str:
        """The weights the server loaded: its `/v1/models` root (s3://models/tiny/r1/)."""
        body = self._call("GET", "/v1/models", None)
        roots = [m.get("root", "") for m in body.get("data", []) if m.get("id") == self.name]
        if not roots:
            served = [m.get("id") for m in body.get("data", [])]
            raise LoopError(f"model: {self.name!r} is not served at {self.url} (served: {served})")
        return str(roots[0])

    def answer(self, prompt: str, temperature: float, seed: int) -> str:
        """One sampled answer, held to a letter A to D by vLLM's structured outputs."""
        body = {
            "model": self.name,
            "prompt": prompt,
            "max_tokens": 2,
            "temperature": temperature,
            "seed": seed,
            "structured_outputs": {"choice": list(LETTERS)},
        }
        reply = self._call("POST", "/v1/completions", body)
        try:
            return str(reply["choices"][0]["text"])
        except (KeyError, IndexError, TypeError):
            raise LoopError(f"model: no completion in the reply: {str(reply)[:200]}") from None

    def _call(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url.rstrip('/')}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return dict(json.loads(response.read()))
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")[:300]
            raise LoopError(f"model: {method} {path} answered {err.code}: {detail}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
            raise LoopError(f"model: {method} {path} at {self.url} failed: {err}") from None


def _tail(result: Any) -> str:
    return (str(result.stdout) + str(result.stderr))[-OUTPUT_CHARS:]


def failing_output(task: Task, sandbox: Sandbox) -> str:
    """Write the task's repository into the sandbox and run its test, which must fail;
    its output (the tail) is what every attempt's prompt shows."""
    for name, text in task.files.items():
        sandbox.write(name, text)
    before = sandbox.run(_command(task), timeout=TEST_TIMEOUT_S + 10)
    if before.exit_code == 0:
        raise LoopError(f"task {task.id}: its test passes before any patch (a broken task)")
    return _tail(before)


def _command(task: Task) -> str:
    # -B: no bytecode cache, which could hold the module as it was before a patch of the
    # same size written within the same second
    return f"timeout {TEST_TIMEOUT_S} {task.test_command.replace('python3 ', 'python3 -B ', 1)}"


def attempt(
    task: Task,
    split: str,
    number: int,
    sandbox: Sandbox,
    model: Model,
    revision: str,
    temperature: float,
    seed: int,
    failure: str,
) -> Attempt:
    """One attempt at `task` in a sandbox that holds its failing repository (`failure` is
    its test's output): the model's answer, the patch, the test again, and the module put
    back as it was for the next attempt."""
    t0 = time.monotonic()
    prompt = task.prompt(failure)
    completion = model.answer(prompt, temperature, seed)
    t1 = time.monotonic()
    seconds = {"model": round(t1 - t0, 3)}
    unpatched = Attempt(
        task_id=task.id,
        split=split,
        family=task.family,
        attempt=number,
        revision=revision,
        temperature=temperature,
        prompt=prompt,
        completion=completion,
        choice=-1,
        patched_line="",
        reward=0.0,
        test_exit_code=-1,
        test_output="",
        sandbox=sandbox.claim_name,
    )
    try:
        choice = parse_choice(completion)
        files = apply_choice(task, choice)
    except PatchError as err:
        seconds["total"] = round(time.monotonic() - t0, 3)
        return replace(unpatched, error=str(err), seconds=seconds)
    sandbox.write(task.module, files[task.module])
    after = sandbox.run(_command(task), timeout=TEST_TIMEOUT_S + 10)
    t2 = time.monotonic()
    sandbox.write(task.module, task.files[task.module])
    seconds |= {"test": round(t2 - t1, 3), "total": round(time.monotonic() - t0, 3)}
    return replace(
        unpatched,
        choice=choice,
        patched_line=task.candidates[choice],
        reward=1.0 if after.exit_code == 0 else 0.0,
        test_exit_code=int(after.exit_code),
        test_output=_tail(after),
        seconds=seconds,
    )


def sample_seed(seed: str, task_id: str, number: int) -> int:
    """The sampling seed of one attempt: a hash of the phase's seed (the run's seed and
    what the phase is), the task and the attempt, so a re-run draws the same samples, each
    iteration's collection new ones, and every revision's evaluation the same ones. (Seeds
    counted up from the run's, one per task and attempt, drew the fix in none of 42
    samples of the first revision, against about 22% with hashed seeds.)"""
    digest = hashlib.sha256(f"{seed}/{task_id}/{number}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


@dataclass
class PhaseResult:
    """What a phase did not do: the attempts themselves are in the store (the caller reads
    them back, stored before or now, to count them)."""

    skipped: list[str] = field(default_factory=list)  # tasks already in the store
    errors: list[str] = field(default_factory=list)  # tasks the infrastructure failed


def run_phase(
    tasks: Sequence[tuple[Task, str]],
    attempts_per_task: int,
    claim: Callable[[], AbstractContextManager[Sandbox]],
    model: Model,
    store: Callable[[Task, list[Attempt]], str],
    already: Callable[[Task], bool],
    workers: int,
    temperature: float,
    seed: str,
    progress: Callable[[Task, list[Attempt] | None, str], None] = lambda *_: None,
) -> PhaseResult:
    """Every (task, split) in `tasks`, `attempts_per_task` samples each, `workers` sandboxes
    at a time; each task's attempts stored (`store`) when done. Tasks `already` stored are
    skipped."""
    revision = model.revision()
    result = PhaseResult()

    def one(task: Task, split: str) -> None:
        if already(task):
            result.skipped.append(task.id)
            progress(task, None, "stored before")
            return
        seeds = [sample_seed(seed, task.id, n) for n in range(attempts_per_task)]
        for tries in range(1, TRIES + 1):
            try:
                with claim() as sandbox:
                    failure = failing_output(task, sandbox)
                    done = [
                        attempt(task, split, n, sandbox, model, revision, temperature, s, failure)
                        for n, s in enumerate(seeds)
                    ]
                key = store(task, done)
                break
            except Exception as err:  # the sandbox, the router, the model or the store
                message = f"{task.id}: {type(err).__name__}: {err}"[:300]
                if tries == TRIES or isinstance(err, LoopError):
                    result.errors.append(message)
                    progress(task, None, message)
                    return
                progress(task, None, f"{message} (trying again in a new sandbox)")
        progress(task, done, key)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for future in [pool.submit(one, t, s) for t, s in tasks]:
            future.result()
    return result

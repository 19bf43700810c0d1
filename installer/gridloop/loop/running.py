"""`gridloop loop run`: collect -> train -> evaluate -> roll out, N times (the shell).

Each phase is an ordinary Kubernetes object a user can look at while it runs:

1. **collect**: the agent (agent.py) works the suite's train tasks in SandboxClaims from
   the sandbox namespace's warm pool, asking the served model (the chart's vLLM
   Deployment, through its Service); every task's attempts go to the object store.
2. **baseline**: the serving revision's held-out pass@1, the same way (once per revision).
3. **train**: a RayJob in the team's namespace, queued by Kueue (training_job.py), reads
   the iteration's trajectories and writes the next revision's weights to the store.
4. **candidate**: `gridloop upgrade` adds `<model>-candidate` at that revision to the
   release (a second Deployment and Service); a revision whose weights do not load stops
   the iteration here with the reason `gridloop upgrade` gives.
5. **evaluate**: the candidate's held-out pass@1 through the same agent.
6. **rollout**: if it beats the serving revision by the margin, `gridloop upgrade` rolls
   the model to it behind the same Service (the chart's surge rollout loses no request)
   and removes the candidate; otherwise only the candidate goes and the reason is kept.

Everything an iteration decides is stored beside its trajectories
(``<run>/iteration-<n>/record.json``), so a re-run resumes: done iterations are skipped,
stored tasks are not attempted again, a trained revision is not trained again. A phase
that fails stops its iteration with one line saying why, and the serving revision stays.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gridloop import kube, names, paths
from gridloop.loop import deciding, training_job
from gridloop.loop.agent import LoopError, Model, PhaseResult, Sandbox, run_phase
from gridloop.loop.build_tasks import Suite, Task, make_suite
from gridloop.loop.deciding import IterationRecord
from gridloop.loop.store import Store
from gridloop.loop.trajectories import (
    Attempt,
    check_run_name,
    collect_key,
    collect_prefix,
    evaluate_key,
    evaluate_prefix,
    pass_rate,
)
from gridloop.sandboxes.claiming import ClaimedSandbox

ROUTER_SERVICE = "sandbox-router-svc"
ROUTER_PORT = 8080
MODEL_PORT = 8000


@dataclass(frozen=True)
class Settings:
    run: str = "demo"
    iterations: int = 3
    tasks: int = 200  # the suite's size; about a quarter is held out
    seed: int = 21
    train_tasks: int = 0  # how many of the train side each iteration works (0: all)
    heldout_tasks: int = 0  # how many held-out tasks evaluate a revision (0: all)
    attempts: int = 4  # samples per train task
    eval_attempts: int = 2  # samples per held-out task
    temperature: float = 1.0
    margin: float = 0.05
    workers: int = 2
    epochs: int = 12
    model: str = "tiny"
    namespace: str = names.DEFAULT_NAMESPACE  # the release's
    release: str = names.DEFAULT_RELEASE
    team_namespace: str = "team-default"
    queue: str = "default"
    sandbox_namespace: str = "agents"
    warm_pool: str = "default"  # the chart names a namespace's pool after its template
    router_namespace: str = "sandbox-router"  # the chart's agentSandbox.router.namespace
    bucket: str = "loop"
    endpoint: str | None = None  # the object store from here (default: AWS_ENDPOINT_URL)
    cluster_endpoint: str = "http://object-store.object-store.svc.cluster.local:9000"
    secret: str = ""  # the training job's store keys (default: loop-<run>-s3)
    chart: str | None = None
    kubeconfig: str | None = None
    timeout_s: float = 900.0  # per phase that waits on the cluster
    # the candidate's server: a revision that has not loaded by then never will
    candidate_timeout_s: float = 300.0

    @property
    def training_secret(self) -> str:
        return self.secret or f"loop-{self.run}-s3"

    def check(self) -> None:
        try:
            check_run_name(self.run)
        except ValueError as err:
            raise LoopError(f"--{err}") from None
        for name in ("iterations", "tasks", "attempts", "eval_attempts", "workers", "epochs"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise LoopError(f"--{name.replace('_', '-')}: must be at least 1, got {value!r}")
        for name in ("train_tasks", "heldout_tasks"):
            if getattr(self, name) < 0:
                raise LoopError(f"--{name.replace('_', '-')}: must be 0 (all) or more")
        if not 0 <= self.temperature <= 2:
            raise LoopError(f"--temperature: must be from 0 to 2, got {self.temperature}")
        if not 0 <= self.margin < 1:
            raise LoopError(f"--margin: must be from 0 to 1 (a share), got {self.margin}")
        for flag, seconds in (
            ("--timeout", self.timeout_s),
            ("--candidate-timeout", self.candidate_timeout_s),
        ):
            if not seconds > 0:
                raise LoopError(f"{flag}: must be a number of seconds above 0, got {seconds}")

    def identity(self) -> dict[str, Any]:
        """What a run is fixed to: a re-run with other values is another run."""
        return {"seed": self.seed, "tasks": self.tasks, "model": self.model}


Say = Callable[[str], None]


@dataclass
class Cluster:
    """The clients and URLs the loop talks to."""

    settings: Settings
    core: Any = None
    custom: Any = None
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from kubernetes import client

        api = kube.api_client(self.settings.kubeconfig)
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.env = dict(os.environ)
        if self.settings.kubeconfig:
            self.env["KUBECONFIG"] = self.settings.kubeconfig

    def service_url(self, namespace: str, name: str, port: int) -> str:
        from kubernetes.client.rest import ApiException

        try:
            svc = self.core.read_namespaced_service(name, namespace)
        except ApiException as err:
            if err.status == 404:
                raise LoopError(f"service: no Service {namespace}/{name}") from None
            raise
        return f"http://{svc.spec.cluster_ip}:{port}"

    def model(self, name: str) -> Model:
        return Model(self.service_url(self.settings.namespace, name, MODEL_PORT), name)

    def claim(self) -> Callable[[], AbstractContextManager[Sandbox]]:
        # the client logs every request at INFO on the root logger
        logging.getLogger().setLevel(logging.WARNING)
        s = self.settings
        url = self.service_url(s.router_namespace, ROUTER_SERVICE, ROUTER_PORT)

        def claim() -> AbstractContextManager[Sandbox]:
            # 60 s: a claim is served in seconds here, warm or cold; one that is not by
            # then is given up, and the agent tries the task again in a new sandbox. The
            # workers claim at once: agent-sandbox v1.0.3 gives each claim a sandbox of its
            # own (v0.2.1 could give two claims one warm pod, and the loop claimed one at
            # a time; test_sandboxes.py's claims made at once pin it)
            return ClaimedSandbox(url, s.warm_pool, s.sandbox_namespace, 60, self.core)

        return claim

    def gridloop(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        script = Path(sys.executable).parent / "gridloop"
        return subprocess.run(
            [str(script), *args], capture_output=True, text=True, env=self.env, timeout=timeout
        )

    def release_values(self) -> dict[str, Any]:
        from gridloop import toolchain

        s = self.settings
        helm = toolchain.helm(s.kubeconfig or os.environ.get("KUBECONFIG"))
        got = subprocess.run(
            [str(helm), "get", "values", s.release, "--namespace", s.namespace, "-o", "json"],
            capture_output=True, text=True, env=self.env, timeout=120,
        )  # fmt: skip
        if got.returncode != 0:
            said = (got.stderr.strip().splitlines() or ["no output"])[-1]
            raise LoopError(f"release: helm get values {s.release} -n {s.namespace}: {said}")
        return dict(json.loads(got.stdout or "{}") or {})

    def upgrade(self, values: dict[str, Any], why: str, timeout_s: float | None = None) -> None:
        """`gridloop upgrade` of the release with `values` (its own, changed), waiting."""
        s = self.settings
        timeout_s = s.timeout_s if timeout_s is None else timeout_s
        with tempfile.TemporaryDirectory(prefix="gridloop-loop-") as folder:
            path = Path(folder) / "values.yaml"
            path.write_text(yaml.safe_dump(values, sort_keys=False))
            args = ["upgrade", "-f", str(path), "--namespace", s.namespace]
            args += ["--release", s.release, "--wait", "--timeout", f"{int(timeout_s)}s"]
            if s.chart:
                args += ["--chart", s.chart]
            if s.kubeconfig:
                args += ["--kubeconfig", s.kubeconfig]
            done = self.gridloop(*args, timeout=timeout_s + 300)
        if done.returncode != 0:
            lines = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
            said = " ".join(lines[-2:]) if lines else f"exit {done.returncode}"
            raise LoopError(f"{why}: gridloop upgrade failed: {said[:400]}")

    def ensure_secret(self, base_uri: str, output_uri: str) -> str:
        """The training job's store keys in the team namespace, by name. On the local
        cluster (its kubeconfig) the run gets keys of its own, minted by the store's admin
        key: they read the run's trajectories and the model's folder and write only the
        revision it makes now (store_access.training); elsewhere the Secret must be there."""
        from kubernetes.client.rest import ApiException

        s = self.settings
        name = s.training_secret
        state_dir = paths.local_state_dir(s.kubeconfig or os.environ.get("KUBECONFIG"))
        if state_dir is None or s.secret:
            try:
                self.core.read_namespaced_secret(name, s.team_namespace)
                return name
            except ApiException as err:
                if err.status != 404:
                    raise
            raise LoopError(
                f"--secret: no Secret {name!r} in {s.team_namespace}: the training job's "
                f"store keys, which read s3://{s.bucket}/{s.run}/ and {base_uri} and write "
                f"{output_uri} (docs/loop.md)"
            )
        body = _minted_secret(state_dir, s, base_uri, output_uri, name)
        try:
            self.core.replace_namespaced_secret(name, s.team_namespace, body)
        except ApiException as err:
            if err.status != 404:
                raise
            self.core.create_namespaced_secret(s.team_namespace, body)
        return name


RAY = ("ray.io", "v1", "rayjobs")


def run_training(cluster: Cluster, job: training_job.TrainingJob, say: Say) -> float:
    """Create the iteration's RayJob (again, if an earlier one failed) and wait for it;
    its failure is a LoopError with KubeRay's message."""
    from kubernetes.client.rest import ApiException

    group, version, plural = RAY
    custom, ns = cluster.custom, job.namespace
    t0 = time.monotonic()
    try:
        found = custom.get_namespaced_custom_object(group, version, ns, plural, job.name)
        if (found.get("status") or {}).get("jobStatus") == "FAILED":
            custom.delete_namespaced_custom_object(
                group, version, ns, plural, job.name, propagation_policy="Foreground"
            )
            _wait_gone(custom, ns, job.name)
            found = None
    except ApiException as err:
        if err.status != 404:
            raise
        found = None
    cm = training_job.config_map(job)
    try:
        cluster.core.create_namespaced_config_map(ns, cm)
    except ApiException as err:
        if err.status != 409:
            raise
        cluster.core.replace_namespaced_config_map(job.name, ns, cm)
    if found is None:
        custom.create_namespaced_custom_object(
            group, version, ns, plural, training_job.ray_job(job)
        )
        say(f"train: RayJob {ns}/{job.name} created (queue {job.queue})")
    last = ""
    deadline = t0 + cluster.settings.timeout_s
    while time.monotonic() < deadline:
        doc = custom.get_namespaced_custom_object(group, version, ns, plural, job.name)
        status = doc.get("status") or {}
        suspended = (doc.get("spec") or {}).get("suspend")
        now = status.get("jobStatus") or ("queued by Kueue" if suspended else "starting")
        if now != last:
            say(f"train: RayJob {job.name}: {now} ({time.monotonic() - t0:.0f}s)")
            last = now
        if now == "SUCCEEDED":
            return time.monotonic() - t0
        if now in ("FAILED", "STOPPED"):
            message = status.get("message") or status.get("reason") or "no message"
            raise LoopError(f"train: RayJob {ns}/{job.name} {now.lower()}: {message[:300]}")
        time.sleep(3)
    raise LoopError(
        f"train: RayJob {ns}/{job.name} not done after {cluster.settings.timeout_s:.0f}s "
        f"(last: {last})"
    )


def _wait_gone(custom: Any, namespace: str, name: str, timeout: float = 180) -> None:
    from kubernetes.client.rest import ApiException

    group, version, plural = RAY
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            custom.get_namespaced_custom_object(group, version, namespace, plural, name)
        except ApiException as err:
            if err.status == 404:
                return
            raise
        time.sleep(1)
    raise LoopError(f"train: the failed RayJob {namespace}/{name} was not deleted in {timeout}s")


def _wait_served(model: Model, revision: str, deadline: float) -> None:
    """Until every answer through the model's Service comes from `revision`."""
    seen = ""
    while time.monotonic() < deadline:
        roots = {deciding.revision_name(model.revision()) for _ in range(5)}
        if roots == {revision}:
            return
        seen = ", ".join(sorted(roots))
        time.sleep(2)
    raise LoopError(f"rollout: the Service still answers from {seen}, not only {revision}")


def chosen(tasks: tuple[Task, ...], count: int) -> list[Task]:
    return list(tasks if count == 0 else tasks[:count])


class Loop:
    def __init__(self, settings: Settings, say: Say = print) -> None:
        settings.check()
        self.s = settings
        self.say = say
        self.store = Store(settings.bucket, settings.endpoint or os.environ.get("AWS_ENDPOINT_URL"))
        self.store.check_bucket()
        self.cluster = Cluster(settings)
        self.suite: Suite = make_suite(settings.tasks, settings.seed)

    # --- records in the store ---

    def _claim_run(self) -> None:
        key = f"{self.s.run}/run.json"
        if self.store.exists(key):
            stored = self.store.get_json(key)
            for name, value in self.s.identity().items():
                if stored.get(name) != value:
                    raise LoopError(
                        f"--{name}: run {self.s.run!r} was started with {name} "
                        f"{stored.get(name)!r}, not {value!r} (give another --run)"
                    )
            return
        self.store.put_json(key, {**self.s.identity(), "settings": asdict(self.s)})

    def records(self) -> list[IterationRecord]:
        out = []
        for n in range(1, 1000):
            key = f"{self.s.run}/iteration-{n}/record.json"
            if not self.store.exists(key):
                break
            out.append(IterationRecord.from_json(self.store.get_json(key)))
        return out

    def _save(self, record: IterationRecord) -> None:
        self.store.put_json(
            f"{self.s.run}/iteration-{record.iteration}/record.json", record.to_json()
        )

    # --- phases ---

    def _phase(
        self, label: str, tasks: list[Task], split: str, attempts: int, model: Model,
        key: Callable[[Task], str], seed: str,
    ) -> PhaseResult:  # fmt: skip
        done_tasks = 0
        t0 = last_said = time.monotonic()

        def progress(task: Task, attempts_done: list[Attempt] | None, message: str) -> None:
            nonlocal done_tasks, last_said
            done_tasks += 1
            if attempts_done is None and not message.startswith("stored"):
                self.say(f"{label}: {message}")
                if message.endswith("(trying again in a new sandbox)"):
                    done_tasks -= 1  # not done yet
                    return
            now = time.monotonic()
            if now - last_said > 10 or done_tasks == len(tasks):
                last_said = now
                self.say(f"{label}: {done_tasks}/{len(tasks)} tasks ({now - t0:.0f}s)")

        result = run_phase(
            [(t, split) for t in tasks], attempts, self.cluster.claim(), model,
            store=lambda task, done: self.store.put_attempts(key(task), done),
            already=lambda task: self.store.exists(key(task)),
            workers=self.s.workers, temperature=self.s.temperature, seed=seed,
            progress=progress,
        )  # fmt: skip
        if result.errors:
            first = result.errors[0]
            raise LoopError(
                f"{label}: {len(result.errors)} of {len(tasks)} tasks failed to run; first: {first}"
            )
        return result

    def _heldout_rate(self, revision: str, model: Model, label: str) -> tuple[float, Any]:
        tasks = chosen(self.suite.heldout, self.s.heldout_tasks)
        t0 = time.monotonic()
        self._phase(
            label, tasks, "heldout", self.s.eval_attempts, model,
            key=lambda task: evaluate_key(self.s.run, revision, task.id),
            seed=f"{self.s.seed}/evaluate",
        )  # fmt: skip
        wanted = {t.id for t in tasks}
        records = [
            r for r in self.store.read_attempts(evaluate_prefix(self.s.run, revision))
            if r["task_id"] in wanted and r["attempt"] < self.s.eval_attempts
        ]  # fmt: skip
        return time.monotonic() - t0, pass_rate(records)

    def iteration(self, n: int) -> IterationRecord:
        s, say = self.s, self.say
        serving = self.cluster.model(s.model)
        root = serving.revision()
        served = deciding.revision_name(root)
        record = IterationRecord(iteration=n, served_before=served)
        say(f"iteration {n}: {s.model} serves {served} ({root})")
        try:
            self._iteration(n, serving, root, served, record)
        except (LoopError, deciding.ValuesError) as err:
            record.outcome, record.reason = "stopped", str(err)
            record.served_after = deciding.revision_name(serving.revision())
            say(f"iteration {n}: stopped: {err}; {s.model} still serves {record.served_after}")
            self._remove_candidate()
        self._save(record)
        return record

    def _iteration(
        self, n: int, serving: Model, root: str, served: str, record: IterationRecord
    ) -> None:
        s, say = self.s, self.say
        # 1. collect
        t0 = time.monotonic()
        train = chosen(self.suite.train, s.train_tasks)
        self._phase(
            "collect", train, "train", s.attempts, serving,
            key=lambda task: collect_key(s.run, n, task.id),
            seed=f"{s.seed}/collect/{n}",
        )  # fmt: skip
        wanted = {t.id for t in train}
        collected = [
            r for r in self.store.read_attempts(collect_prefix(s.run, n)) if r["task_id"] in wanted
        ]
        rate = pass_rate(collected)
        record.attempts, record.train_pass = rate.attempts, rate.rate
        record.seconds["collect"] = time.monotonic() - t0
        say(f"collect: {rate.passed}/{rate.attempts} attempts passed ({rate.rate:.1%})")
        # 2. the serving revision's held-out pass rate
        seconds, base = self._heldout_rate(served, serving, "baseline")
        record.heldout_serving, record.seconds["baseline"] = base.rate, seconds
        say(f"baseline: {served} held-out pass@1 {base.rate:.1%} ({base.passed}/{base.attempts})")
        # 3. train
        revision = deciding.next_revision(s.run, n)
        record.candidate = revision
        output = deciding.sibling_uri(root, revision)
        t0 = time.monotonic()
        model_store = _store_of(output, self.store.endpoint)
        if model_store[0].exists(f"{model_store[1]}training.json"):
            say(f"train: {output} is already trained (training.json there)")
        else:
            secret = self.cluster.ensure_secret(root, output)
            job = training_job.TrainingJob(
                run=s.run, iteration=n, namespace=s.team_namespace, queue=s.queue,
                trajectories_uri=f"s3://{s.bucket}/{collect_prefix(s.run, n)}",
                base_uri=root, output_uri=output, endpoint=s.cluster_endpoint,
                secret=secret, epochs=s.epochs, seed=s.seed,
            )  # fmt: skip
            run_training(self.cluster, job, say)
        record.seconds["train"] = time.monotonic() - t0
        # 4. serve the candidate
        t0 = time.monotonic()
        values = self.cluster.release_values()
        say(f"candidate: serving {revision} as {deciding.candidate_name(s.model)}")
        self.cluster.upgrade(
            deciding.with_candidate(values, s.model, revision), "candidate", s.candidate_timeout_s
        )
        record.seconds["candidate"] = time.monotonic() - t0
        # 5. evaluate it
        candidate = self.cluster.model(deciding.candidate_name(s.model))
        if deciding.revision_name(candidate.revision()) != revision:
            raise LoopError(f"candidate: the candidate's server does not serve {revision}")
        seconds, cand = self._heldout_rate(revision, candidate, "evaluate")
        record.heldout_candidate, record.seconds["evaluate"] = cand.rate, seconds
        decision = deciding.decide(base, cand, s.margin)
        record.reason = decision.reason
        say(f"evaluate: {revision}: {decision.reason}")
        # 6. roll out, or keep
        t0 = time.monotonic()
        values = self.cluster.release_values()
        if decision.promote:
            say(f"rollout: {s.model} -> {revision} behind the same Service")
            self.cluster.upgrade(deciding.without_candidate(values, s.model, revision), "rollout")
            # the old pod answers until its preStop wait ends and it is gone
            _wait_served(serving, revision, deadline=time.monotonic() + 120)
            record.outcome = "promoted"
        else:
            self.cluster.upgrade(deciding.without_candidate(values, s.model), "candidate removal")
            record.outcome = "kept"
        record.seconds["rollout"] = time.monotonic() - t0
        record.served_after = deciding.revision_name(serving.revision())
        say(f"iteration {n}: {record.outcome}; {s.model} serves {record.served_after}")

    def _remove_candidate(self) -> None:
        try:
            values = self.cluster.release_values()
            models = (values.get("inference") or {}).get("models") or []
            name = deciding.candidate_name(self.s.model)
            if any(isinstance(m, dict) and m.get("name") == name for m in models):
                self.cluster.upgrade(deciding.without_candidate(values, self.s.model), "cleanup")
                self.say(f"cleanup: {name} removed")
        except (LoopError, deciding.ValuesError) as err:
            self.say(f"cleanup: {err}")

    def run(self) -> list[IterationRecord]:
        """Iterations up to `iterations`, after the ones stored; stops at the first that
        stops (the run's last record says why; a re-run starts that iteration again)."""
        self._claim_run()
        records = self.records()
        if records and records[-1].outcome == "stopped":
            self.say(f"run {self.s.run}: iteration {records[-1].iteration} stopped before; again")
            records.pop()
        elif records:
            self.say(f"run {self.s.run}: {len(records)} iteration(s) done before; going on")
        while len(records) < self.s.iterations:
            records.append(self.iteration(len(records) + 1))
            if records[-1].outcome == "stopped":
                break
        self.store.put_json(f"{self.s.run}/summary.json", [r.to_json() for r in records])
        return records


def training_role_of(run: str, base_uri: str, output_uri: str) -> Any:
    """The local store's role for a run fine-tuning `base_uri` (a revision's folder of the
    models bucket) into `output_uri` beside it: the folder readable, the output writable."""
    from gridloop.local.addons import store_access
    from gridloop.models.uris import parse_s3

    where = parse_s3(base_uri, "revision")
    folder = where.prefix.rstrip("/").rpartition("/")[0]
    if where.bucket != store_access.MODELS or not folder:
        raise LoopError(
            f"model: {base_uri} is not a revision in a model's folder of s3://"
            f"{store_access.MODELS}/ (s3://{store_access.MODELS}/<model>/<revision>/), the "
            "only place the local store's training keys may write"
        )
    out = parse_s3(output_uri, "revision")
    revision = out.prefix.rstrip("/").rpartition("/")[2]
    if out.bucket != where.bucket or out.prefix != f"{folder}/{revision}/":
        raise LoopError(f"model: {output_uri} is not a revision beside {base_uri}")
    return store_access.training(run, f"{folder}/", revision)


def _minted_secret(
    state_dir: Path, s: Settings, base_uri: str, output_uri: str, name: str
) -> dict[str, Any]:
    from gridloop.local.addons import object_store, store_access, store_admin
    from gridloop.local.state import load

    state = load(state_dir)
    if state is None or object_store.PROCESS not in state.components:
        raise LoopError(f"--secret: the local cluster in {state_dir} runs no object store")
    if s.bucket != store_access.LOOP:
        raise LoopError(
            f"--bucket {s.bucket}: the local store's training keys read trajectories from "
            f"s3://{store_access.LOOP}/<run>/ only (the one trajectories bucket `local up` makes)"
        )
    role = training_role_of(s.run, base_uri, output_uri)
    keys = store_admin.mint(state_dir, state.ports.object_store, role)
    secret = object_store.secret_object(state_dir, s.team_namespace, role, name)
    secret["stringData"] = object_store.key_env(keys)
    return secret


def _store_of(uri: str, endpoint: str | None) -> tuple[Store, str]:
    from gridloop.models.uris import parse_s3

    where = parse_s3(uri, "revision")
    return Store(where.bucket, endpoint), where.prefix

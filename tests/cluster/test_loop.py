"""The learning loop, one short iteration, against the real parts: `gridloop loop run`
works train tasks in gVisor sandboxes claimed through agent-sandbox's client, asks the
chart's vLLM server (the tiny random-weight Llama, streamed from the object store),
stores the trajectories in the object store, trains the next revision in a RayJob Kueue
admits, serves it as a candidate, evaluates it on held-out tasks and rolls it out behind
the same Service or records why not, while a client keeps calling that Service.

The run first fails on purpose: its train tasks' attempts are put in the store
beforehand, every one failing, so the RayJob finds nothing to learn from and fails; the
iteration stops with that reason and the served revision stays. With those attempts
removed, the same command runs the iteration again for real. Meanwhile a GPU fault is
injected into the simulated fleet (no GPU here: the DCGM metrics are simulated) and the
chart's health service quarantines its node and lowers the quota, on the same control
plane.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import ray_jobs
import registry_images
import tiny_model
from health_pods import clear_faults, gpu_quota, inject, tainted
from platform_install import (
    GRIDLOOP,
    KEPT_NAMESPACES,
    USER_NAMESPACE,
    USER_RELEASE,
    Installed,
    ensure_release_namespace,
    remove_kept_namespaces,
)
from test_inference_served import Load, model_pods, openai_answers, served_root, service_url
from user_walks import BIN_DIR, walk_folder

from doc_blocks import doc_block, substituted
from gridloop.local import cluster
from gridloop.local.build.images import locked_images
from gridloop.loop.build_tasks import LETTERS, make_suite
from gridloop.loop.store import Store
from gridloop.loop.trajectories import Attempt, collect_key, collect_prefix, evaluate_prefix

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("heavy_images")]

# the object store outlives a release: a run of its own each session
RUN = f"itest-{uuid.uuid4().hex[:6]}"
TASKS, TRAIN_TASKS, HELDOUT_TASKS, SEED = 40, 10, 6, 21
ARGS = (
    "--run", RUN, "--iterations", "1", "--tasks", str(TASKS), "--seed", str(SEED),
    "--train-tasks", str(TRAIN_TASKS), "--heldout-tasks", str(HELDOUT_TASKS),
    "--attempts", "3", "--eval-attempts", "2", "--workers", "2", "--epochs", "4",
    "--timeout", "900",
)  # fmt: skip
TEAM = ray_jobs.TEAM_NAMESPACE
JOB = f"loop-{RUN}-1"
FAULTY = ("us-east-h100-006", "us-east-h100")


# the README's path after `make demo`, taken from the Markdown: its model block (the vLLM
# CPU image built on the running cluster, the tiny model made and pushed, the release
# installed with the example's model), then docs/loop.md's steps (the trainer image
# built the same way) but its benchmark-length `loop run`: the tests run a short one
README_MODEL = doc_block("README.md", "A model served from object storage")
LOOP_STEPS = doc_block("docs/loop.md", "Run it")
BENCHMARK_RUN = (
    "gridloop loop run --run bench-1 --iterations 3 --tasks 160 --attempts 3 --out /tmp/loop"
)
HEAVY = {image.name: image.ref() for image in locked_images.IMAGES}


@pytest.fixture(scope="module")
def platform(local_cluster, tmp_path_factory) -> Iterator[Installed]:
    """The README's walk on the running cluster: the vLLM CPU and trainer images taken
    out of its registry first (as if built after `up`), so only the walk's builds can put
    them back; run in a folder of the user's with the repository's examples, `gridloop
    local env` finding the suite's cluster."""
    work = tmp_path_factory.mktemp("loop")
    walk = walk_folder(local_cluster, work)
    tiny = str(work / "tiny")
    script = "\n".join(
        (
            f"{BIN_DIR}/gridloop bundle --skip kaito",  # as `make demo` left ./dist
            substituted(README_MODEL, {".venv/bin/": f"{BIN_DIR}/", "/tmp/tiny": tiny}),
            substituted(LOOP_STEPS, {"/tmp/tiny": tiny, BENCHMARK_RUN: ":"}),
        )
    )
    port = local_cluster.state.ports.registry
    for ref in (HEAVY["vllm-cpu"], HEAVY["trainer"]):
        registry_images.forget(port, ref)
    clear_faults(local_cluster)
    ensure_release_namespace(local_cluster)
    installed = walk.installed(local_cluster, work / "dist" / "gridloop")
    try:
        said = walk.run(script)
        for ref in (HEAVY["vllm-cpu"], HEAVY["trainer"]):
            assert registry_images.holds(port, ref), f"{ref} not pushed by the walk:\n{said}"
        pushes = [x for x in said.splitlines() if x.startswith("images: pushed to")]
        assert any(HEAVY["vllm-cpu"] in x for x in pushes), said[-6000:]
        assert any(HEAVY["trainer"] in x for x in pushes), said[-6000:]
        yield replace(installed, install_output=said)
    finally:
        try:
            # while KubeRay runs: its finalizer would hold the team's namespace
            for job in loop_jobs(local_cluster):
                ray_jobs.delete_rayjob(local_cluster.api, TEAM, job)
            gone = installed.gridloop(
                "uninstall", "--release", USER_RELEASE, "--namespace", USER_NAMESPACE
            )
            assert gone.returncode == 0, gone.stdout + gone.stderr
            # not the release namespace: `local up` made it, with the ServiceAccount whose
            # token Prometheus scrapes Kueue with (deleting it stops that scrape)
            remove_kept_namespaces(local_cluster.core, KEPT_NAMESPACES[1:])
        finally:
            clear_faults(local_cluster)
            # never leave the registry without them
            cluster.push_new_images(local_cluster.state.dir)


def served_models(local_cluster) -> list[str]:
    pods = model_pods(local_cluster, USER_NAMESPACE)
    return [p.metadata.labels["gridloop.io/model"] for p in pods]


def loop_jobs(local_cluster) -> list[str]:
    from kubernetes import client

    found = client.CustomObjectsApi(local_cluster.api).list_namespaced_custom_object(
        "ray.io", "v1", TEAM, "rayjobs", label_selector="gridloop.io/loop-run"
    )
    return [item["metadata"]["name"] for item in found["items"]]


def loop_run(platform: Installed, local_cluster, *extra: str) -> subprocess.Popen[str]:
    """`gridloop loop run` as docs/loop.md runs it: in the walk's folder (its ./dist chart),
    the walk's release, KUBECONFIG and the store's keys from the environment."""
    env = {**tiny_model.store_env(local_cluster), **platform.env}
    return subprocess.Popen(
        [GRIDLOOP, "loop", "run", *ARGS, *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=platform.work,
    )  # fmt: skip


def seeded_attempt(task, split: str, revision: str, line: str) -> Attempt:
    """An attempt the test puts in the store, as if the agent had written `line`."""
    right = line == task.fix
    return Attempt(
        task_id=task.id, split=split, family=task.family, attempt=0, revision=revision,
        temperature=1.0, prompt=task.prompt(""), completion=LETTERS[task.candidates.index(line)],
        choice=task.candidates.index(line), patched_line=line, reward=1.0 if right else 0.0,
        test_exit_code=0 if right else 1, test_output="seeded by the test",
    )  # fmt: skip


def store(local_cluster, bucket: str = "loop") -> Store:
    env = tiny_model.store_env(local_cluster)
    os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})
    return Store(bucket, env["AWS_ENDPOINT_URL"])


def test_a_missing_bucket_is_named_and_nothing_runs(platform, local_cluster) -> None:
    done = loop_run(platform, local_cluster, "--bucket", "no-such-bucket")
    out, _ = done.communicate(timeout=120)

    assert done.returncode == 1, out
    endpoint = tiny_model.store_env(local_cluster)["AWS_ENDPOINT_URL"]
    last = out.strip().splitlines()[-1]
    assert last == f"error: bucket: 'no-such-bucket' does not exist at {endpoint}"
    assert "collect" not in out


def test_the_walks_model_answers_the_openai_client_completion_and_chat(platform, local_cluster):
    """The README's model, served by the README's commands, as OpenAI's client calls it."""
    openai_answers(service_url(local_cluster, USER_NAMESPACE))


def test_a_failed_training_stops_the_iteration_then_a_rerun_closes_the_loop(
    platform, local_cluster, eventually, tmp_path: Path
) -> None:
    suite = make_suite(TASKS, SEED)
    train = suite.train[:TRAIN_TASKS]
    heldout_ids = {t.id for t in suite.heldout}
    loop = store(local_cluster)
    url = service_url(local_cluster, USER_NAMESPACE)
    assert served_root(url) == "s3://models/tiny/r1/"

    # 1. every train task's attempts stored beforehand, all failing: nothing to learn from
    for task in train:
        wrong = next(c for c in task.candidates if c != task.fix)
        seeded = seeded_attempt(task, "train", "s3://models/tiny/r1/", wrong)
        loop.put_attempts(collect_key(RUN, 1, task.id), [seeded])
    failed = loop_run(platform, local_cluster)
    out, _ = failed.communicate(timeout=1200)
    assert failed.returncode == 1, out
    assert f"collect: {TRAIN_TASKS}/{TRAIN_TASKS} tasks" in out, out
    assert f"stopped: train: RayJob {TEAM}/{JOB} failed" in out, out
    assert "tiny still serves r1" in out, out
    record = loop.get_json(f"{RUN}/iteration-1/record.json")
    assert record["outcome"] == "stopped" and "RayJob" in record["reason"]
    assert served_root(url) == "s3://models/tiny/r1/"

    # 2. the seeded attempts removed: the same command runs iteration 1 again, for real,
    # with a client on the model's Service and a GPU fault injected meanwhile
    for key in loop.keys(collect_prefix(RUN, 1)):
        loop._s3.delete_object(Bucket="loop", Key=key)
    node, flavor = FAULTY
    quota = gpu_quota(local_cluster, flavor)
    with Load(url, rate=2, limit_s=1800) as load:
        rerun = loop_run(platform, local_cluster, "--out", str(tmp_path / "out"))
        inject(local_cluster, node)
        eventually(lambda: tainted(local_cluster, node), f"{node} quarantined", 120)
        eventually(lambda: gpu_quota(local_cluster, flavor) == quota - 8, "quota lowered", 120)
        assert rerun.poll() is None, "the fault was handled while the loop ran"
        out, _ = rerun.communicate(timeout=1800)
    assert rerun.returncode == 0, out
    assert f"run {RUN}: iteration 1 stopped before; again" in out

    # the trajectories: every train task's attempts, each reward the test's own verdict
    attempts = loop.read_attempts(collect_prefix(RUN, 1))
    assert {a["task_id"] for a in attempts} == {t.id for t in train}
    assert len(attempts) == TRAIN_TASKS * 3
    fixes = {t.id: t.fix for t in train}
    for a in attempts:
        assert a["revision"] == "s3://models/tiny/r1/" and a["split"] == "train"
        assert a["reward"] == float(a["patched_line"] == fixes[a["task_id"]]), a
        assert a["sandbox"].startswith("sandbox-claim-")
    assert not heldout_ids & {a["task_id"] for a in attempts}
    evaluated = loop.read_attempts(evaluate_prefix(RUN, "r1"))
    assert {a["task_id"] for a in evaluated} <= heldout_ids
    assert len(evaluated) == HELDOUT_TASKS * 2

    # the RayJob: admitted by Kueue, succeeded, and the revision it wrote
    job = ray_jobs.rayjob(local_cluster.api, TEAM, JOB)
    assert job["status"]["jobStatus"] == "SUCCEEDED", job["status"]
    assert ray_jobs.admitted(local_cluster.api, TEAM, "RayJob", JOB) is not None
    models = store(local_cluster, "models")
    trained = models.get_json(f"tiny/{RUN}-1/training.json")
    passing = {(a["prompt"], a["completion"]) for a in attempts if a["reward"] == 1.0}
    assert trained["examples"] == len(passing), trained

    # evaluated, then rolled out or kept, with the reason, the candidate gone
    record = loop.get_json(f"{RUN}/iteration-1/record.json")
    assert record["candidate"] == f"{RUN}-1" and record["heldout_candidate"] is not None
    assert record["outcome"] in ("promoted", "kept"), record
    served = served_root(url)
    if record["outcome"] == "promoted":
        assert served == f"s3://models/tiny/{RUN}-1/"
    else:
        assert served == "s3://models/tiny/r1/" and "under the margin" in record["reason"]
    assert served_models(local_cluster) == ["tiny"]
    assert load.failures == [], load.failures[:5]
    assert load.sent > 0
    for name in ("summary.md", "summary.json", "heldout.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    assert "| 1 | r1 | 30 |" in (tmp_path / "out" / "summary.md").read_text()


def test_a_revision_whose_weights_do_not_load_stops_at_the_candidate_and_nothing_changes(
    platform, local_cluster
) -> None:
    """The next revision is in the store already (training.json there, so no RayJob) but
    its weights are not a model: its candidate server never becomes ready."""
    run, suite = f"{RUN}-bad", make_suite(TASKS, SEED)
    url = service_url(local_cluster, USER_NAMESPACE)
    served = served_root(url)
    loop, models = store(local_cluster), store(local_cluster, "models")
    revision = served.rstrip("/").rsplit("/", 1)[1]
    for task, split in [(t, "train") for t in suite.train[:TRAIN_TASKS]] + [
        (t, "heldout") for t in suite.heldout[:HELDOUT_TASKS]
    ]:  # every attempt stored: nothing to collect or evaluate again
        seeded = seeded_attempt(task, split, served, task.fix)
        key = (
            collect_key(run, 1, task.id)
            if split == "train"
            else f"{evaluate_prefix(run, revision)}{task.id}.jsonl"
        )
        loop.put_attempts(
            key, [seeded, replace(seeded, attempt=1)] if split == "heldout" else [seeded]
        )
    for name, body in (
        ("config.json", b"{not json"),
        ("model.safetensors", b"not weights"),
        ("training.json", b"{}"),
    ):
        models._s3.put_object(Bucket="models", Key=f"tiny/{run}-1/{name}", Body=body)

    bad = loop_run(platform, local_cluster, "--run", run, "--candidate-timeout", "60")
    out, _ = bad.communicate(timeout=900)

    assert bad.returncode == 1, out
    assert f"train: s3://models/tiny/{run}-1/ is already trained" in out, out
    assert "iteration 1: stopped: candidate: gridloop upgrade failed:" in out, out
    # its first crash says why (config.json is not JSON): the wait ends there, not at 60 s
    assert "given up before the 60s timeout" in out, out
    assert f"the files at s3://models/tiny/{run}-1/ are not a model the server loads" in out, out
    assert f"tiny still serves {revision}" in out, out
    assert "cleanup: tiny-candidate removed" in out, out
    assert served_root(url) == served
    assert served_models(local_cluster) == ["tiny"]
    record = loop.get_json(f"{run}/iteration-1/record.json")
    assert record["outcome"] == "stopped" and record["reason"].startswith("candidate:")

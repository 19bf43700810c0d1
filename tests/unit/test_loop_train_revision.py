"""The fine-tuning program the loop's RayJob runs (loop/train_revision.py), where it needs
no torch or Ray: its settings, which attempts it learns from, and its object-store side
against a real versitygw. The training itself runs in the trainer image (docs/loop.md)."""

from __future__ import annotations

import ast
import importlib.resources
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest

from gridloop.loop import train_revision as tr
from gridloop.loop import trajectories

URIS = {
    "TRAJECTORIES_URI": "s3://loop/run1/iteration-1/collect/",
    "BASE_URI": "s3://models/tiny/r1/",
    "OUTPUT_URI": "s3://models/tiny/r2/",
}


def attempt(task: str, split: str, reward: float, completion: str = " B") -> dict[str, object]:
    return {
        "task_id": task,
        "split": split,
        "attempt": 0,
        "revision": "s3://models/tiny/r1/",
        "prompt": f"the failing build {task}\nAnswer:",
        "completion": completion,
        "reward": reward,
    }


def test_the_defaults_are_the_prototypes_and_the_uris_become_prefixes():
    settings = tr.settings_from({**URIS, "BASE_URI": "s3://models/tiny/r1"})

    assert (settings.epochs, settings.learning_rate, settings.batch, settings.seed) == (
        12,
        1e-3,
        8,
        0,
    )
    assert settings.cpus == 1
    assert str(settings.base) == "s3://models/tiny/r1/"
    assert (settings.output.bucket, settings.output.prefix) == ("models", "tiny/r2/")


def test_the_training_settings_are_read_from_their_variables():
    env = {**URIS, "TRAIN_EPOCHS": "3", "TRAIN_LEARNING_RATE": "5e-4", "TRAIN_BATCH": "4"}
    settings = tr.settings_from({**env, "TRAIN_SEED": "9", "TRAIN_CPUS": "2"})

    assert (settings.epochs, settings.learning_rate, settings.batch) == (3, 5e-4, 4)
    assert (settings.seed, settings.cpus) == (9, 2)


@pytest.mark.parametrize(
    ("name", "value", "line"),
    [
        ("TRAJECTORIES_URI", None, "TRAJECTORIES_URI: not set; give s3://BUCKET/PREFIX/"),
        ("BASE_URI", "/models/tiny/r1", "BASE_URI: '/models/tiny/r1' is not an s3://"),
        ("BASE_URI", "gs://models/tiny/r1/", "BASE_URI: 'gs://models/tiny/r1/' is not an s3://"),
        ("OUTPUT_URI", "s3://Models/r2/", "OUTPUT_URI: 'Models' is not an S3 bucket name"),
        ("OUTPUT_URI", "s3://models/", "OUTPUT_URI: 's3://models/' needs a prefix"),
        ("OUTPUT_URI", "s3://models/tiny/../r1/", "OUTPUT_URI: 's3://models/tiny/../r1/' needs"),
        ("OUTPUT_URI", "s3://models/tiny/r1/", "OUTPUT_URI: s3://models/tiny/r1/ overlaps BASE"),
        ("OUTPUT_URI", "s3://models/tiny/", "OUTPUT_URI: s3://models/tiny/ overlaps BASE_URI"),
        ("TRAIN_EPOCHS", "twelve", "TRAIN_EPOCHS: 'twelve' is not a whole number from 1 to 1000"),
        ("TRAIN_EPOCHS", "0", "TRAIN_EPOCHS: '0' is not a whole number from 1 to 1000"),
        ("TRAIN_LEARNING_RATE", "fast", "TRAIN_LEARNING_RATE: 'fast' is not a number from"),
        ("TRAIN_LEARNING_RATE", "2", "TRAIN_LEARNING_RATE: '2' is not a number from 1e-08 to 1"),
        ("TRAIN_BATCH", "8.5", "TRAIN_BATCH: '8.5' is not a whole number from 1 to 1024"),
        ("TRAIN_SEED", "-1", "TRAIN_SEED: '-1' is not a whole number from 0 to"),
        ("TRAIN_CPUS", "0", "TRAIN_CPUS: '0' is not a whole number from 1 to 64"),
    ],
)
def test_a_bad_setting_is_one_line_naming_its_variable(name, value, line, capsys):
    env = (
        {**URIS, name: value} if value is not None else {k: v for k, v in URIS.items() if k != name}
    )

    with pytest.raises(tr.SettingError) as caught:
        tr.settings_from(env)
    assert str(caught.value).startswith(line)
    assert "\n" not in str(caught.value)

    assert tr.main(env) == 2  # the program says the same line and stops before any I/O
    assert capsys.readouterr().err == f"train_revision: {caught.value}\n"


def test_only_successful_train_attempts_are_learnt_each_pair_once():
    records = [
        attempt("t1", "train", 1.0),
        attempt("t1", "train", 1.0),  # the same prompt and completion again
        attempt("t1", "train", 1.0, completion=" B."),  # another text for the same fix
        attempt("t2", "train", 0.0),
        attempt("h1", "heldout", 1.0),  # held out: never trained on, successful or not
        attempt("h2", "heldout", 0.0),
    ]

    chosen = tr.select_examples(records)

    assert chosen.examples == (
        tr.Example("the failing build t1\nAnswer:", " B"),
        tr.Example("the failing build t1\nAnswer:", " B."),
    )
    assert chosen.records == 6
    assert chosen.left_out() == {
        "heldout": 2,
        "heldout_with_reward_1": 1,
        "train_with_reward_0": 1,
        "duplicates": 1,
    }
    assert chosen.revisions == ("s3://models/tiny/r1/",)


def test_held_out_successes_alone_give_no_examples():
    chosen = tr.select_examples([attempt("h1", "heldout", 1.0), attempt("t1", "train", 0)])

    assert chosen.examples == ()
    assert chosen.left_out()["heldout_with_reward_1"] == 1


def _without(key: str) -> dict[str, object]:
    return {k: v for k, v in attempt("t", "train", 1).items() if k != key}


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("{not json", "not JSON (Expecting property name enclosed in double quotes)"),
        ("[1, 2]", "not a JSON object"),
        (json.dumps(_without("reward")), "reward: missing"),
        (json.dumps(attempt("t", "test", 1)), "split: 'test' is not one of ('train', 'heldout')"),
        (json.dumps(attempt("t", "train", 0.5)), "reward: 0.5 is not 0 or 1"),
        (json.dumps({**attempt("t", "train", 1), "reward": True}), "reward: True is not 0 or 1"),
        (json.dumps({**attempt("t", "train", 1), "prompt": None}), "prompt: not a string"),
    ],
)
def test_a_line_that_is_no_attempt_is_named_by_object_and_line(line, says):
    good = json.dumps(attempt("t0", "train", 1))

    with pytest.raises(tr.InputError) as caught:
        tr.parse_records(f"{good}\n{line}\n", "s3://loop/a.jsonl")
    assert str(caught.value) == f"s3://loop/a.jsonl:2: {says}"
    assert len(tr.parse_records(f"{good}\n\n{good}\n", "s3://loop/a.jsonl")) == 2


def test_it_reads_what_the_agent_stores_and_refuses_what_the_loop_refuses():
    stored = trajectories.Attempt(
        task_id="t1",
        split="train",
        family="off-by-one",
        attempt=0,
        revision="s3://models/tiny/r1/",
        temperature=1.0,
        prompt="the failing build\nAnswer:",
        completion="B",
        choice=1,
        patched_line="    return n + 1",
        reward=1.0,
        test_exit_code=0,
        test_output="OK",
    ).line()
    assert tr.select_examples(tr.parse_records(stored, "s3://loop/t1.jsonl")).examples == (
        tr.Example("the failing build\nAnswer:", "B"),
    )
    assert set(tr.REQUIRED_KEYS) <= set(trajectories.REQUIRED)
    assert tr.SPLITS == trajectories.SPLITS
    record = json.loads(stored)
    for bad in ({**record, "split": "test"}, {**record, "reward": 0.5}):
        line = json.dumps(bad)
        with pytest.raises(trajectories.TrajectoryError):
            trajectories.parse_lines(line, "x")
        with pytest.raises(tr.InputError):
            tr.parse_records(line, "x")


def test_training_json_is_uploaded_last():
    names = ["training.json", "tokenizer.json", "model.safetensors", "config.json"]

    assert tr.upload_order(names) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "training.json",
    ]


def test_each_epoch_sees_every_example_once_in_an_order_the_seed_fixes():
    first = tr.batches(19, 8, seed=0, epoch=0)

    assert [len(b) for b in first] == [8, 8, 3]
    assert sorted(i for b in first for i in b) == list(range(19))
    assert first == tr.batches(19, 8, seed=0, epoch=0)
    assert first != tr.batches(19, 8, seed=0, epoch=1)
    assert first != tr.batches(19, 8, seed=1, epoch=0)


def test_the_config_says_float16_under_both_names_it_may_have():
    written = json.loads(tr._float16_config(b'{"dtype": "float32", "vocab_size": 512}'))

    assert written == {"dtype": "float16", "torch_dtype": "float16", "vocab_size": 512}


STDLIB = set(sys.stdlib_module_names)
ALLOWED = {"boto3", "botocore", "ray", "torch", "transformers", "safetensors"}


def test_the_program_imports_nothing_the_trainer_image_lacks():
    source = importlib.resources.files("gridloop.loop").joinpath("train_revision.py").read_text()
    tree = ast.parse(source)
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    roots = {name.split(".")[0] for name in imported}

    assert roots - STDLIB - {"__future__"} <= ALLOWED
    # torch, transformers and ray only inside functions: the driver's checks run without
    top = {a.name.split(".")[0] for n in tree.body if isinstance(n, ast.Import) for a in n.names}
    top |= {n.module.split(".")[0] for n in tree.body if isinstance(n, ast.ImportFrom) and n.module}
    assert top - STDLIB - {"__future__"} == set()


# ---- the object store's side, against a real versitygw -------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def store(tmp_path, monkeypatch) -> Iterator[object]:
    """versitygw as `gridloop local up` starts it (object_store.py), over a temporary
    state folder, its users and policies made (store_admin.py), with boto3's environment
    pointing at it with the host's keys."""
    from gridloop.local.addons import object_store, store_admin
    from gridloop.local.build import building

    port = _free_port()
    object_store.prepare(tmp_path)
    argv = object_store.argv(building.binary("versitygw"), port, object_store.data(tmp_path), False)
    proc = subprocess.Popen(
        argv, env=object_store.env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(object_store.health_url(port), timeout=1)
            break
        except OSError:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "versitygw did not answer in 20 s"
            time.sleep(0.2)
    store_admin.converge(tmp_path, port)
    for name, value in object_store.shell_env(tmp_path, port).items():
        monkeypatch.setenv(name, value)
    yield tr.s3_client()
    proc.terminate()
    proc.wait(timeout=10)


def _put(s3, uri: str, body: bytes | str) -> None:
    bucket, key = uri.removeprefix("s3://").split("/", 1)
    s3.put_object(Bucket=bucket, Key=key, Body=body.encode() if isinstance(body, str) else body)


def _lines(*records: dict[str, object]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


@pytest.mark.needs_binaries("versitygw")
def test_every_jsonl_object_under_the_prefix_is_read_in_key_order(store):
    collect = URIS["TRAJECTORIES_URI"]
    _put(store, f"{collect}t2.jsonl", _lines(attempt("t2", "train", 1)))
    _put(store, f"{collect}t1.jsonl", _lines(attempt("t1", "train", 1), attempt("h", "heldout", 1)))
    _put(store, f"{collect}summary.json", "{}")  # not trajectories
    _put(store, "s3://loop/run1/iteration-2/collect/t3.jsonl", _lines(attempt("t3", "train", 1)))

    objects, records = tr.read_trajectories(store, tr.parse_prefix("T", collect))

    assert objects == 2
    assert [r["task_id"] for r in records] == ["t1", "h", "t2"]


@pytest.mark.needs_binaries("versitygw")
def test_a_revision_is_read_without_its_training_record_and_written_with_it_last(store):
    base, out = tr.parse_prefix("B", URIS["BASE_URI"]), tr.parse_prefix("O", URIS["OUTPUT_URI"])
    for name in ("config.json", "model.safetensors", "tokenizer.json", "training.json"):
        _put(store, f"{URIS['BASE_URI']}{name}", name)
    _put(store, f"{URIS['BASE_URI']}old/model.safetensors", "a folder below is not the revision")

    files = tr.read_revision(store, base)
    assert files == {n: n.encode() for n in ("config.json", "model.safetensors", "tokenizer.json")}
    assert tr.read_done(store, out) is None

    tr.write_revision(store, out, {**files, "training.json": b'{"examples": 1}'})
    assert tr.read_done(store, out) == {"examples": 1}
    listed = store.list_objects_v2(Bucket="models", Prefix="tiny/r2/")["Contents"]
    assert sorted(o["Key"] for o in listed) == sorted(
        f"tiny/r2/{n}" for n in [*files, "training.json"]
    )


@pytest.mark.needs_binaries("versitygw")
def test_no_successful_train_attempt_stops_the_job_with_one_line(store, capsys):
    _put(store, f"{URIS['TRAJECTORIES_URI']}h.jsonl", _lines(attempt("h", "heldout", 1)))
    _put(store, f"{URIS['TRAJECTORIES_URI']}t.jsonl", _lines(attempt("t", "train", 0)))

    assert tr.main(URIS) == 1
    err = capsys.readouterr().err
    assert err == (
        "train_revision: no successful train trajectories under s3://loop/run1/iteration-1/collect/\n"
    )


@pytest.mark.needs_binaries("versitygw")
def test_a_bad_line_stops_the_job_naming_the_object_and_line(store, capsys):
    _put(store, f"{URIS['TRAJECTORIES_URI']}t.jsonl", _lines(attempt("t", "train", 1)) + "oops\n")

    assert tr.main(URIS) == 1
    assert capsys.readouterr().err.startswith(
        "train_revision: s3://loop/run1/iteration-1/collect/t.jsonl:2: not JSON"
    )


@pytest.mark.needs_binaries("versitygw")
def test_a_finished_revision_is_left_alone(store, capsys):
    done = {"base_uri": URIS["BASE_URI"], "trajectories_uri": URIS["TRAJECTORIES_URI"]}
    _put(store, f"{URIS['OUTPUT_URI']}training.json", json.dumps(done))

    assert tr.main(URIS) == 0  # the same job again (a retried RayJob): nothing to do
    assert "is complete already (training.json is there): nothing to do" in capsys.readouterr().out

    other = {**URIS, "TRAJECTORIES_URI": "s3://loop/run1/iteration-2/collect/"}
    assert tr.main(other) == 1  # another job's revision is never overwritten
    assert capsys.readouterr().err.startswith(
        "train_revision: OUTPUT_URI: s3://models/tiny/r2/ already holds a revision trained from"
    )


def test_an_unreachable_store_is_one_line_naming_it(monkeypatch, capsys):
    closed = f"http://127.0.0.1:{_free_port()}"
    for name, value in (("AWS_ENDPOINT_URL", closed), ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")

    assert tr.main({**URIS, "AWS_ENDPOINT_URL": closed}) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"train_revision: the object store at {closed}: Could not connect")
    assert err.count("\n") == 1

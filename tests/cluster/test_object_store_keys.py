"""A key per role in the local object store, refused by versitygw itself: the model
servers' key (the Secret `local up` writes) reads models and writes nothing, a training
run's key (`gridloop local store-key`, the command the README gives) reaches its own
prefixes only, and no Secret in the cluster holds the store's root key.

Nothing here is simulated: the store is the container lane's versitygw, its users made
by `local up` through versitygw's admin API, its refusals its own bucket policies.
"""

from __future__ import annotations

import base64
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError

from doc_blocks import doc_block, substituted
from gridloop.local.addons import object_store

pytestmark = pytest.mark.cluster

RUN, MODEL, REVISION = "keys-test", "keys-test-model/", "keys-test-1"
GRIDLOOP = str(Path(sys.executable).parent / "gridloop")
SEEDED = {  # (bucket, key): what the host's key puts there first
    ("models", f"{MODEL}r1/model.bin"): b"weights",
    ("models", "keys-other-model/r1/model.bin"): b"another model's weights",
    ("loop", f"{RUN}/iteration-1/collect/0.jsonl"): b"{}\n",
    ("loop", "keys-other-run/iteration-1/collect/0.jsonl"): b"{}\n",
    ("checkpoints", "keys-other-run/weights.npz"): b"another run's checkpoint",
}


def client(local_cluster, env: dict[str, str]):
    return boto3.client(
        "s3",
        endpoint_url=object_store.host_url(local_cluster.state.ports.object_store),
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_DEFAULT_REGION"],
    )


def refused(call) -> str:
    """The S3 error code a refused call got ("" when it was not refused)."""
    try:
        call()
    except ClientError as err:
        return str(err.response["Error"]["Code"])
    return ""


@pytest.fixture(scope="module")
def seeded(local_cluster) -> None:
    state = local_cluster.state
    host = client(local_cluster, object_store.shell_env(state.dir, state.ports.object_store))
    for (bucket, key), body in SEEDED.items():
        host.put_object(Bucket=bucket, Key=key, Body=body)


def renamed(text: str, names: dict[str, str]) -> str:
    for old, new in names.items():
        text = text.replace(old, new)
    return text


def secret_env(local_cluster, namespace: str, name: str) -> dict[str, str]:
    found = local_cluster.core.read_namespaced_secret(name, namespace)
    return {k: base64.b64decode(v).decode() for k, v in (found.data or {}).items()}


def test_the_model_servers_key_reads_models_and_writing_there_is_refused(
    local_cluster, seeded
) -> None:
    env = secret_env(local_cluster, object_store.RELEASE_NAMESPACE, object_store.SECRET)
    serving = client(local_cluster, env)

    body = serving.get_object(Bucket="models", Key=f"{MODEL}r1/model.bin")["Body"].read()
    assert body == b"weights"
    listed = serving.list_objects_v2(Bucket="models", Prefix=MODEL)
    assert [o["Key"] for o in listed["Contents"]] == [f"{MODEL}r1/model.bin"]
    attempts = {
        "writing weights": lambda: serving.put_object(
            Bucket="models", Key=f"{MODEL}r1/model.bin", Body=b"evil"
        ),
        "reading trajectories": lambda: serving.get_object(
            Bucket="loop", Key=f"{RUN}/iteration-1/collect/0.jsonl"
        ),
    }
    assert {what: refused(call) for what, call in attempts.items()} == {
        what: "AccessDenied" for what in attempts
    }
    # the weights are as the host put them
    assert serving.get_object(Bucket="models", Key=f"{MODEL}r1/model.bin")["Body"].read() == body


def test_a_training_runs_key_reaches_its_own_prefixes_and_nothing_else(
    local_cluster, seeded, tmp_path
) -> None:
    block = doc_block("docs/security.md", "A key per role in the object store")
    command, *printed = block.splitlines()[:6]  # the store-key command and what it printed
    names = {"tune-tiny-1": REVISION, "tune-tiny": RUN, "tiny/": MODEL}
    line = substituted(command.removeprefix("$ gridloop "), names)
    keys_file = tmp_path / f"{RUN}.env"
    done = subprocess.run(
        [GRIDLOOP, *shlex.split(line)],
        cwd=tmp_path,
        env={**os.environ, "GRIDLOOP_STATE": str(local_cluster.state.dir)},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(keys_file.stat().st_mode) == 0o600
    assert done.stdout.splitlines() == [renamed(ln, names) for ln in printed]
    env = dict(line.split("=", 1) for line in keys_file.read_text().splitlines())
    run = client(local_cluster, env)

    # its own: the trajectories, its checkpoints, the model it tunes, the revision it makes
    run.get_object(Bucket="loop", Key=f"{RUN}/iteration-1/collect/0.jsonl")
    assert run.list_objects_v2(Bucket="loop", Prefix=f"{RUN}/")["KeyCount"] == 1
    run.put_object(Bucket="checkpoints", Key=f"{RUN}/weights.npz", Body=b"mine")
    run.get_object(Bucket="models", Key=f"{MODEL}r1/model.bin")
    run.put_object(Bucket="models", Key=f"{MODEL}{REVISION}/model.bin", Body=b"new weights")
    # anything else is refused by the store
    attempts = {
        "another run's trajectories": lambda: run.get_object(
            Bucket="loop", Key="keys-other-run/iteration-1/collect/0.jsonl"
        ),
        "listing another run's": lambda: run.list_objects_v2(
            Bucket="loop", Prefix="keys-other-run/"
        ),
        "listing the whole bucket": lambda: run.list_objects_v2(Bucket="loop"),
        "writing trajectories": lambda: run.put_object(Bucket="loop", Key=f"{RUN}/x", Body=b"x"),
        "overwriting the served revision": lambda: run.put_object(
            Bucket="models", Key=f"{MODEL}r1/model.bin", Body=b"evil"
        ),
        "another model's weights": lambda: run.get_object(
            Bucket="models", Key="keys-other-model/r1/model.bin"
        ),
        "another run's checkpoint": lambda: run.get_object(
            Bucket="checkpoints", Key="keys-other-run/weights.npz"
        ),
        "the bucket's policy": lambda: run.delete_bucket_policy(Bucket="models"),
    }
    assert {what: refused(call) for what, call in attempts.items()} == {
        what: "AccessDenied" for what in attempts
    }


def test_no_secret_in_the_cluster_holds_the_stores_root_key(local_cluster) -> None:
    root = object_store.keys(local_cluster.state.dir)
    holding = []
    for secret in local_cluster.core.list_secret_for_all_namespaces().items:
        values = [
            base64.b64decode(v).decode(errors="replace") for v in (secret.data or {}).values()
        ]
        if any(root.secret_key in v or root.access_key in v for v in values):
            holding.append(f"{secret.metadata.namespace}/{secret.metadata.name}")
    assert holding == []
    # and the Secret `local up` writes is there, with a key of its own
    served = secret_env(local_cluster, object_store.RELEASE_NAMESPACE, object_store.SECRET)
    assert served["AWS_ACCESS_KEY_ID"] not in (root.access_key, "")

"""Who may do what in the local object store: the roles and the bucket policies that say
it (versitygw enforces them: tests/cluster/test_object_store_keys.py)."""

from __future__ import annotations

import argparse

import pytest

from gridloop.errors import UsageError
from gridloop.local import store_key_command
from gridloop.local.addons import store_access
from gridloop.loop import deciding
from gridloop.loop.agent import LoopError
from gridloop.loop.running import training_role_of


def test_the_model_servers_read_models_and_nothing_else():
    role = store_access.serving()
    assert store_access.allowed(role, "models", "tiny/r1/model.safetensors", "read")
    assert not store_access.allowed(role, "models", "tiny/r1/x", "write")
    assert not store_access.allowed(role, "loop", "demo/x", "read")
    assert not store_access.allowed(role, "checkpoints", "demo/x", "read")


def test_a_training_run_reads_its_inputs_and_writes_only_its_own_prefixes():
    role = store_access.training("demo", "tiny/", "demo-1")
    ok = [
        ("loop", "demo/iteration-1/collect/0.jsonl", "read"),
        ("models", "tiny/r1/model.safetensors", "read"),
        ("models", "tiny/demo-1/model.safetensors", "write"),
        ("checkpoints", "demo/weights.npz", "write"),
        ("checkpoints", "demo/weights.npz", "read"),
    ]
    refused = [
        ("loop", "other/iteration-1/collect/0.jsonl", "read"),
        ("loop", "demo/iteration-1/collect/0.jsonl", "write"),  # trajectories are the loop's
        ("models", "tiny/r1/model.safetensors", "write"),  # the served revision
        ("models", "big/r1/model.safetensors", "read"),
        ("models", "tiny/demo-2/w", "write"),  # another iteration's (minted again for it)
        ("models", "tiny/demo-1-1/w", "write"),  # run demo-1's: names alike, folders apart
        ("checkpoints", "other/weights.npz", "read"),
        ("checkpoints", "demo/weights.npz", "delete"),
    ]
    assert [store_access.allowed(role, *case) for case in ok] == [True] * len(ok)
    assert [store_access.allowed(role, *case) for case in refused] == [False] * len(refused)


def test_the_loops_keys_write_the_revision_its_iteration_makes_and_no_other():
    revision = deciding.next_revision("demo", 3)
    output = deciding.sibling_uri("s3://models/tiny/r1/", revision)
    role = training_role_of("demo", "s3://models/tiny/r1/", output)
    assert store_access.allowed(role, "models", f"tiny/{revision}/training.json", "write")
    assert not store_access.allowed(role, "models", "tiny/r1/training.json", "write")
    assert store_access.model_of(role) == ("tiny/", revision)


def test_a_base_outside_a_models_folder_gets_no_training_keys():
    with pytest.raises(LoopError, match=r"^model: s3://loop/tiny/r1/ is not a revision"):
        training_role_of("demo", "s3://loop/tiny/r1/", "s3://loop/tiny/demo-1/")
    with pytest.raises(LoopError, match=r"^model: s3://models/r1/ is not a revision"):
        training_role_of("demo", "s3://models/r1/", "s3://models/demo-1/")


def test_each_bucket_policy_names_the_keys_by_access_and_lists_only_a_runs_prefix():
    policies = store_access.bucket_policies(
        [("SERVE", store_access.serving()), ("RUN", store_access.training("demo", "tiny/"))]
    )
    assert sorted(policies) == ["checkpoints", "loop", "models"]
    loop = policies["loop"]["Statement"]
    assert loop == [
        {
            "Effect": "Allow",
            "Principal": {"AWS": ["RUN"]},
            "Action": ["s3:GetObject"],
            "Resource": ["arn:aws:s3:::loop/demo/*"],
        },
        {
            "Effect": "Allow",
            "Principal": {"AWS": ["RUN"]},
            "Action": ["s3:ListBucket"],
            "Resource": ["arn:aws:s3:::loop"],
            "Condition": {"StringLike": {"s3:prefix": ["demo/*"]}},
        },
    ]
    serve = [s for s in policies["models"]["Statement"] if s["Principal"]["AWS"] == ["SERVE"]]
    assert {a for s in serve for a in s["Action"]} == {"s3:GetObject", "s3:ListBucket"}
    assert all("Condition" not in s for s in serve)


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        ({"role": "training"}, "--run: a training key is one run's"),
        ({"role": "training", "run": "Bad_Run"}, "--run: 'Bad_Run' must be a DNS label"),
        ({"role": "training", "run": "demo", "model": "tiny"}, "--model: s3://models/tiny must"),
        ({"role": "training", "run": "demo", "revision": "r2"}, "--revision: a revision is"),
        ({"role": "serving", "run": "demo"}, "--run, --model, --revision: only a training"),
    ],
)
def test_bad_store_key_flags_get_one_line_naming_the_flag(flags, said):
    args = argparse.Namespace(**{"run": None, "model": None, "revision": None, **flags})
    with pytest.raises(UsageError) as err:
        store_key_command.role_from(args)
    assert str(err.value).startswith(said)
    assert "\n" not in str(err.value)


def test_the_env_file_holds_what_kubectl_from_env_file_and_boto3_read():
    from gridloop.local.addons.object_store import Keys

    text = store_key_command.env_file_text(Keys("AK", "SK"))
    assert text == "AWS_ACCESS_KEY_ID=AK\nAWS_SECRET_ACCESS_KEY=SK\nAWS_DEFAULT_REGION=us-east-1\n"


class _NoSecrets:
    """The one call the loop makes on a cluster not local: the Secret is not there."""

    def read_namespaced_secret(self, name: str, namespace: str) -> None:
        from kubernetes.client.rest import ApiException

        raise ApiException(status=404, reason="Not Found")


def test_on_a_cluster_not_local_a_missing_training_secret_is_named_with_what_it_must_allow(
    tmp_path,
):
    from gridloop.loop.running import Cluster, Settings

    kubeconfig = tmp_path / "kubeconfig"  # no state.json beside it: not a local cluster
    kubeconfig.write_text("")
    cluster = Cluster.__new__(Cluster)  # no API client: the Secret read is the stand-in's
    cluster.settings, cluster.core = Settings(run="demo", kubeconfig=str(kubeconfig)), _NoSecrets()
    with pytest.raises(LoopError) as err:
        cluster.ensure_secret("s3://models/tiny/r1/", "s3://models/tiny/demo-1/")
    assert str(err.value) == (
        "--secret: no Secret 'loop-demo-s3' in team-default: the training job's store keys, "
        "which read s3://loop/demo/ and s3://models/tiny/r1/ and write "
        "s3://models/tiny/demo-1/ (docs/loop.md)"
    )


def test_a_store_that_does_not_answer_is_named_in_one_line(tmp_path):
    import socket

    from gridloop.local.addons import store_admin

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(UsageError) as err:
        store_admin.converge(tmp_path, port)
    assert str(err.value).startswith(f"object store: cannot reach http://127.0.0.1:{port} (")
    assert str(err.value).endswith("is the local cluster running (`gridloop local status`)?")

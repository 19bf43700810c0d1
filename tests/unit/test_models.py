"""`gridloop models make | push`: a model with no hub, uploaded to a real S3 server
(versitygw, the local cluster's object store)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request

import pytest

from gridloop.cli import main
from gridloop.errors import UsageError
from gridloop.models import making, pushing, uris
from gridloop.models.shapes import PRESETS, Shape


def test_every_preset_has_a_head_size_vllm_cpu_attention_supports():
    for name, shape in PRESETS.items():
        assert shape.head_dim in (32, 64, 80, 96, 112, 128, 160, 192, 224, 256), name
        assert shape.hidden % shape.heads == 0 and shape.heads % shape.kv_heads == 0, name


def test_the_benchmark_preset_has_at_least_one_gib_of_float16_weights():
    assert PRESETS["1g"].parameters() * 2 >= 2**30


def test_shards_cut_at_the_limit_and_keep_order():
    sizes = {"a": 4, "b": 4, "c": 9, "d": 1}
    assert making.shards(list(sizes), sizes, 8) == [["a", "b"], ["c"], ["d"]]


def test_a_made_model_is_a_checkpoint_transformers_would_read(tmp_path):
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    made = making.make(tmp_path / "m", PRESETS["tiny"], seed=3)
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    weights = load_file(str(tmp_path / "m" / "model.safetensors"))
    assert {k: v.shape for k, v in weights.items()} == PRESETS["tiny"].tensors()
    assert made.parameters == sum(v.size for v in weights.values())
    tok = Tokenizer.from_file(str(tmp_path / "m" / "tokenizer.json"))
    ids = tok.encode("the model serves tokens").ids
    assert tok.decode(ids) == "the model serves tokens"
    assert max(ids) < config["vocab_size"]
    assert config["eos_token_id"] == tok.token_to_id("</s>")


def test_a_made_model_has_a_chat_template_that_renders_a_conversation(tmp_path):
    """vLLM's chat endpoint answers 400 without one (the cluster test asks it through the
    openai client); rendered here in a sandboxed Jinja environment, as transformers does."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    making.make(tmp_path / "m", PRESETS["tiny"], seed=3)
    config = json.loads((tmp_path / "m" / "tokenizer_config.json").read_text())
    template = ImmutableSandboxedEnvironment().from_string(config["chat_template"])
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]

    assert template.render(messages=messages, add_generation_prompt=True) == (
        "system: be brief\nuser: hi\nassistant: "
    )
    assert template.render(messages=messages, add_generation_prompt=False).endswith("hi\n")


def test_the_same_seed_gives_the_same_bytes_and_another_seed_others(tmp_path):
    small = Shape(hidden=64, intermediate=64, layers=1, heads=1, kv_heads=1, vocab=300)
    a, b, c = (making.make(tmp_path / n, small, seed=s) for n, s in (("a", 1), ("b", 1), ("c", 2)))
    read = lambda m: (m.folder / "model.safetensors").read_bytes()  # noqa: E731
    assert read(a) == read(b) != read(c)


def test_a_model_past_the_shard_limit_is_sharded_with_an_index(tmp_path):
    made = making.make(tmp_path / "m", PRESETS["tiny"], shard_bytes=200_000)
    index = json.loads((tmp_path / "m" / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1 and all((tmp_path / "m" / s).is_file() for s in shards)
    assert set(index["weight_map"]) == set(PRESETS["tiny"].tensors())
    assert index["metadata"]["total_size"] == made.weight_bytes


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("az://models/tiny/r1/", "az:// is not supported"),
        ("gs://models/tiny/r1/", "gs:// is not supported"),
        ("models/tiny", "is not a URI"),
        ("s3://Models/tiny/", "is not an S3 bucket name"),
        ("s3://models/../etc/", "'..' segment"),
    ],
)
def test_a_uri_that_is_not_s3_is_refused_naming_the_field(uri, words):
    with pytest.raises(UsageError, match=r"^URI: ") as err:
        uris.parse_s3(uri, "URI")
    assert words in str(err.value)


def test_an_s3_uri_is_normalised_to_a_prefix_ending_in_a_slash():
    assert uris.parse_s3("s3://models//tiny/r1", "URI") == uris.S3Uri("models", "tiny/r1/")


def test_a_folder_that_is_no_safetensors_checkpoint_is_refused(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(UsageError, match=r"^DIR: .* no \*\.safetensors file"):
        pushing.model_files(tmp_path)
    with pytest.raises(UsageError, match=r"^DIR: .* is not a folder"):
        pushing.model_files(tmp_path / "missing")
    (tmp_path / "pytorch_model.bin").rename(tmp_path / "model.safetensors")
    (tmp_path / "config.json").unlink()
    with pytest.raises(UsageError, match=r"^DIR: .* no config\.json"):
        pushing.model_files(tmp_path)


def test_make_refuses_a_folder_with_files_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("mine")
    assert main(["models", "make", str(tmp_path), "--size", "tiny"]) == 2
    assert "DIR: " in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]
    assert main(["models", "make", str(tmp_path / "n"), "--size", "huge"]) == 2
    assert "--size: 'huge' is not one of tiny, 1g" in capsys.readouterr().err
    assert not (tmp_path / "n").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def object_store(tmp_path):
    """A real versitygw over a temporary folder with a `models` bucket."""
    from gridloop.local.build import building

    port = _free_port()
    (tmp_path / "data" / "models").mkdir(parents=True)
    env = {
        **os.environ,
        "ROOT_ACCESS_KEY_ID": "testaccess",
        "ROOT_SECRET_ACCESS_KEY": "testsecret1",
    }
    argv = [str(building.binary("versitygw")), "--port", f"127.0.0.1:{port}"]
    argv += ["--health", "/healthz", "--quiet", "posix", str(tmp_path / "data")]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(f"{url}/healthz", timeout=1)
            break
        except OSError:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "versitygw did not answer /healthz in 20 s"
            time.sleep(0.2)
    yield url, tmp_path / "data"
    proc.terminate()
    proc.wait(timeout=10)


@pytest.mark.needs_binaries("versitygw")
def test_push_uploads_every_file_to_a_real_s3_server(object_store, tmp_path, monkeypatch, capsys):
    url, data = object_store
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testaccess")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testsecret1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    made = making.make(tmp_path / "m", PRESETS["tiny"], shard_bytes=300_000)
    assert main(["models", "push", str(made.folder), "s3://models/tiny/r1"]) == 0
    assert "to s3://models/tiny/r1/" in capsys.readouterr().out
    listed = pushing.client(url).list_objects_v2(Bucket="models", Prefix="tiny/r1/")
    assert sorted(o["Key"] for o in listed["Contents"]) == sorted(
        f"tiny/r1/{f}" for f in made.files
    )
    for name in made.files:  # the POSIX backend keeps each object as a file: byte for byte
        assert (data / "models" / "tiny" / "r1" / name).read_bytes() == (
            made.folder / name
        ).read_bytes()


@pytest.mark.needs_binaries("versitygw")
def test_push_to_a_missing_bucket_or_with_wrong_keys_says_which(
    object_store, tmp_path, monkeypatch
):
    url, _data = object_store
    made = making.make(tmp_path / "m", PRESETS["tiny"])
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testaccess")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testsecret1")
    with pytest.raises(UsageError, match=r"^URI: the bucket 'weights' does not exist at http"):
        pushing.push(made.folder, uris.parse_s3("s3://weights/tiny/", "URI"), url)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(UsageError, match="the keys are refused"):
        pushing.push(made.folder, uris.parse_s3("s3://models/tiny/", "URI"), url)

"""The learning loop's fine-tuning step: the program a RayJob runs to make the next revision.

It reads the agent's attempts (JSON lines under TRAJECTORIES_URI), keeps the successful
ones on the train side, fine-tunes the serving revision (BASE_URI) on them (supervised:
the loss is on the completion's tokens alone) and writes the new revision to OUTPUT_URI in
the base's layout (config, tokenizer, float16 safetensors), so vLLM serves it as it served
the base. `training.json` is written last: a revision without it is unfinished.

It runs in the trainer image (images/trainer/), where gridloop is not installed: the loop
ships this file's text to the RayJob (a ConfigMap, read through importlib.resources) and
the driver runs it as a script. So it imports the standard library, boto3, ray, torch,
transformers and safetensors only, never gridloop, and it is one file (its parts: the
settings and the example selection, pure and unit-tested; the object store; the training,
with torch imported inside it; the driver).

The driver (on the Ray head) does all the object store's I/O, with boto3's usual
environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_DEFAULT_REGION); the training runs as one Ray task (TRAIN_CPUS CPUs, default 1, so it
lands on a worker) that is given the base's files and the examples as bytes and returns
the new weights: the workers need no keys. A held-out attempt never enters training, even
a successful one: the held-out tasks are what the revision is judged on.
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REQUIRED_KEYS = ("task_id", "split", "prompt", "completion", "reward", "revision")
SPLITS = ("train", "heldout")
DONE = "training.json"  # written last: its presence means the revision is complete
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")  # S3's bucket naming rules


class SettingError(ValueError):
    """A bad environment variable (exit 2): one line that names it."""


class InputError(ValueError):
    """Inputs no revision can be made from (exit 1): one line that names the object."""


# ---- settings (pure) --------------------------------------------------------------------


@dataclass(frozen=True)
class S3Prefix:
    bucket: str
    prefix: str  # no leading slash, ends with "/"

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


@dataclass(frozen=True)
class Settings:
    trajectories: S3Prefix
    base: S3Prefix
    output: S3Prefix
    epochs: int = 12
    learning_rate: float = 1e-3
    batch: int = 8
    seed: int = 0
    cpus: int = 1  # the training task's Ray CPUs, and torch's threads


def parse_prefix(name: str, value: str | None) -> S3Prefix:
    """`s3://bucket/some/prefix/` (the trailing slash may be left out) or a SettingError."""
    if not value:
        raise SettingError(f"{name}: not set; give s3://BUCKET/PREFIX/")
    scheme, sep, rest = value.partition("://")
    if scheme != "s3" or not sep:
        raise SettingError(f"{name}: {value!r} is not an s3://BUCKET/PREFIX/ URI")
    bucket, _, path = rest.partition("/")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise SettingError(f"{name}: {bucket!r} is not an S3 bucket name (3-63 of a-z 0-9 . -)")
    parts = [p for p in path.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise SettingError(f"{name}: {value!r} needs a prefix with no '.' or '..' segment")
    return S3Prefix(bucket, "".join(f"{p}/" for p in parts))


def _number(
    env: Mapping[str, str], name: str, default: float, low: float, high: float, kind: type
) -> Any:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    what = "a whole number" if kind is int else "a number"
    try:
        value = kind(raw)
    except ValueError:
        raise SettingError(f"{name}: {raw!r} is not {what} from {low:g} to {high:g}") from None
    if not low <= value <= high:
        raise SettingError(f"{name}: {raw!r} is not {what} from {low:g} to {high:g}")
    return value


def settings_from(env: Mapping[str, str]) -> Settings:
    """The run's settings from the environment; the first bad one raises a SettingError."""
    settings = Settings(
        trajectories=parse_prefix("TRAJECTORIES_URI", env.get("TRAJECTORIES_URI")),
        base=parse_prefix("BASE_URI", env.get("BASE_URI")),
        output=parse_prefix("OUTPUT_URI", env.get("OUTPUT_URI")),
        epochs=_number(env, "TRAIN_EPOCHS", 12, 1, 1000, int),
        learning_rate=_number(env, "TRAIN_LEARNING_RATE", 1e-3, 1e-8, 1.0, float),
        batch=_number(env, "TRAIN_BATCH", 8, 1, 1024, int),
        seed=_number(env, "TRAIN_SEED", 0, 0, 2**31 - 1, int),
        cpus=_number(env, "TRAIN_CPUS", 1, 1, 64, int),
    )
    out, base = str(settings.output), str(settings.base)
    if out.startswith(base) or base.startswith(out):
        raise SettingError(f"OUTPUT_URI: {out} overlaps BASE_URI {base}; give the next revision")
    return settings


# ---- which attempts to learn from (pure) ------------------------------------------------


@dataclass(frozen=True)
class Example:
    prompt: str
    completion: str


@dataclass(frozen=True)
class Selection:
    examples: tuple[Example, ...]
    records: int
    # what was left out, and why
    heldout: int  # every held-out attempt
    heldout_rewarded: int  # of which successful: never trained on
    train_unrewarded: int  # train attempts whose fix failed
    duplicates: int  # successful train attempts with a (prompt, completion) seen before
    revisions: tuple[str, ...] = field(default=())  # the revisions that made the attempts

    def left_out(self) -> dict[str, int]:
        return {
            "heldout": self.heldout,
            "heldout_with_reward_1": self.heldout_rewarded,
            "train_with_reward_0": self.train_unrewarded,
            "duplicates": self.duplicates,
        }


def parse_records(text: str, where: str) -> list[dict[str, Any]]:
    """The attempts in one JSON-lines object; a line that is not one names its place.

    The loop's trajectories.parse_lines reads the same lines; this program cannot import
    it (gridloop is not in the trainer image), so a unit test keeps the two agreeing."""
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as err:
            raise InputError(f"{where}:{number}: not JSON ({err.msg})") from None
        if not isinstance(record, dict):
            raise InputError(f"{where}:{number}: not a JSON object")
        missing = [key for key in REQUIRED_KEYS if key not in record]
        if missing:
            raise InputError(f"{where}:{number}: {missing[0]}: missing")
        for key in ("task_id", "prompt", "completion", "revision"):
            if not isinstance(record[key], str):
                raise InputError(f"{where}:{number}: {key}: not a string")
        if record["split"] not in SPLITS:
            raise InputError(f"{where}:{number}: split: {record['split']!r} is not one of {SPLITS}")
        reward = record["reward"]
        if isinstance(reward, bool) or reward not in (0, 1):
            raise InputError(f"{where}:{number}: reward: {reward!r} is not 0 or 1")
        out.append(record)
    return out


def select_examples(records: Iterable[Mapping[str, Any]]) -> Selection:
    """The successful train attempts, each (prompt, completion) once, in the order read."""
    seen: dict[tuple[str, str], Example] = {}
    counts = {"records": 0, "heldout": 0, "heldout_rewarded": 0, "unrewarded": 0, "dups": 0}
    revisions: set[str] = set()
    for record in records:
        counts["records"] += 1
        revisions.add(record["revision"])
        rewarded = record["reward"] == 1
        if record["split"] != "train":
            counts["heldout"] += 1
            counts["heldout_rewarded"] += rewarded
        elif not rewarded:
            counts["unrewarded"] += 1
        elif (record["prompt"], record["completion"]) in seen:
            counts["dups"] += 1
        else:
            seen[(record["prompt"], record["completion"])] = Example(
                record["prompt"], record["completion"]
            )
    return Selection(
        examples=tuple(seen.values()),
        records=counts["records"],
        heldout=counts["heldout"],
        heldout_rewarded=counts["heldout_rewarded"],
        train_unrewarded=counts["unrewarded"],
        duplicates=counts["dups"],
        revisions=tuple(sorted(revisions)),
    )


def upload_order(names: Iterable[str]) -> list[str]:
    """Every file of the new revision, training.json last."""
    return [*sorted(n for n in names if n != DONE), DONE]


def batches(count: int, size: int, seed: int, epoch: int) -> list[list[int]]:
    """The example indices of each batch of an epoch: shuffled by (seed, epoch), so a run
    with the same seed sees the same order."""
    order = list(range(count))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return [order[i : i + size] for i in range(0, count, size)]


# ---- the object store (boto3) -----------------------------------------------------------


def s3_client() -> Any:
    import boto3
    from botocore.config import Config

    # path-style: versitygw (the local object store) serves no bucket-named hosts
    config = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3})
    return boto3.session.Session().client("s3", config=config)


def _keys(s3: Any, uri: S3Prefix) -> list[str]:
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=uri.bucket, Prefix=uri.prefix):
        keys += [item["Key"] for item in page.get("Contents", [])]
    return sorted(keys)


def read_trajectories(s3: Any, uri: S3Prefix) -> tuple[int, list[dict[str, Any]]]:
    """How many *.jsonl objects are under `uri`, and their records in key order."""
    keys = [k for k in _keys(s3, uri) if k.endswith(".jsonl")]
    records = []
    for key in keys:
        text = s3.get_object(Bucket=uri.bucket, Key=key)["Body"].read().decode()
        records += parse_records(text, f"s3://{uri.bucket}/{key}")
    return len(keys), records


def read_revision(s3: Any, uri: S3Prefix) -> dict[str, bytes]:
    """The files directly under `uri` (a revision's), by name; its training.json left out."""
    out = {}
    for key in _keys(s3, uri):
        name = key[len(uri.prefix) :]
        if "/" not in name and name and name != DONE:
            out[name] = s3.get_object(Bucket=uri.bucket, Key=key)["Body"].read()
    if "config.json" not in out or not any(n.endswith(".safetensors") for n in out):
        raise InputError(f"BASE_URI: {uri} holds no config.json and *.safetensors (a revision)")
    return out


def read_done(s3: Any, uri: S3Prefix) -> dict[str, Any] | None:
    """The revision's training.json, or None while it has none."""
    try:
        body = s3.get_object(Bucket=uri.bucket, Key=f"{uri.prefix}{DONE}")["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None
    loaded = json.loads(body)
    return loaded if isinstance(loaded, dict) else {}


def write_revision(s3: Any, uri: S3Prefix, files: Mapping[str, bytes]) -> None:
    for name in upload_order(files):
        s3.put_object(Bucket=uri.bucket, Key=f"{uri.prefix}{name}", Body=files[name])


# ---- the training (torch; runs in the Ray task) -----------------------------------------


def train(
    base_files: Mapping[str, bytes],
    examples: list[tuple[str, str]],
    settings: Mapping[str, Any],
    threads: int,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Fine-tune the base on `examples` (prompt, completion) and return the new revision's
    files (every base file but the weights as it was, the weights in float16 under the
    base's file names) with the loss of each epoch."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.monotonic()
    torch.set_num_threads(threads)
    torch.manual_seed(settings["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, data in base_files.items():
            (folder / name).write_bytes(data)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        shards = {}  # which weights each safetensors file of the base holds
        for name in base_files:
            if name.endswith(".safetensors"):
                with safe_open(folder / name, framework="pt") as weights:
                    shards[name] = list(weights.keys())
    # as vLLM's /v1/completions tokenizes a prompt (add_special_tokens: the tokenizer's own
    # choice, which for gridloop's models adds no BOS), then the sampled text after it
    encoded = []
    for prompt, completion in examples:
        prompt_ids = tokenizer(prompt).input_ids
        completion_ids = tokenizer(completion, add_special_tokens=False).input_ids
        encoded.append((prompt_ids, completion_ids))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings["learning_rate"])
    say(
        f"training on {socket.gethostname()} with {threads} thread(s): {len(encoded)} "
        f"examples, {settings['epochs']} epochs, batch {settings['batch']}, "
        f"learning rate {settings['learning_rate']:g}"
    )
    losses, accuracies = [], []
    model.train()
    for epoch in range(settings["epochs"]):
        started, total, tokens, matched = time.monotonic(), 0.0, 0, 0
        for indices in batches(len(encoded), settings["batch"], settings["seed"], epoch):
            rows = [encoded[i] for i in indices]
            width = max(len(p) + len(c) for p, c in rows)
            ids = torch.full((len(rows), width), pad, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            labels = torch.full((len(rows), width), -100, dtype=torch.long)
            for row, (p, c) in enumerate(rows):  # right-padded: positions stay 0..n-1
                ids[row, : len(p) + len(c)] = torch.tensor(p + c)
                mask[row, : len(p) + len(c)] = 1
                labels[row, len(p) : len(p) + len(c)] = torch.tensor(c)
            logits = model(input_ids=ids, attention_mask=mask).logits
            # the token at position i predicts the one at i + 1: only completion tokens count
            predicted, wanted = logits[:, :-1].float(), labels[:, 1:]
            loss = torch.nn.functional.cross_entropy(
                predicted.reshape(-1, predicted.shape[-1]), wanted.reshape(-1), ignore_index=-100
            )
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            counted = int((wanted != -100).sum())
            total, tokens = total + loss.item() * counted, tokens + counted
            # matched: every token of the completion is the model's first choice (before
            # this step's update), as greedy decoding would give it
            hits = (predicted.argmax(-1) == wanted) | (wanted == -100)
            matched += int(hits.all(dim=1).sum())
        losses.append(round(total / max(tokens, 1), 6))
        accuracies.append(round(matched / len(encoded), 4))
        say(
            f"epoch {epoch + 1}/{settings['epochs']}  loss {losses[-1]:.4f}  completions "
            f"matched {accuracies[-1]:.3f}  ({time.monotonic() - started:.1f}s)"
        )
    state = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()}
    held = {k for names in shards.values() for k in names}
    if held != set(state):
        raise RuntimeError(
            f"the trained model's weights differ from the base's: "
            f"{sorted(held ^ set(state))[:4]} (tied or renamed weights are not handled)"
        )
    files = {n: data for n, data in base_files.items() if not n.endswith(".safetensors")}
    files["config.json"] = _float16_config(base_files["config.json"])
    with tempfile.TemporaryDirectory() as tmp:
        for name, keys in shards.items():  # the base's shards, names and index unchanged
            save_file({k: state[k] for k in keys}, f"{tmp}/{name}", metadata={"format": "pt"})
            files[name] = Path(tmp, name).read_bytes()
    return {
        "files": files,
        "loss_per_epoch": losses,
        "matched_per_epoch": accuracies,
        "train_seconds": round(time.monotonic() - t0, 1),
        "hostname": socket.gethostname(),
        "threads": threads,
    }


def _float16_config(raw: bytes) -> bytes:
    """The base's config.json saying float16, as the weights are written: `torch_dtype`
    (what gridloop's models have, and older readers know) and `dtype` where the base has
    it (transformers 5's name)."""
    config = json.loads(raw)
    config["torch_dtype"] = "float16"
    if "dtype" in config:
        config["dtype"] = "float16"
    return (json.dumps(config, indent=2) + "\n").encode()


def fine_tune(
    base_files: Mapping[str, bytes], examples: list[tuple[str, str]], settings: Mapping[str, Any]
) -> dict[str, Any]:
    """The Ray task: torch's threads are the CPUs Ray gave it (print goes to the driver)."""
    import ray

    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1)
    return train(base_files, examples, settings, threads=max(1, int(cpus)))


# ---- the driver -------------------------------------------------------------------------


def run(settings: Settings) -> int:
    t0 = time.monotonic()
    s3 = s3_client()
    done = read_done(s3, settings.output)
    if done is not None:
        same = (done.get("base_uri"), done.get("trajectories_uri")) == (
            str(settings.base),
            str(settings.trajectories),
        )
        if not same:
            raise InputError(
                f"OUTPUT_URI: {settings.output} already holds a revision trained from "
                f"{done.get('base_uri')} on {done.get('trajectories_uri')}"
            )
        print(f"{settings.output} is complete already ({DONE} is there): nothing to do")
        return 0
    objects, records = read_trajectories(s3, settings.trajectories)
    chosen = select_examples(records)
    left = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in chosen.left_out().items())
    print(
        f"trajectories: {objects} objects, {chosen.records} records under "
        f"{settings.trajectories}: {len(chosen.examples)} examples (train, reward 1, "
        f"deduplicated); left out: {left}"
    )
    if not chosen.examples:
        raise InputError(f"no successful train trajectories under {settings.trajectories}")
    base_files = read_revision(s3, settings.base)
    size = sum(len(b) for b in base_files.values())
    print(f"base: {settings.base} ({len(base_files)} files, {size / 1e6:.1f} MB)")
    import ray

    ray.init()  # in a RayJob: the job's cluster (RAY_ADDRESS); elsewhere a local one
    task = ray.remote(num_cpus=settings.cpus)(fine_tune)
    trained = ray.get(
        task.remote(
            base_files, [(e.prompt, e.completion) for e in chosen.examples], asdict(settings)
        )
    )
    files = trained.pop("files")
    record = {
        "base_uri": str(settings.base),
        "trajectories_uri": str(settings.trajectories),
        "output_uri": str(settings.output),
        "revisions_in_trajectories": list(chosen.revisions),
        "trajectory_objects": objects,
        "records": chosen.records,
        "examples": len(chosen.examples),
        "left_out": chosen.left_out(),
        "epochs": settings.epochs,
        "learning_rate": settings.learning_rate,
        "batch": settings.batch,
        "seed": settings.seed,
        **trained,
        "driver_hostname": socket.gethostname(),
        "files": sorted(files),
        "seconds": round(time.monotonic() - t0, 1),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    files[DONE] = (json.dumps(record, indent=2) + "\n").encode()
    write_revision(s3, settings.output, files)
    print(
        f"wrote {settings.output}: {len(files)} files, loss {record['loss_per_epoch'][0]:.4f} "
        f"-> {record['loss_per_epoch'][-1]:.4f}, in {record['seconds']:.1f}s"
    )
    return 0


def main(env: Mapping[str, str] = os.environ) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        settings = settings_from(env)
    except SettingError as err:
        print(f"train_revision: {err}", file=sys.stderr)
        return 2
    try:
        return run(settings)
    except InputError as err:
        print(f"train_revision: {err}", file=sys.stderr)
    except (BotoCoreError, ClientError) as err:
        where = env.get("AWS_ENDPOINT_URL") or "AWS's default endpoint"
        print(f"train_revision: the object store at {where}: {err}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())

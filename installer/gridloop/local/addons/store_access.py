"""Who may do what in the local object store: a key per role, and the bucket policies that
say it (pure).

versitygw v1.8.0's own access control does the refusing: each role is a user of its
internal IAM (`--iam-dir`, role `user`: no bucket of its own, no admin call), and each
bucket carries an S3 bucket policy whose statements name the users (`Principal`) by
access key. With a policy on the bucket, versitygw allows a user's request only when a
statement matches its action and resource (auth/access-control.go, verifyResourceAccess:
no match is AccessDenied; ACLs are not consulted). Only the store's own root key (kept on
the host, object_store.keys) may create users or change policies.

The roles:
- ``serving``: the model servers (vLLM's Run:ai streamer), the Secret ``models-s3``: read
  and list ``models``, nothing else.
- ``host``: the tools on the host (`gridloop models push`, the learning loop's collector,
  `aws`; `gridloop local env` exports it): read and write ``models``, ``loop`` and
  ``checkpoints``; no admin rights (users, policies, buckets).
- ``training/<run>``: one training run's job (the loop's RayJob, the training example):
  read its own trajectories ``loop/<run>/``, read and write ``checkpoints/<run>/``, and,
  when it fine-tunes a model, read that model's folder and write the one revision folder
  it makes now (the loop re-mints it each iteration: ``<run>-<iteration>``; an exact
  folder, so run ``demo`` cannot write run ``demo-2``'s revisions).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gridloop import names

MODELS, LOOP, CHECKPOINTS = "models", "loop", "checkpoints"
BUCKETS = (MODELS, CHECKPOINTS, LOOP)
READ = ("s3:GetObject",)
WRITE = ("s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts")
DELETE = ("s3:DeleteObject",)
LIST = ("s3:ListBucket",)
SERVING, HOST, TRAINING = "serving", "host", "training"
# a run's name as the loop checks it: it is a prefix in three buckets
_RUN = re.compile(names.RUN_NAME)


@dataclass(frozen=True)
class Grant:
    """Rights on the objects of `bucket` whose keys start with `prefix` ("": all)."""

    bucket: str
    prefix: str = ""
    read: bool = False
    write: bool = False
    delete: bool = False


@dataclass(frozen=True)
class Role:
    name: str  # serving, host, training/<run>
    grants: tuple[Grant, ...]


def serving() -> Role:
    return Role(SERVING, (Grant(MODELS, read=True),))


def host() -> Role:
    return Role(HOST, tuple(Grant(b, read=True, write=True, delete=True) for b in BUCKETS))


def training(run: str, model: str | None = None, revision: str | None = None) -> Role:
    """A run's job; `model` (a folder of the models bucket, ending in "/") is the model it
    fine-tunes, whose revisions it reads; `revision` the one revision folder it writes."""
    check_run(run)
    grants = [Grant(LOOP, f"{run}/", read=True), Grant(CHECKPOINTS, f"{run}/", True, True)]
    if model is not None:
        if not model.endswith("/") or model.startswith("/") or model == "/":
            raise ValueError(f"model: s3://{MODELS}/{model} must be a folder (end with '/')")
        grants.append(Grant(MODELS, model, read=True))
    if revision is not None:
        if model is None:
            raise ValueError("revision: a revision is one of a model's: name the model too")
        if not _RUN.match(revision):
            raise ValueError(f"revision: {revision!r} must be a DNS label")
        grants.append(Grant(MODELS, f"{model}{revision}/", write=True))
    return Role(f"{TRAINING}/{run}", tuple(grants))


def model_of(role: Role) -> tuple[str | None, str | None]:
    """The models folder a training role fine-tunes and the revision it writes."""
    if not role.name.startswith(f"{TRAINING}/"):
        return None, None
    model = next((g.prefix for g in role.grants if g.bucket == MODELS and g.read), None)
    written = next((g.prefix for g in role.grants if g.bucket == MODELS and g.write), None)
    revision = written.removeprefix(model or "").rstrip("/") if written else None
    return model, revision


def check_run(run: str) -> None:
    if not _RUN.match(run):
        raise ValueError(
            f"run: {run!r} must be a DNS label (lower-case letters, digits and '-', at most 40)"
        )


def role_of(name: str, model: str | None = None, revision: str | None = None) -> Role:
    """The role a kept name stands for (`serving`, `host`, `training/<run>`)."""
    if name == SERVING:
        return serving()
    if name == HOST:
        return host()
    kind, _, run = name.partition("/")
    if kind == TRAINING and run:
        return training(run, model, revision)
    raise ValueError(f"role: {name!r} is none of serving, host, training/<run>")


def _statements(access: str, grant: Grant) -> list[dict[str, Any]]:
    who = {"AWS": [access]}
    objects = f"arn:aws:s3:::{grant.bucket}/{grant.prefix}*"
    out: list[dict[str, Any]] = []
    actions = (READ if grant.read else ()) + (WRITE if grant.write else ())
    actions += DELETE if grant.delete else ()
    if actions:
        out.append(
            {"Effect": "Allow", "Principal": who, "Action": list(actions), "Resource": [objects]}
        )
    if grant.read:
        listing: dict[str, Any] = {
            "Effect": "Allow",
            "Principal": who,
            "Action": list(LIST),
            "Resource": [f"arn:aws:s3:::{grant.bucket}"],
        }
        if grant.prefix:
            listing["Condition"] = {"StringLike": {"s3:prefix": [f"{grant.prefix}*"]}}
        out.append(listing)
    return out


def bucket_policies(accounts: Iterable[tuple[str, Role]]) -> dict[str, dict[str, Any]]:
    """Each bucket's policy: every (access key, role)'s statements on it. A bucket no role
    names gets none (then only the root key reaches it)."""
    statements: dict[str, list[dict[str, Any]]] = {}
    for access, role in accounts:
        for grant in role.grants:
            statements.setdefault(grant.bucket, []).extend(_statements(access, grant))
    return {
        bucket: {"Version": "2012-10-17", "Statement": found}
        for bucket, found in sorted(statements.items())
    }


def allowed(role: Role, bucket: str, key: str, action: str) -> bool:
    """What the policies allow `role`, read from its grants as the statements are made
    (the unit tests' reading of a role): `action` is read, write or delete."""
    return any(
        g.bucket == bucket and key.startswith(g.prefix) and getattr(g, action) for g in role.grants
    )


def describe(role: Role) -> list[str]:
    """One line per grant, as docs and the CLI show it."""
    lines = []
    for g in role.grants:
        rights = [r for r in ("read", "write", "delete") if getattr(g, r)]
        lines.append(f"s3://{g.bucket}/{g.prefix}*: {', '.join(rights)}")
    return lines

"""The local object store's users and bucket policies, made with its root key (the shell
of store_access.py).

Users go through versitygw's admin API (`PATCH /create-user`, on the S3 port when no
`--admin-port` is given; what `versitygw admin create-user` sends: the account as XML,
signed with SigV4 by the root key), never its files; policies through S3's own
PutBucketPolicy. Both are idempotent, so `up` and every mint of a training run's keys
converge all of them.
"""

from __future__ import annotations

import hashlib
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from gridloop.errors import UsageError
from gridloop.local.addons import object_store, store_access


def _signed(url: str, body: bytes, root: object_store.Keys) -> urllib.request.Request:
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    digest = hashlib.sha256(body).hexdigest()
    request = AWSRequest(
        method="PATCH", url=url, data=body, headers={"X-Amz-Content-Sha256": digest}
    )
    creds = Credentials(root.access_key, root.secret_key)
    S3SigV4Auth(creds, "s3", object_store.REGION).add_auth(request)
    return urllib.request.Request(url, data=body, headers=dict(request.headers), method="PATCH")


def create_user(endpoint: str, root: object_store.Keys, keys: object_store.Keys) -> bool:
    """The user of `keys` (versitygw role `user`: no admin call, no bucket of its own);
    False when it was there already."""
    body = (
        "<Account>"
        f"<Access>{escape(keys.access_key)}</Access><Secret>{escape(keys.secret_key)}</Secret>"
        "<Role>user</Role><UserID>0</UserID><GroupID>0</GroupID><ProjectID>0</ProjectID>"
        "</Account>"
    ).encode()
    try:
        with urllib.request.urlopen(_signed(f"{endpoint}/create-user", body, root), timeout=10):
            return True
    except urllib.error.HTTPError as err:
        said = err.read().decode(errors="replace")
        if err.code == 409 or "UserAlreadyExists" in said or "already exists" in said:
            return False
        raise UsageError(f"object store: create-user answered {err.code}: {said[:300]}") from None
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", None) or err
        raise UsageError(
            f"object store: cannot reach {endpoint} ({reason}): is the local cluster running "
            "(`gridloop local status`)?"
        ) from None


def put_policies(
    endpoint: str, root: object_store.Keys, policies: dict[str, dict[str, Any]]
) -> None:
    import json

    import boto3

    s3 = boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint,
        region_name=object_store.REGION,
        aws_access_key_id=root.access_key,
        aws_secret_access_key=root.secret_key,
    )
    for bucket, policy in policies.items():
        s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))


def converge(state_dir: Path, port: int) -> tuple[int, int]:
    """Every kept role a user with its bucket policies; (users made, buckets)."""
    endpoint = object_store.host_url(port)
    root = object_store.keys(state_dir)
    kept = object_store.accounts(state_dir)
    made = sum(create_user(endpoint, root, keys) for keys, _ in kept)
    policies = store_access.bucket_policies((keys.access_key, role) for keys, role in kept)
    put_policies(endpoint, root, policies)
    return made, len(policies)


def mint(state_dir: Path, port: int, role: store_access.Role) -> object_store.Keys:
    """`role`'s keys, made a user with its rights now (a running store)."""
    keys = object_store.role_keys(state_dir, role)
    converge(state_dir, port)
    return keys

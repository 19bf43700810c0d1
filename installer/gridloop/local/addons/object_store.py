"""The local cluster's object store: versitygw's POSIX backend, S3 over a folder.

Model weights stream from it (vLLM's Run:ai streamer in a pod) and `gridloop models push`
uploads to it. It is real S3 software, not a mock of AWS: versitygw built from its Go
module (recipes.py), serving the folder `<state>/object-store/data/`, one directory per
bucket.

A host process, not a pod, for the same reasons as the image registry beside it: what it
holds outlives any pod and any chart release (a `gridloop uninstall` keeps the models),
it needs no image, and it is to the cluster what S3 is to a cloud one: outside it,
reached by URL. Pods reach it as they reach the local Prometheus: through a Service
without selector, `object-store` in namespace `object-store`, whose EndpointSlice points
at the first container node's address on the bridge; the port takes connections from
loopback and the bridge only (hostnet.guard_host_ports).

Its root user's keys are made at the first `up` (random), kept in the state directory
(0600) and handed to versitygw in its environment (never on a command line, which `ps`
shows); they stay on the host: the store's own admin key, which makes the others. Every
other client has a key of its own role (store_access.py says which may do what): made
here, kept beside the root's (access.json, 0600), made users of versitygw's internal IAM
(`--iam-dir`) by store_admin.py. `up` writes the serving role's keys as the Secret
`models-s3` for the chart's model servers (`credentialsSecret`); `gridloop local env`
exports the host role's; a training run's are minted for it (`gridloop local store-key`,
the learning loop).
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gridloop import names
from gridloop.local.addons import store_access
from gridloop.local.addons.host_services import host_endpoint_slice
from gridloop.local.ports import LOOPBACK

PROCESS = "object-store"
BINARY = "versitygw"
NAMESPACE = "object-store"
SERVICE = "object-store"
SERVICE_PORT = 9000  # the in-cluster port, as MinIO and most S3-compatible servers use
# the namespace `gridloop install` installs into by default, where `up` writes the Secret
RELEASE_NAMESPACE = names.DEFAULT_NAMESPACE
SECRET = "models-s3"  # the Secret the local profile's models name in credentialsSecret
# model weights; what training jobs write; the learning loop's trajectories
BUCKETS = store_access.BUCKETS
REGION = "us-east-1"
HEALTH_PATH = "/healthz"
LABELS = {"app.kubernetes.io/name": "object-store", "app.kubernetes.io/part-of": "gridloop-local"}


@dataclass(frozen=True)
class Keys:
    access_key: str
    secret_key: str


def folder(state_dir: Path) -> Path:
    return state_dir / "object-store"


def data(state_dir: Path) -> Path:
    """Where the objects are: one directory per bucket."""
    return folder(state_dir) / "data"


def _new_keys() -> Keys:
    return Keys(f"GL{secrets.token_hex(9).upper()}", secrets.token_urlsafe(30))


def _write_private(path: Path, doc: Any) -> None:
    """`doc` as JSON at `path`, 0600 from the start, replaced whole (a reader never sees
    half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.part")
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(json.dumps(doc, indent=1, sort_keys=True))
    os.replace(part, path)


def keys(state_dir: Path) -> Keys:
    """The root user's keys, made on first use and kept (0600)."""
    path = folder(state_dir) / "credentials.json"
    try:
        doc = json.loads(path.read_text())
        return Keys(str(doc["accessKey"]), str(doc["secretKey"]))
    except (OSError, ValueError, KeyError):
        pass
    made = _new_keys()
    _write_private(path, {"accessKey": made.access_key, "secretKey": made.secret_key})
    return made


def iam_dir(state_dir: Path) -> Path:
    """versitygw's internal IAM: its users (the roles' keys), users.json."""
    return folder(state_dir) / "iam"


def _access_path(state_dir: Path) -> Path:
    return folder(state_dir) / "access.json"


def _kept(state_dir: Path) -> dict[str, Any]:
    try:
        doc = json.loads(_access_path(state_dir).read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


@contextmanager
def _access_lock(state_dir: Path) -> Iterator[None]:
    """One writer of access.json at a time (two loops minting their runs' keys at once)."""
    path = folder(state_dir) / "access.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def role_keys(state_dir: Path, role: store_access.Role) -> Keys:
    """The keys of `role`, made on first use and kept (0600) with the model a training run
    fine-tunes and the revision it writes; a run keeps its keys while these change, its
    rights follow (store_admin.converge writes them)."""
    model, revision = store_access.model_of(role)
    covers = {"model": model, "revision": revision}
    with _access_lock(state_dir):
        doc = _kept(state_dir)
        entry = doc.get(role.name)
        if isinstance(entry, dict) and "access" in entry and "secret" in entry:
            if {k: entry.get(k) for k in covers} != covers:
                doc[role.name] = {**entry, **covers}
                _write_private(_access_path(state_dir), doc)
            return Keys(str(entry["access"]), str(entry["secret"]))
        made = _new_keys()
        doc[role.name] = {"access": made.access_key, "secret": made.secret_key, **covers}
        _write_private(_access_path(state_dir), doc)
        return made


def accounts(state_dir: Path) -> list[tuple[Keys, store_access.Role]]:
    """Every kept role's keys and role (serving and host made if missing); a kept name this
    gridloop does not know gets no rights."""
    role_keys(state_dir, store_access.serving())
    role_keys(state_dir, store_access.host())
    out = []
    for name, entry in sorted(_kept(state_dir).items()):
        if not isinstance(entry, dict) or not {"access", "secret"} <= set(entry):
            continue  # not an entry this gridloop wrote: no user, no rights
        model, revision = entry.get("model"), entry.get("revision")
        try:
            role = store_access.role_of(
                name,
                model if isinstance(model, str) else None,
                revision if isinstance(revision, str) else None,
            )
        except ValueError:
            continue
        out.append((Keys(str(entry["access"]), str(entry["secret"])), role))
    return out


def argv(binary: Path, port: int, data_dir: Path, every_address: bool) -> list[str]:
    """versitygw on loopback, or (container nodes: pods read it) every address behind the
    host guard; keys come from env(), users from its internal IAM beside the data."""
    listen = "0.0.0.0" if every_address else LOOPBACK
    return [
        str(binary),
        "--port",
        f"{listen}:{port}",
        "--region",
        REGION,
        "--health",
        HEALTH_PATH,
        "--iam-dir",
        str(data_dir.parent / "iam"),
        "--quiet",
        "posix",
        str(data_dir),
    ]


def env(state_dir: Path) -> dict[str, str]:
    k = keys(state_dir)
    return {"ROOT_ACCESS_KEY_ID": k.access_key, "ROOT_SECRET_ACCESS_KEY": k.secret_key}


def prepare(state_dir: Path) -> None:
    """The data folder and one directory per bucket (the POSIX backend's buckets), and
    the IAM's folder."""
    iam_dir(state_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
    for bucket in BUCKETS:
        (data(state_dir) / bucket).mkdir(parents=True, exist_ok=True)


def host_url(port: int) -> str:
    """The endpoint on the host (`gridloop models push`, the benchmarks)."""
    return f"http://{LOOPBACK}:{port}"


def cluster_url() -> str:
    """The endpoint pods use."""
    return f"http://{SERVICE}.{NAMESPACE}.svc.cluster.local:{SERVICE_PORT}"


def health_url(port: int) -> str:
    return f"{host_url(port)}{HEALTH_PATH}"


def shell_env(state_dir: Path, port: int) -> dict[str, str]:
    """What `gridloop local env` exports so S3 clients on the host reach the store: the
    host role's keys (store_access.host), not the root's."""
    k = role_keys(state_dir, store_access.host())
    return {
        "AWS_ENDPOINT_URL": host_url(port),
        "AWS_ACCESS_KEY_ID": k.access_key,
        "AWS_SECRET_ACCESS_KEY": k.secret_key,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def key_env(k: Keys) -> dict[str, str]:
    """A role's keys as the Run:ai streamer, boto3 and `kubectl --from-env-file` read them."""
    return {
        "AWS_ACCESS_KEY_ID": k.access_key,
        "AWS_SECRET_ACCESS_KEY": k.secret_key,
        "AWS_DEFAULT_REGION": REGION,
    }


def secret_object(
    state_dir: Path,
    namespace: str,
    role: store_access.Role | None = None,
    name: str = SECRET,
) -> dict[str, Any]:
    """A Secret of `role`'s keys (default: serving, the Secret a model's
    `credentialsSecret` names), loaded with envFrom; the endpoint is not among them (it is
    the model's `s3.endpoint`)."""
    k = role_keys(state_dir, role or store_access.serving())
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": LABELS},
        "type": "Opaque",
        "stringData": key_env(k),
    }


def cluster_objects(
    backend: str, port: int, release_namespace: str, state_dir: Path
) -> list[dict[str, Any]]:
    """The namespace and selectorless Service pods reach the store by, its EndpointSlice to
    the host process (`backend`:`port`), and the release namespace with the keys' Secret."""
    ports = [{"name": "s3", "port": SERVICE_PORT, "protocol": "TCP"}]
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": NAMESPACE, "labels": LABELS},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": NAMESPACE, "labels": LABELS},
            "spec": {"ports": ports},
        },
        host_endpoint_slice(
            NAMESPACE, SERVICE, LABELS, backend, [{"name": "s3", "port": port, "protocol": "TCP"}]
        ),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": release_namespace}},
        secret_object(state_dir, release_namespace),
    ]

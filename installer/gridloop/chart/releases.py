"""Helm's record of a release: read its newest revision, and roll an interrupted one forward.

Helm keeps each revision in a Secret `sh.helm.release.v1.<release>.v<N>` (labels
owner=helm, name, version, status), whose `release` key is base64(gzip(JSON)). An
install killed while Helm was applying leaves the newest revision `pending-install` or
`pending-upgrade`, and every later `helm upgrade` refuses with "another operation is in
progress". Helm has no command to clear that; `unlock` does what Flux's helm-controller
does: it marks that revision failed (status label and record, under optimistic
locking), so the next `helm upgrade --install` rolls forward from it. Never call it
while another install may be running.
"""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from gridloop.chart import diagnosis, doctoring
from gridloop.errors import ClusterError
from gridloop.kube import get, reached

UNLOCKED = "interrupted; marked failed by gridloop install to roll forward"


def latest(api: client.ApiClient, release: str, namespace: str) -> diagnosis.Release | None:
    return doctoring.latest_release(_secrets(api, release, namespace))


def manifest(api: client.ApiClient, release: str, namespace: str) -> str | None:
    """The manifest the newest revision recorded, as `helm get manifest` prints it, read
    from its Secret (no helm process: a second of each install); None without a release."""
    found = _newest(_secrets(api, release, namespace))
    if found is None:
        return None
    return str(decode(found[1]["data"]["release"]).get("manifest") or "")


def _newest(
    secrets: list[dict[str, Any]],
) -> tuple[diagnosis.Release, dict[str, Any]] | None:
    """The newest revision among a release's Secrets, and its Secret; None without one."""
    newest = doctoring.latest_release(secrets)
    if newest is None:
        return None
    (secret,) = [
        s for s in secrets if s["metadata"]["labels"].get("version") == str(newest.revision)
    ]
    return newest, secret


def _secrets(api: client.ApiClient, release: str, namespace: str) -> list[dict[str, Any]]:
    try:
        found = get(
            api,
            f"/api/v1/namespaces/{namespace}/secrets",
            {"labelSelector": f"owner=helm,name={release}"},
        )
    except ApiException as err:
        raise ClusterError(
            f"reading release {release} in {namespace}: {err.status} {err.reason}"
        ) from err
    return list(found.get("items") or [])


def decode(data: str) -> dict[str, Any]:
    """A Secret's `release` value (as the API returns it, base64) -> Helm's release JSON."""
    inner = base64.b64decode(base64.b64decode(data))
    raw = gzip.decompress(inner) if inner[:2] == b"\x1f\x8b" else inner
    out: dict[str, Any] = json.loads(raw)
    return out


def encode(release: dict[str, Any]) -> str:
    """Helm's encoding (gzip, base64), then the Secret's (base64)."""
    packed = gzip.compress(json.dumps(release, separators=(",", ":")).encode(), mtime=0)
    return base64.b64encode(base64.b64encode(packed)).decode()


def unlock(api: client.ApiClient, release: str, namespace: str) -> int | None:
    """Mark the newest revision failed if it is pending; return its number, else None."""
    found = _newest(_secrets(api, release, namespace))
    if found is None or not found[0].status.startswith("pending-"):
        return None
    newest, secret = found
    record = decode(secret["data"]["release"])
    record.setdefault("info", {})
    record["info"]["status"] = "failed"
    record["info"]["description"] = UNLOCKED
    patch = {
        "metadata": {
            "labels": {"status": "failed"},
            "resourceVersion": secret["metadata"]["resourceVersion"],
        },
        "data": {"release": encode(record)},
    }
    core = client.CoreV1Api(api)
    try:
        reached(
            api, lambda: core.patch_namespaced_secret(secret["metadata"]["name"], namespace, patch)
        )
    except ApiException as err:
        raise ClusterError(
            f"marking release {release} revision {newest.revision} failed: "
            f"{err.status} {err.reason}"
        ) from err
    return newest.revision

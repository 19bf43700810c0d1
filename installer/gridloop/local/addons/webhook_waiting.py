"""Wait until every webhook that fails closed answers, so `local up` returns a usable cluster.

Why: `gridloop local up` used to return as soon as Kueue's process started, before its
webhook server listened. A `kubectl create deployment` right after failed with
``failed calling webhook "mdeployment.kb.io" ... dial tcp 127.0.0.1:36409: connect:
connection refused``: a webhook with ``failurePolicy: Fail`` refuses every matching
request while nothing answers it. So `up` waits until each such webhook answers an
AdmissionReview, any HTTP status counting as an answer (the question is whether the API
server can reach it, not what it decides).

``blocking_webhooks`` and ``review_request`` are pure; ``wait_answering`` polls through the
``post`` it is given, and ``post_url`` / ``post_service`` are the thin HTTPS senders. This
module reads webhook configurations it is handed and talks to webhook servers only: it must
never write to the cluster (no dry-run objects, no annotations), and the review it sends is
marked ``dryRun`` so no webhook acts on it.
"""

from __future__ import annotations

import base64
import binascii
import http.client
import json
import socket
import ssl
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from gridloop.local.ports import LOOPBACK

POLL_SECONDS = 0.2
POST_SECONDS = 2.0
PROBE_NAME = "gridloop-webhook-probe"


class ServiceRef(NamedTuple):
    """A webhook's ``clientConfig.service``, with the API's defaults filled in."""

    namespace: str
    name: str
    port: int = 443
    path: str = ""

    @property
    def dns_name(self) -> str:
        """The name the API server checks on the webhook's certificate."""
        return f"{self.name}.{self.namespace}.svc"


@dataclass(frozen=True)
class Hook:
    """One webhook the API server must reach before matching requests can succeed."""

    config: str  # the Mutating/ValidatingWebhookConfiguration's name
    name: str  # the webhook's name, e.g. mdeployment.kb.io
    url: str | None
    service: ServiceRef | None
    ca_bundle: bytes  # PEM; empty: the system's trusted CAs, as the API server does


# sends one review to one hook: the HTTP status, or None when the connection failed
Post = Callable[[Hook, bytes], int | None]


def blocking_webhooks(configs: Sequence[Mapping[str, Any]]) -> list[Hook]:
    """Every webhook of these configurations (API objects, camelCase) whose failure policy
    is Fail, the API's default when it is absent. ``Ignore`` webhooks are skipped: an
    unreachable one lets requests through."""
    hooks = []
    for config in configs:
        config_name = str((config.get("metadata") or {}).get("name", ""))
        for webhook in config.get("webhooks") or []:
            if webhook.get("failurePolicy", "Fail") != "Fail":
                continue
            client_config = webhook.get("clientConfig") or {}
            url = client_config.get("url")
            hooks.append(
                Hook(
                    config=config_name,
                    name=str(webhook.get("name", "")),
                    url=url if isinstance(url, str) else None,
                    service=_service(client_config.get("service")),
                    ca_bundle=_ca_bundle(client_config.get("caBundle")),
                )
            )
    return hooks


def review_request(hook: Hook) -> bytes:
    """A minimal admission.k8s.io/v1 AdmissionReview of creating a Pod, dry run: enough for
    any webhook server to parse and answer, whatever it then decides."""
    uid = uuid.uuid5(uuid.NAMESPACE_URL, f"gridloop-webhook-probe/{hook.config}/{hook.name}")
    kind = {"group": "", "version": "v1", "kind": "Pod"}
    resource = {"group": "", "version": "v1", "resource": "pods"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": PROBE_NAME, "namespace": "default"},
        "spec": {"containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}]},
    }
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uid),
            "kind": kind,
            "resource": resource,
            "requestKind": kind,
            "requestResource": resource,
            "name": PROBE_NAME,
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": PROBE_NAME},
            "object": pod,
            "oldObject": None,
            "dryRun": True,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }
    return json.dumps(review, separators=(",", ":")).encode()


def wait_answering(
    hooks: Sequence[Hook],
    timeout: float,
    post: Post,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Hook]:
    """Post a review to every hook each POLL_SECONDS until each has answered once (any HTTP
    status; ``post`` returns None when the connection failed). Returns the hooks still not
    answering at the deadline: empty when all answer. Every hook is tried at least once."""
    deadline = clock() + timeout
    waiting = list(hooks)
    while True:
        waiting = [hook for hook in waiting if post(hook, review_request(hook)) is None]
        if not waiting or clock() + POLL_SECONDS > deadline:
            return waiting
        sleep(POLL_SECONDS)


def post_url(hook: Hook, body: bytes) -> int | None:
    """POST ``body`` to a URL webhook over HTTPS, trusting its caBundle; the HTTP status,
    or None when it cannot be reached (refused, timed out, TLS refused, no URL)."""
    if hook.url is None:
        return None
    parts = urlsplit(hook.url)
    if parts.scheme != "https" or parts.hostname is None:
        return None
    try:
        port = parts.port or 443
    except ValueError:
        return None
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return _post(parts.hostname, port, parts.hostname, path, hook.ca_bundle, body)


def post_service(hook: Hook, body: bytes, address: str = LOOPBACK) -> int | None:
    """POST ``body`` to a Service webhook at ``address`` (where the local cluster's
    ExternalName Service sends the API server), checking the certificate names the
    Service as the API server does; the HTTP status, or None when it cannot be reached."""
    if hook.service is None:
        return None
    service = hook.service
    path = service.path or "/"
    return _post(address, service.port, service.dns_name, path, hook.ca_bundle, body)


def post_hook(hook: Hook, body: bytes) -> int | None:
    """``post_url`` for a URL webhook, else ``post_service`` at 127.0.0.1."""
    return post_url(hook, body) if hook.url is not None else post_service(hook, body)


class _Connection(http.client.HTTPSConnection):
    """HTTPS to ``address`` while checking the certificate against ``host``."""

    def __init__(self, host: str, address: str, port: int, context: ssl.SSLContext) -> None:
        super().__init__(host, port, timeout=POST_SECONDS, context=context)
        self._address = address
        self._tls = context

    def connect(self) -> None:
        raw = socket.create_connection((self._address, self.port), POST_SECONDS)
        self.sock = self._tls.wrap_socket(raw, server_hostname=self.host)


def _post(address: str, port: int, host: str, path: str, ca: bytes, body: bytes) -> int | None:
    try:
        context = ssl.create_default_context(cadata=ca.decode("ascii") if ca else None)
        connection = _Connection(host, address, port, context)
    except (ssl.SSLError, ValueError):
        return None  # a caBundle that is not PEM: the API server could not call it either
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json"})
        return connection.getresponse().status
    except (OSError, http.client.HTTPException):
        return None  # refused, reset, timed out, TLS refused: not answering
    finally:
        connection.close()


def _service(data: object) -> ServiceRef | None:
    if not isinstance(data, Mapping):
        return None
    port = data.get("port", 443)
    return ServiceRef(
        namespace=str(data.get("namespace", "")),
        name=str(data.get("name", "")),
        port=port if isinstance(port, int) else 443,
        path=str(data.get("path") or ""),
    )


def _ca_bundle(data: object) -> bytes:
    """caBundle as the API returns it, base64 text (bytes are taken as already decoded)."""
    if isinstance(data, bytes):
        return data
    if not isinstance(data, str) or not data:
        return b""
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return b""

"""`local up` waits until every fail-closed webhook answers, whatever it answers."""

from __future__ import annotations

import base64
import datetime
import http.server
import ipaddress
import json
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gridloop.local.addons.webhook_waiting import (
    Hook,
    ServiceRef,
    blocking_webhooks,
    post_hook,
    post_service,
    post_url,
    review_request,
    wait_answering,
)

SERVICE_DNS = "kueue-webhook-service.kueue-system.svc"
CA_B64 = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n...").decode()


def config(kind: str, name: str, webhooks: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": webhooks,
    }


def webhook(name: str, client_config: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"name": name, "clientConfig": client_config, **fields}


SERVICE = {"namespace": "kueue-system", "name": "kueue-webhook-service", "port": 9443}
BLOCKING_CASES = [
    (
        "absent-policy-is-fail",
        [
            config(
                "MutatingWebhookConfiguration", "m", [webhook("mpod.kb.io", {"url": "https://h/x"})]
            )
        ],
        [Hook("m", "mpod.kb.io", "https://h/x", None, b"")],
    ),
    (
        "ignore-is-skipped",
        [
            config(
                "ValidatingWebhookConfiguration",
                "v",
                [
                    webhook("a.kb.io", {"url": "https://h/a"}, failurePolicy="Ignore"),
                    webhook("b.kb.io", {"url": "https://h/b"}, failurePolicy="Fail"),
                ],
            )
        ],
        [Hook("v", "b.kb.io", "https://h/b", None, b"")],
    ),
    (
        "service-with-path-and-ca",
        [
            config(
                "MutatingWebhookConfiguration",
                "kueue-mutating-webhook-configuration",
                [
                    webhook(
                        "mdeployment.kb.io",
                        {
                            "service": {**SERVICE, "path": "/mutate-apps-v1-deployment"},
                            "caBundle": CA_B64,
                        },
                    )
                ],
            )
        ],
        [
            Hook(
                "kueue-mutating-webhook-configuration",
                "mdeployment.kb.io",
                None,
                ServiceRef(
                    "kueue-system", "kueue-webhook-service", 9443, "/mutate-apps-v1-deployment"
                ),
                b"-----BEGIN CERTIFICATE-----\n...",
            )
        ],
    ),
    (
        "service-port-defaults-to-443",
        [
            config(
                "ValidatingWebhookConfiguration",
                "v",
                [webhook("v.kb.io", {"service": {"namespace": "n", "name": "s"}})],
            )
        ],
        [Hook("v", "v.kb.io", None, ServiceRef("n", "s", 443, ""), b"")],
    ),
    (
        "no-webhooks",
        [{"metadata": {"name": "empty"}}, config("MutatingWebhookConfiguration", "m", [])],
        [],
    ),
]


@pytest.mark.parametrize(
    ("configs", "expected"),
    [case[1:] for case in BLOCKING_CASES],
    ids=[case[0] for case in BLOCKING_CASES],
)
def test_only_fail_closed_webhooks_block(
    configs: list[dict[str, Any]], expected: list[Hook]
) -> None:
    assert blocking_webhooks(configs) == expected


def test_the_review_is_a_dry_run_pod_create_any_webhook_server_can_parse() -> None:
    hook = Hook("m", "mpod.kb.io", "https://h/x", None, b"")

    review = json.loads(review_request(hook))

    assert (review["apiVersion"], review["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    request = review["request"]
    assert request["uid"]
    assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert request["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert request["operation"] == "CREATE"
    assert request["dryRun"] is True
    assert request["object"]["kind"] == "Pod"
    assert review_request(hook) == review_request(hook), "pure: the same hook, the same body"


# --- waiting, with a fake clock: `post` is the only thing that talks to a server ---


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


HOOK_A = Hook("m", "a.kb.io", "https://h/a", None, b"")
HOOK_B = Hook("m", "b.kb.io", "https://h/b", None, b"")


def answering_after(failures: dict[str, int], status: int = 400) -> tuple[Any, dict[str, int]]:
    """A post that refuses each hook's first ``failures[name]`` calls, then answers."""
    calls: dict[str, int] = {}

    def post(hook: Hook, body: bytes) -> int | None:
        calls[hook.name] = calls.get(hook.name, 0) + 1
        return None if calls[hook.name] <= failures.get(hook.name, 0) else status

    return post, calls


def test_waiting_ends_when_every_hook_has_answered_once() -> None:
    post, calls = answering_after({"a.kb.io": 3, "b.kb.io": 1})
    clock = FakeClock()

    left = wait_answering([HOOK_A, HOOK_B], 10.0, post, clock=clock, sleep=clock.sleep)

    assert left == []
    assert calls == {"a.kb.io": 4, "b.kb.io": 2}, "an answered hook is not asked again"
    assert clock.now == pytest.approx(3 * 0.2)


@pytest.mark.parametrize("status", [200, 400, 500])
def test_any_http_status_counts_as_answering(status: int) -> None:
    post, _ = answering_after({}, status)

    assert wait_answering([HOOK_A], 1.0, post) == []


def test_hooks_never_answering_are_returned_at_the_deadline() -> None:
    post, calls = answering_after({"a.kb.io": 10**6})
    clock = FakeClock()

    left = wait_answering([HOOK_A, HOOK_B], 1.1, post, clock=clock, sleep=clock.sleep)

    assert left == [HOOK_A]
    assert calls == {"a.kb.io": 6, "b.kb.io": 1}, "tried at 0, 0.2, ... 1.0 s"
    assert clock.now == pytest.approx(1.0), "no sleep past the deadline"


def test_a_tiny_timeout_still_tries_each_hook_once_on_the_real_clock() -> None:
    post, calls = answering_after({"a.kb.io": 10**6, "b.kb.io": 10**6})

    assert wait_answering([HOOK_A, HOOK_B], 0.01, post) == [HOOK_A, HOOK_B]
    assert calls == {"a.kb.io": 1, "b.kb.io": 1}


# --- posting to a real HTTPS server on 127.0.0.1 that answers every review with 400 ---


def _key_and_cert(names: list[x509.GeneralName]) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gridloop-test-webhook")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


class _Refusing(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(400)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def https_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, bytes]]:
    """(port, the server's self-signed certificate as PEM)."""
    folder: Path = tmp_path_factory.mktemp("webhook")
    names: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.DNSName(SERVICE_DNS),
    ]
    key_pem, cert_pem = _key_and_cert(names)
    (folder / "tls.key").write_bytes(key_pem)
    (folder / "tls.crt").write_bytes(cert_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "tls.crt", folder / "tls.key")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], cert_pem
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_post_url_returns_the_status_of_a_webhook_that_refuses(
    https_server: tuple[int, bytes],
) -> None:
    port, ca = https_server
    hook = Hook("m", "a.kb.io", f"https://127.0.0.1:{port}/mutate", None, ca)

    assert post_url(hook, review_request(hook)) == 400


def test_post_service_checks_the_certificate_against_the_service_name(
    https_server: tuple[int, bytes],
) -> None:
    port, ca = https_server
    right = Hook("m", "a", None, ServiceRef("kueue-system", "kueue-webhook-service", port), ca)
    wrong = Hook("m", "a", None, ServiceRef("other", "kueue-webhook-service", port), ca)

    assert post_service(right, review_request(right)) == 400
    assert post_hook(right, review_request(right)) == 400
    assert post_service(wrong, review_request(wrong)) is None


def test_a_closed_port_is_not_answering() -> None:
    hook = Hook("m", "a.kb.io", f"https://127.0.0.1:{closed_port()}/mutate", None, b"")

    assert post_url(hook, review_request(hook)) is None


def test_a_server_the_ca_bundle_does_not_trust_is_not_answering(
    https_server: tuple[int, bytes],
) -> None:
    port, _ = https_server
    _, other_ca = _key_and_cert([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    hook = Hook("m", "a.kb.io", f"https://127.0.0.1:{port}/mutate", None, other_ca)

    assert post_url(hook, review_request(hook)) is None


@pytest.mark.parametrize("ca", [b"not a certificate", b"\xff\xfe"], ids=["not-pem", "not-ascii"])
def test_an_unusable_ca_bundle_is_not_answering(https_server: tuple[int, bytes], ca: bytes) -> None:
    port, _ = https_server
    hook = Hook("m", "a.kb.io", f"https://127.0.0.1:{port}/mutate", None, ca)

    assert post_url(hook, review_request(hook)) is None

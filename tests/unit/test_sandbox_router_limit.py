"""The sandbox router's request-size limit (images/sandbox-router/gridloop_router.py), in
front of a stand-in for upstream's app that, like upstream's, reads the whole body first."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

ROUTER = Path(__file__).resolve().parents[2] / "images" / "sandbox-router" / "gridloop_router.py"


async def upstream(scope: Any, receive: Any, send: Any) -> None:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    reply = json.dumps({"proxied": len(body)}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": reply})


@pytest.fixture(scope="module")
def router() -> types.ModuleType:
    sys.modules["sandbox_router"] = types.SimpleNamespace(app=upstream)  # type: ignore[assignment]
    try:
        spec = importlib.util.spec_from_file_location("gridloop_router", ROUTER)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        del sys.modules["sandbox_router"]


def call(app: Any, chunks: list[bytes], length: int | None) -> tuple[int, dict[str, Any]]:
    headers = [] if length is None else [(b"content-length", str(length).encode())]
    scope = {"type": "http", "method": "POST", "path": "/upload", "headers": headers}
    pending = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
        for i, c in enumerate(chunks)
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return pending.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    status = sent[0]["status"]
    return status, json.loads(b"".join(m.get("body", b"") for m in sent[1:]))


def test_a_body_within_the_limit_is_proxied_whole(router: types.ModuleType) -> None:
    app = router.limited(upstream, 1024)
    assert call(app, [b"x" * 600, b"y" * 424], 1024) == (200, {"proxied": 1024})


def test_a_body_whose_length_is_over_the_limit_is_refused_and_never_proxied(
    router: types.ModuleType,
) -> None:
    app = router.limited(upstream, 1024)
    status, body = call(app, [b"x" * 4000, b"y" * 1000], 5000)

    assert status == 413  # after the body was read and dropped: no reset of the connection
    assert "request body of 5000 bytes is over the sandbox router's limit of 1024" in body["detail"]
    assert "agentSandbox.router.maxRequestBytes" in body["detail"]


def test_a_chunked_body_is_refused_once_it_passes_the_limit(router: types.ModuleType) -> None:
    app = router.limited(upstream, 1024)
    status, body = call(app, [b"x" * 1000, b"y" * 1000, b"z" * 1000], None)

    assert status == 413
    assert "request body of 3000 bytes" in body["detail"]


def test_no_limit_is_upstreams_behaviour(router: types.ModuleType) -> None:
    assert call(router.limited(upstream, 0), [b"x" * 5000], 5000) == (200, {"proxied": 5000})

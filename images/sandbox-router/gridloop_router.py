"""gridloop's entry point for agent-sandbox's sandbox router: upstream's app behind a limit
on the size of a request's body.

Upstream's router reads a request's whole body into memory before it proxies it, so one
large upload could take the router past its memory limit (OOMKilled) and every agent's
requests with it. Here a body over GRIDLOOP_MAX_REQUEST_BYTES (the chart's
agentSandbox.router.maxRequestBytes) is refused with 413 and never held: known by its
Content-Length, or as soon as the bytes received pass the limit, the rest is read and
dropped, then the answer is sent on a connection that stays open (closing it while the
client still sends resets it, and a reset ends `kubectl port-forward`, the client's
developer-mode tunnel). 413 is not one the client retries, so the agent gets the answer
at once, and the router and the sandbox carry on. 0 or unset: no limit (upstream's).
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

LIMIT_ENV = "GRIDLOOP_MAX_REQUEST_BYTES"


class _TooLarge(Exception):
    def __init__(self, seen: int) -> None:
        self.seen = seen


def refusal(size: int, limit: int) -> bytes:
    detail = (
        f"request body of {size} bytes is over the sandbox router's limit of {limit} bytes "
        "(agentSandbox.router.maxRequestBytes); upload smaller files"
    )
    return json.dumps({"detail": detail}).encode()


def limited(app: App, limit: int) -> App:
    """`app`, refusing request bodies over `limit` bytes with 413 (limit <= 0: no limit)."""

    async def refuse(send: Send, size: int) -> None:
        body = refusal(size, limit)
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def drain(receive: Receive, more: bool) -> int:
        dropped = 0
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            dropped += len(message.get("body", b""))
            more = bool(message.get("more_body"))
        return dropped

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or limit <= 0:
            await app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            await drain(receive, True)
            await refuse(send, int(length))
            return
        seen = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    more = bool(message.get("more_body"))
                    raise _TooLarge(seen + await drain(receive, more))
            return message

        async def watching_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await app(scope, counting_receive, watching_send)
        except _TooLarge as err:
            if started:
                raise
            await refuse(send, err.seen)

    return wrapped


def _limit() -> int:
    raw = os.environ.get(LIMIT_ENV, "").strip()
    return int(raw) if raw.isdigit() else 0


def _upstream() -> App:
    from sandbox_router import app as upstream  # upstream's module, beside this one

    return upstream  # type: ignore[no-any-return]


app = limited(_upstream(), _limit())

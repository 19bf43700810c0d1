"""agent-sandbox's scoped tokens, version 1, and the Secret that hands one to a claimer (pure).

The router (`--authz-mode=scoped-token`, agent-sandbox v1.0.3's
sandbox-router/authz/scopedtoken.go) lets a request through only with
`Authorization: Bearer v1.<payload>.<signature>`, where the payload is the JSON
`{"ns": ..., "name": ..., "exp": ...}` (the Sandbox's namespace and name, the expiry in
Unix seconds, exclusive) in unpadded base64url, and the signature is HMAC-SHA256 of the
context `agent-sandbox/scoped-token/v1.` followed by that payload text, under a shared key
of at least 32 bytes (surrounding whitespace trimmed on both sides). A token for one
sandbox is refused against any other (403), as is any request carrying
`X-Sandbox-Pod-Ip` or `X-Sandbox-Uid` (their routing is not bound by the token). The
router only verifies; gridloop's issuer (issuer.py) mints, one token per bound claim.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from typing import Any

VERSION = "v1"
CONTEXT = b"agent-sandbox/scoped-token/v1."
MIN_KEY_BYTES = 32  # the router's MinScopedTokenSecretLen
KEY_FIELD = "key"  # in the router's key Secret
TOKEN_FIELD = "token"  # in a claim's token Secret
SECRET_TYPE = "gridloop.io/sandbox-token"
CLAIM_LABEL = "gridloop.io/sandbox-claim"
SUFFIX = "-router-token"


class TokenError(ValueError):
    pass


def new_key() -> bytes:
    """A fresh HMAC key: 48 random bytes as URL-safe text (no whitespace to trim)."""
    return secrets.token_urlsafe(48).encode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _key(key: bytes) -> bytes:
    trimmed = key.strip()
    if len(trimmed) < MIN_KEY_BYTES:
        raise TokenError(
            f"the router's key must be at least {MIN_KEY_BYTES} bytes, got {len(trimmed)}"
        )
    return trimmed


def _sign(key: bytes, payload: str) -> str:
    return _b64(hmac.new(_key(key), CONTEXT + payload.encode(), hashlib.sha256).digest())


def mint(key: bytes, namespace: str, sandbox: str, exp: int) -> str:
    """A token for the Sandbox `namespace/sandbox`, valid before Unix second `exp`."""
    if not namespace or not sandbox:
        raise TokenError("a token needs the sandbox's namespace and name")
    claims = {"ns": namespace, "name": sandbox, "exp": int(exp)}
    payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
    return f"{VERSION}.{payload}.{_sign(key, payload)}"


@dataclass(frozen=True)
class Claims:
    namespace: str
    sandbox: str
    exp: int


def verify(key: bytes, token: str, now: float) -> Claims:
    """What the router checks before it compares the target: the form, the signature and
    the expiry (the issuer's check of a token Secret it finds, and the tests' that gridloop
    mints what the router takes)."""
    version, _, rest = token.partition(".")
    payload, _, signature = rest.partition(".")
    if version != VERSION or not payload or not signature:
        raise TokenError("malformed token")
    if not hmac.compare_digest(signature, _sign(key, payload)):
        raise TokenError("signature mismatch")
    claims = json.loads(_unb64(payload))
    if int(now) >= int(claims["exp"]):
        raise TokenError("token expired")
    return Claims(claims["ns"], claims["name"], int(claims["exp"]))


def secret_name(claim: str) -> str:
    """The Secret a claim's token is in, beside the claim."""
    return f"{claim}{SUFFIX}"


@dataclass(frozen=True)
class Bound:
    """A SandboxClaim the controller has given a Sandbox."""

    namespace: str
    claim: str
    uid: str
    sandbox: str


def bound(claim: dict[str, Any]) -> Bound | None:
    """The claim, if it is bound to a Sandbox and not being deleted; else None."""
    meta = claim.get("metadata") or {}
    sandbox = ((claim.get("status") or {}).get("sandbox") or {}).get("name") or ""
    if not sandbox or meta.get("deletionTimestamp"):
        return None
    return Bound(meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", ""), sandbox)


def expiry(now: float, ttl_s: int) -> int:
    return int(now) + int(ttl_s)


def needs_token(
    existing: dict[str, Any] | None, claim: Bound, now: float, ttl_s: int, key: bytes
) -> bool:
    """Whether the claim's token Secret must be (re)written: missing, for another sandbox
    or claim (a claim deleted and made again under its name), past half its life, or
    holding a token that is not `key`'s for this sandbox until the expiry it states (a
    Secret someone else wrote under its name: its annotations alone prove nothing)."""
    if existing is None:
        return True
    annotations = (existing.get("metadata") or {}).get("annotations") or {}
    if annotations.get("gridloop.io/sandbox") != claim.sandbox:
        return True
    if annotations.get("gridloop.io/claim-uid") != claim.uid:
        return True
    try:
        exp = int(annotations.get("gridloop.io/expires", "0"))
        held = verify(key, str(existing.get(TOKEN_FIELD) or ""), now)
    except (ValueError, KeyError, TypeError):  # TokenError, a payload that is not ours
        return True
    if held != Claims(claim.namespace, claim.sandbox, exp):
        return True
    return exp - now < ttl_s / 2


def token_secret(claim: Bound, token: str, exp: int) -> dict[str, Any]:
    """The Secret handing `token` to whoever may read Secrets in the claim's namespace (its
    claimer), owned by the claim: it goes when the claim does."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": SECRET_TYPE,
        "metadata": {
            "name": secret_name(claim.claim),
            "namespace": claim.namespace,
            "labels": {
                "app.kubernetes.io/part-of": "gridloop",
                "app.kubernetes.io/component": "sandbox-token",
                CLAIM_LABEL: claim.claim,
            },
            "annotations": {
                "gridloop.io/sandbox": claim.sandbox,
                "gridloop.io/claim-uid": claim.uid,
                "gridloop.io/expires": str(exp),
            },
            "ownerReferences": [
                {
                    "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                    "kind": "SandboxClaim",
                    "name": claim.claim,
                    "uid": claim.uid,
                }
            ],
        },
        "stringData": {TOKEN_FIELD: token, "sandbox": claim.sandbox, "expires": str(exp)},
    }

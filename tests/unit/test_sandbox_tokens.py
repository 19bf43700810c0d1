"""The router's scoped tokens as gridloop mints them (gridloop/sandboxes/tokens.py), and
the issuer's decisions: which claim gets a token Secret, when it is minted again."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import urllib3
from kubernetes.client.rest import ApiException

from gridloop.sandboxes import issuer, tokens

KEY = b"0123456789abcdef0123456789abcdef-key"
# made by agent-sandbox v1.0.3's own authz.MintScopedToken(KEY, "agents", "box-a", 1h) with
# `go run` against the module on 2026-12-07 (its exp: 1796608624); the same program's
# ScopedTokenAuthorizer let gridloop's token for box-a through and refused it for box-b
UPSTREAMS = (
    "v1.eyJucyI6ImFnZW50cyIsIm5hbWUiOiJib3gtYSIsImV4cCI6MTc5NjYwODYyNH0"
    ".1wK59CoiW04xqXZNbFB-wt497cmKL8_026DOAHU7Bmk"
)


BOX_B_CLAIMS = tokens.mint(KEY, "agents", "box-b", 1796608624).rsplit(".", 1)[0]


def test_a_token_is_byte_for_byte_what_upstreams_minter_makes() -> None:
    assert tokens.mint(KEY, "agents", "box-a", 1796608624) == UPSTREAMS
    assert tokens.verify(KEY, UPSTREAMS, now=1796608623) == tokens.Claims(
        "agents", "box-a", 1796608624
    )


def test_the_key_is_trimmed_as_the_router_trims_its_mounted_file() -> None:
    assert tokens.mint(KEY + b"\n", "agents", "box-a", 1796608624) == UPSTREAMS


@pytest.mark.parametrize(
    ("token", "now", "why"),
    [
        (UPSTREAMS, 1796608624, "token expired"),  # exp is exclusive
        ("v1.only-a-payload", 0, "malformed token"),
        (UPSTREAMS[:-2] + "AA", 0, "signature mismatch"),
        # box-b's claims under box-a's signature
        (BOX_B_CLAIMS + UPSTREAMS[UPSTREAMS.rindex(".") :], 0, "signature mismatch"),
        ("v2." + UPSTREAMS[3:], 0, "malformed token"),
    ],
)
def test_an_expired_changed_or_foreign_token_is_refused(token: str, now: int, why: str) -> None:
    with pytest.raises(tokens.TokenError) as err:
        tokens.verify(KEY, token, now=now)
    assert str(err.value) == why


def test_another_key_makes_another_signature() -> None:
    with pytest.raises(tokens.TokenError, match="signature mismatch"):
        tokens.verify(b"another key of at least thirty-two bytes", UPSTREAMS, now=0)


def test_a_short_key_is_refused_as_the_router_refuses_it() -> None:
    with pytest.raises(tokens.TokenError, match="at least 32 bytes, got 31"):
        tokens.mint(b"x" * 31 + b"  ", "agents", "box-a", 1)
    assert len(tokens.new_key().strip()) >= tokens.MIN_KEY_BYTES


def claim(name: str = "c1", sandbox: str = "pool-abcde", **meta: Any) -> dict[str, Any]:
    status = {"sandbox": {"name": sandbox}} if sandbox else {}
    return {
        "metadata": {"name": name, "namespace": "agents", "uid": "uid-1", **meta},
        "status": status,
    }


def test_only_a_bound_claim_that_is_not_going_gets_a_token() -> None:
    assert tokens.bound(claim(sandbox="")) is None
    assert tokens.bound(claim(deletionTimestamp="2026-12-07T00:00:00Z")) is None
    assert tokens.bound(claim()) == tokens.Bound("agents", "c1", "uid-1", "pool-abcde")


def test_the_secret_is_the_claims_own_and_names_what_the_token_is_for() -> None:
    bound = tokens.bound(claim())
    assert bound is not None
    secret = tokens.token_secret(bound, "v1.x.y", 100)
    assert secret["metadata"]["name"] == "c1-router-token"
    assert secret["metadata"]["namespace"] == "agents"
    (owner,) = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("SandboxClaim", "c1", "uid-1")
    assert secret["stringData"] == {"token": "v1.x.y", "sandbox": "pool-abcde", "expires": "100"}


def _existing(sandbox: str, uid: str, expires: int, token: str | None = None) -> dict[str, Any]:
    annotations = {
        "gridloop.io/sandbox": sandbox,
        "gridloop.io/claim-uid": uid,
        "gridloop.io/expires": str(expires),
    }
    if token is None:  # what the issuer wrote
        token = tokens.mint(KEY, "agents", sandbox, expires)
    return {"metadata": {"annotations": annotations}, "token": token}


def test_a_token_is_minted_again_when_missing_for_another_sandbox_or_half_spent() -> None:
    bound = tokens.Bound("agents", "c1", "uid-1", "pool-abcde")
    ttl = 1000
    assert tokens.needs_token(None, bound, now=0, ttl_s=ttl, key=KEY)
    assert not tokens.needs_token(_existing("pool-abcde", "uid-1", 1000), bound, 0, ttl, KEY)
    assert not tokens.needs_token(_existing("pool-abcde", "uid-1", 1000), bound, 499, ttl, KEY)
    assert tokens.needs_token(_existing("pool-abcde", "uid-1", 1000), bound, 501, ttl, KEY)
    assert tokens.needs_token(_existing("pool-other", "uid-1", 1000), bound, 0, ttl, KEY)
    # a claim deleted and made again under the same name
    assert tokens.needs_token(_existing("pool-abcde", "uid-0", 1000), bound, 0, ttl, KEY)


@pytest.mark.parametrize(
    "token",
    [
        "junk",
        tokens.mint(b"k" * 32, "agents", "pool-abcde", 1000),  # another key's
        tokens.mint(KEY, "agents", "pool-other", 1000),  # for another sandbox
        tokens.mint(KEY, "team-b", "pool-abcde", 1000),  # another namespace's
        tokens.mint(KEY, "agents", "pool-abcde", 900),  # an expiry its annotation does not say
        "",
    ],
)
def test_a_secret_someone_else_wrote_under_the_claims_name_is_replaced(token: str) -> None:
    """Its annotations say what the issuer's would; its token is not the issuer's."""
    bound = tokens.Bound("agents", "c1", "uid-1", "pool-abcde")
    assert tokens.needs_token(_existing("pool-abcde", "uid-1", 1000, token), bound, 0, 1000, KEY)


class FakeCore:
    """Secrets by (namespace, name), as the API server keeps them."""

    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.writes = 0

    def read_namespaced_secret(self, name: str, namespace: str) -> Any:
        found = self.secrets.get((namespace, name))
        if found is None:
            raise ApiException(status=404)
        meta = type("Meta", (), {"annotations": found["metadata"].get("annotations")})
        data = {k: base64.b64encode(v.encode()).decode() for k, v in found["stringData"].items()}
        return type("Secret", (), {"metadata": meta, "data": data})

    def create_namespaced_secret(self, namespace: str, body: dict[str, Any]) -> None:
        key = (namespace, body["metadata"]["name"])
        if key in self.secrets:
            raise ApiException(status=409)
        self.secrets[key] = body
        self.writes += 1

    def replace_namespaced_secret(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        self.secrets[(namespace, name)] = body
        self.writes += 1


def test_the_issuer_writes_a_token_the_key_verifies_for_the_bound_sandbox_only() -> None:
    core, now = FakeCore(), [1000.0]
    settings = issuer.Settings("sandbox-router", "sandbox-router-key", "issuer", ("agents",))
    it = issuer.Issuer(core, None, KEY, settings, clock=lambda: now[0])
    it.apply("ADDED", claim(sandbox=""))
    assert core.secrets == {}, "not bound yet"
    it.apply("MODIFIED", claim())
    token = core.secrets[("agents", "c1-router-token")]["stringData"]["token"]
    assert tokens.verify(KEY, token, now=now[0]) == tokens.Claims(
        "agents", "pool-abcde", 1000 + settings.ttl_s
    )
    it.apply("MODIFIED", claim())
    assert core.writes == 1, "a claim's status changing again mints nothing"
    now[0] += settings.ttl_s / 2 + 1
    it.resync()
    assert core.writes == 2, "half its life spent: minted again"
    it.apply("DELETED", claim())
    now[0] += settings.ttl_s
    it.resync()
    assert core.writes == 2, "a deleted claim's Secret goes with it (its owner)"


class UnreachableFor(FakeCore):
    """The API server out of reach for the Secrets of one namespace."""

    def __init__(self, namespace: str) -> None:
        super().__init__()
        self.down = namespace

    def read_namespaced_secret(self, name: str, namespace: str) -> Any:
        if namespace == self.down:
            raise urllib3.exceptions.MaxRetryError(None, "/api/v1", "connection refused")
        return super().read_namespaced_secret(name, namespace)


def test_a_resync_that_cannot_reach_the_api_server_goes_on_and_tries_again() -> None:
    core, now = UnreachableFor("team-b"), [1000.0]
    settings = issuer.Settings("sandbox-router", "sandbox-router-key", "issuer", ("agents",))
    it = issuer.Issuer(core, None, KEY, settings, clock=lambda: now[0])
    other = claim()
    other["metadata"]["namespace"] = "team-b"
    with it.lock:  # known from before the API server went out of reach
        it.claims[("team-b", "c1")] = other
    it.apply("MODIFIED", claim())
    now[0] += settings.ttl_s / 2 + 1

    it.resync()  # does not raise: the issuer's loop goes on

    assert core.writes == 2, "the reachable claim's token was minted again"
    core.down = ""
    it.resync()
    assert ("team-b", "c1-router-token") in core.secrets, "and the other's at the next resync"


def test_the_issuer_replaces_a_junk_token_written_before_the_claim_was_bound() -> None:
    """Someone who may write Secrets in the namespace made `<claim>-router-token` first,
    with the annotations the issuer writes and a token of their own: the claimer still
    gets a token the router takes."""
    core, now = FakeCore(), [1000.0]
    settings = issuer.Settings("sandbox-router", "sandbox-router-key", "issuer", ("agents",))
    exp = tokens.expiry(now[0], settings.ttl_s)
    planted = _existing("pool-abcde", "uid-1", exp, token="junk")
    core.secrets[("agents", "c1-router-token")] = {
        "metadata": planted["metadata"],
        "stringData": {"token": "junk"},
    }
    it = issuer.Issuer(core, None, KEY, settings, clock=lambda: now[0])

    it.apply("MODIFIED", claim())

    token = core.secrets[("agents", "c1-router-token")]["stringData"]["token"]
    assert tokens.verify(KEY, token, now=now[0]).sandbox == "pool-abcde"

"""The sandbox token issuer: a token Secret beside every bound SandboxClaim (the shell).

It runs in the router's namespace (`gridloop sandboxes issue-tokens`, the chart's
`sandbox-token-issuer` Deployment). At start it makes sure the router's HMAC key exists
(a Secret it creates once, owned by its own Deployment so uninstalling removes it; the
router mounts it), then follows the SandboxClaims of each sandbox namespace: a claim the
controller has bound to a Sandbox gets `<claim>-router-token` (tokens.token_secret), a
token for that Sandbox only, re-minted at half its life and whenever the claim is bound
to another Sandbox. The Secret is owned by the claim, so it goes with it. The key never
leaves this namespace; a claimer holds a token for its own sandbox and nothing else.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from gridloop import kube
from gridloop.sandboxes import tokens

log = logging.getLogger("gridloop.sandboxes.issuer")

GROUP, VERSION, CLAIMS = "extensions.agents.x-k8s.io", "v1beta1", "sandboxclaims"
RETRY_S = (1.0, 2.0, 5.0, 10.0)


@dataclass(frozen=True)
class Settings:
    namespace: str  # the issuer's and the router's
    key_secret: str  # the router's key, in `namespace`
    deployment: str  # the issuer's own Deployment, the key's owner
    sandbox_namespaces: tuple[str, ...]
    ttl_s: int = 24 * 3600
    resync_s: float = 60.0


def ensure_key(core: client.CoreV1Api, apps: client.AppsV1Api, s: Settings) -> bytes:
    """The router's key: read, or made once (a lost race reads the winner's)."""
    try:
        found = core.read_namespaced_secret(s.key_secret, s.namespace)
        return base64.b64decode((found.data or {})[tokens.KEY_FIELD])
    except ApiException as err:
        if err.status != 404:
            raise
    owner = apps.read_namespaced_deployment(s.deployment, s.namespace)
    key = tokens.new_key()
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": s.key_secret,
            "namespace": s.namespace,
            "labels": {
                "app.kubernetes.io/part-of": "gridloop",
                "app.kubernetes.io/component": "sandbox-router-key",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": s.deployment,
                    "uid": owner.metadata.uid,
                }
            ],
        },
        "stringData": {tokens.KEY_FIELD: key.decode()},
    }
    try:
        core.create_namespaced_secret(s.namespace, body)
        log.info("made the router's key %s/%s", s.namespace, s.key_secret)
        return key
    except ApiException as err:
        if err.status != 409:
            raise
        return ensure_key(core, apps, s)


class Issuer:
    def __init__(
        self,
        core: client.CoreV1Api,
        custom: client.CustomObjectsApi,
        key: bytes,
        settings: Settings,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.core, self.custom, self.key, self.s, self.clock = core, custom, key, settings, clock
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.lock = threading.Lock()

    def apply(self, kind: str, claim: dict[str, Any]) -> None:
        meta = claim.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        with self.lock:
            if kind == "DELETED":
                self.claims.pop(key, None)
                return
            if kind in ("ADDED", "MODIFIED"):
                self.claims[key] = claim
        if kind in ("ADDED", "MODIFIED"):
            self.issue(claim)

    def issue(self, raw: dict[str, Any]) -> None:
        claim = tokens.bound(raw)
        if claim is None:
            return
        name = tokens.secret_name(claim.claim)
        try:
            existing = self.core.read_namespaced_secret(name, claim.namespace)
            held = (existing.data or {}).get(tokens.TOKEN_FIELD) or ""
            found: dict[str, Any] | None = {
                "metadata": {"annotations": existing.metadata.annotations or {}},
                tokens.TOKEN_FIELD: base64.b64decode(held).decode(errors="replace"),
            }
        except ApiException as err:
            if err.status != 404:
                raise
            found = None
        now = self.clock()
        if not tokens.needs_token(found, claim, now, self.s.ttl_s, self.key):
            return
        exp = tokens.expiry(now, self.s.ttl_s)
        token = tokens.mint(self.key, claim.namespace, claim.sandbox, exp)
        body = tokens.token_secret(claim, token, exp)
        if found is None:
            try:
                self.core.create_namespaced_secret(claim.namespace, body)
            except ApiException as err:
                if err.status != 409:
                    raise
                self.core.replace_namespaced_secret(name, claim.namespace, body)
        else:
            self.core.replace_namespaced_secret(name, claim.namespace, body)
        log.info("token for %s/%s (sandbox %s)", claim.namespace, claim.claim, claim.sandbox)

    def resync(self) -> None:
        """Tokens past half their life are minted again (a claim that stays bound for days
        keeps a fresh one in its Secret)."""
        with self.lock:
            claims = list(self.claims.values())
        for claim in claims:
            try:
                self.issue(claim)
            except ApiException as err:
                log.warning("resync: %s %s", err.status, err.reason)
            except (urllib3.exceptions.HTTPError, OSError) as err:
                # the API server out of reach for a moment: the next resync tries again,
                # where letting it out would end the issuer (and every claim's renewal)
                log.warning("resync: %s", err)

    def follow(self, namespace: str, stop: threading.Event) -> None:
        def relist() -> str:
            listed = self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, CLAIMS)
            seen = set()
            for claim in listed.get("items", []):
                meta = claim.get("metadata") or {}
                seen.add((namespace, meta.get("name", "")))
                claim.setdefault("metadata", {})["namespace"] = namespace
                self.apply("ADDED", claim)
            with self.lock:
                for gone in [k for k in self.claims if k[0] == namespace and k not in seen]:
                    self.claims.pop(gone, None)
            return str((listed.get("metadata") or {}).get("resourceVersion", ""))

        def follow(since: str) -> str:
            def list_fn(**kwargs: Any) -> Any:
                return self.custom.list_namespaced_custom_object(
                    GROUP, VERSION, namespace, CLAIMS, **kwargs
                )

            return kube.watch_once(list_fn, since, self.apply, stop, 300)

        kube.list_then_watch(
            relist,
            follow,
            stop,
            listed=lambda failures: log.info("following claims in %s", namespace),
            broken=lambda why, n: log.warning("claims in %s: %s (%d)", namespace, why, n),
            retry_seconds=RETRY_S,
        )


def run(api: client.ApiClient, s: Settings, stop: threading.Event) -> None:
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    key = ensure_key(core, apps, s)
    issuer = Issuer(core, client.CustomObjectsApi(api), key, s)
    threads = [
        threading.Thread(target=issuer.follow, args=(ns, stop), daemon=True, name=f"claims-{ns}")
        for ns in s.sandbox_namespaces
    ]
    for thread in threads:
        thread.start()
    while not stop.wait(s.resync_s):
        issuer.resync()


def namespaces(values: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(v for value in values for v in value.split(",") if v))

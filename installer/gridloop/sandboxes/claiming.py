"""A sandbox claimed from a warm pool and driven through the authenticated router, with
agent-sandbox's 1.x client (what the loop and bench/bench_sandboxes.py use; the example
agent does the same in its own words).

The client claims (a SandboxClaim of the pool; it waits for the claim to be bound and
Ready), the issuer writes the claim's token into `<claim>-router-token` beside it, and a
second client, sending `Authorization: Bearer <token>` on every request, attaches to the
claim. Its sandboxes leave out `X-Sandbox-Pod-IP` (the 1.x client sends it when it can
read the Sandbox's pod IPs): the router refuses it with a scoped token, whose claims do
not bind an address, so the router finds the sandbox by its name, as the token says.
"""

from __future__ import annotations

import base64
import time
from contextlib import AbstractContextManager
from typing import Any

from gridloop.sandboxes import tokens

TOKEN_WAIT_S = 30.0


def read_token(core: Any, namespace: str, claim: str, timeout_s: float = TOKEN_WAIT_S) -> str:
    """The token in the claim's Secret, once the issuer has written it for its Sandbox."""
    from kubernetes.client.rest import ApiException

    deadline = time.monotonic() + timeout_s
    name = tokens.secret_name(claim)
    while True:
        try:
            found = core.read_namespaced_secret(name, namespace)
            return base64.b64decode((found.data or {})[tokens.TOKEN_FIELD]).decode()
        except (ApiException, KeyError) as err:
            if isinstance(err, ApiException) and err.status != 404:
                raise
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"no token Secret {namespace}/{name} after {timeout_s:g} s: is the chart's "
                "sandbox-token-issuer running (agentSandbox.router.enabled)?"
            )
        time.sleep(0.05)


def token_client(url: str, token: str) -> Any:
    """A SandboxClient that sends `token` to the router at `url` and no pod IP."""
    from k8s_agent_sandbox.models import SandboxDirectConnectionConfig
    from k8s_agent_sandbox.sandbox import Sandbox
    from k8s_agent_sandbox.sandbox_client import SandboxClient

    class ByName(Sandbox):
        def get_pod_ip(self) -> str | None:
            return None

    class TokenClient(SandboxClient[ByName]):
        sandbox_class = ByName

    config = SandboxDirectConnectionConfig(
        api_url=url, extra_headers={"Authorization": f"Bearer {token}"}
    )
    return TokenClient(config)


class ClaimedSandbox(AbstractContextManager[Any]):
    """One sandbox claimed from the warm pool `pool`, through the router at `url`, in the
    shape the agent uses (`run`, `write`, `claim_name`, `sandbox`); its claim is deleted
    on leaving."""

    def __init__(self, url: str, pool: str, namespace: str, ready_s: int, core: Any) -> None:
        self.url, self.pool, self.namespace, self.ready_s = url, pool, namespace, ready_s
        self.core = core
        self.clients: list[Any] = []
        self.claimed: Any = None  # the claimer's handle: terminating it deletes the claim
        self.sandbox: Any = None  # the token's: what requests go through
        self.claim_name = ""

    def __enter__(self) -> ClaimedSandbox:
        from k8s_agent_sandbox.models import SandboxDirectConnectionConfig
        from k8s_agent_sandbox.sandbox_client import SandboxClient

        claimer: Any = SandboxClient(SandboxDirectConnectionConfig(api_url=self.url))
        self.clients.append(claimer)
        try:
            self.claimed = claimer.create_sandbox(
                self.pool, namespace=self.namespace, sandbox_ready_timeout=self.ready_s
            )
            self.claim_name = self.claimed.claim_name
            token = read_token(self.core, self.namespace, self.claim_name)
            driver = token_client(self.url, token)
            self.clients.append(driver)
            self.sandbox = driver.get_sandbox(self.claim_name, self.namespace)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def run(self, command: str, timeout: int = 60) -> Any:
        return self.sandbox.commands.run(command, timeout=timeout)

    def write(self, path: str, content: bytes | str, timeout: int = 60) -> Any:
        return self.sandbox.files.write(path, content, timeout=timeout)

    def __exit__(self, *exc: Any) -> None:
        try:
            if self.claimed is not None:
                self.claimed.terminate()
        finally:
            for c in reversed(self.clients):
                c.__exit__(None, None, None)
            self.clients.clear()

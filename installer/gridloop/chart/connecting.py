"""Reaching the cluster a command targets: a kubeconfig and, optionally, one of its contexts.

The same target goes to the Kubernetes Python client (doctor's reads, the readiness
wait, uninstall's checks), to kubectl (`--context`) and to helm (`--kube-context`), so
all three talk to the same cluster as the same user. The client itself is the ground
floor's (gridloop.kube).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from kubernetes import client, config

from gridloop import kube
from gridloop.errors import UsageError

# helm's client is held to client-go's default of 5 requests a second past a burst of 100:
# `helm uninstall` of the local profile's 130 objects spent 5 s of its time there. helm
# gets kubectl's own defaults (since Kubernetes 1.27: 50 a second, bursts of 300); API
# Priority and Fairness still shares the server between clients.
HELM_QPS, HELM_BURST = 50, 300


@dataclass(frozen=True)
class Target:
    kubeconfig: str  # one path, or several joined with ':' as in $KUBECONFIG
    context: str | None = None
    wait: bool = False
    timeout: str = "5m"  # a Go duration, as helm and kubectl take it

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": self.kubeconfig}

    def kubectl_flags(self) -> list[str]:
        return ["--context", self.context] if self.context else []

    def helm_flags(self) -> list[str]:
        context = ["--kube-context", self.context] if self.context else []
        return [*context, "--qps", str(HELM_QPS), "--burst-limit", str(HELM_BURST)]


def api_client(target: Target) -> client.ApiClient:
    """A client for the target; an unknown context is a UsageError naming the flag. An
    unreachable server is reported after one retry, not retried for minutes."""
    return kube.api_client(target.kubeconfig, context=target.context, pool=16, retries=1)


def check_context(kubeconfig: str, context: str | None) -> None:
    """Refuse a context the kubeconfig does not have, before anything else runs."""
    if context is None:
        return
    try:
        contexts, _ = config.list_kube_config_contexts(config_file=kubeconfig)
    except (config.ConfigException, OSError, ValueError):
        return  # an unreadable kubeconfig is reported when the client is built
    if context not in {c["name"] for c in contexts}:
        raise UsageError(
            f"--context {context}: not in the kubeconfig (contexts: {kube.contexts(kubeconfig)})"
        )

"""Reaching the cluster a command targets: a kubeconfig and, optionally, one of its contexts.

The same target goes to the Kubernetes Python client (doctor's reads, the readiness
wait, uninstall's checks), to kubectl (`--context`) and to helm (`--kube-context`), so
all three talk to the same cluster as the same user. The one place in gridloop.chart
that builds a client; a cluster that cannot be reached is one ClusterError line.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from gridloop.errors import ClusterError, UsageError

T = TypeVar("T")


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
        return ["--kube-context", self.context] if self.context else []


def api_client(target: Target) -> client.ApiClient:
    """A client for the target; an unknown context is a UsageError naming the flag."""
    conf = client.Configuration()
    try:
        config.load_kube_config(
            config_file=target.kubeconfig, context=target.context, client_configuration=conf
        )
    except (config.ConfigException, OSError, ValueError) as err:
        if target.context:
            known = _contexts(target.kubeconfig)
            raise UsageError(
                f"--context {target.context}: not in the kubeconfig (contexts: {known})"
            ) from err
        raise UsageError(f"kubeconfig {target.kubeconfig}: {err}") from err
    conf.retries = 1  # an unreachable server is reported, not retried for minutes
    conf.connection_pool_maxsize = 16
    return client.ApiClient(conf)


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
            f"--context {context}: not in the kubeconfig (contexts: {_contexts(kubeconfig)})"
        )


def _contexts(kubeconfig: str) -> str:
    try:
        contexts, _ = config.list_kube_config_contexts(config_file=kubeconfig)
    except (config.ConfigException, OSError, ValueError):
        return "none readable"
    return ", ".join(sorted(c["name"] for c in contexts)) or "none"


def server(api: client.ApiClient) -> str:
    return str(api.configuration.host)


def reached(api: client.ApiClient, call: Callable[[], T]) -> T:
    """`call()`, with a server that does not answer turned into one ClusterError line."""
    try:
        return call()
    except (urllib3.exceptions.HTTPError, OSError) as err:
        reason = getattr(err, "reason", None) or err
        raise ClusterError(f"cannot reach the cluster at {server(api)}: {reason}") from err


def get(api: client.ApiClient, path: str, query: dict[str, str] | None = None) -> Any:
    """GET `path` as plain JSON (dicts and lists, no model classes)."""
    return reached(
        api,
        lambda: api.call_api(
            path,
            "GET",
            query_params=list((query or {}).items()),
            header_params={"Accept": "application/json"},
            response_type="object",
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
        ),
    )


METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


def metadata_list(api: client.ApiClient, path: str) -> list[Any]:
    """The items at `path` as metadata only (a list of CRDs is megabytes in full)."""
    found = reached(
        api,
        lambda: api.call_api(
            path,
            "GET",
            header_params={"Accept": METADATA_ONLY},
            response_type="object",
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
        ),
    )
    return list(found.get("items") or [])


def status_of(err: ApiException) -> str:
    """An API refusal as a few words: `forbidden`, `not found`, `HTTP 500`."""
    return {401: "unauthorized", 403: "forbidden", 404: "not found"}.get(
        err.status, f"HTTP {err.status}"
    )

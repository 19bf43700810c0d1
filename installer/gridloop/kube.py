"""The Kubernetes API as every package reaches it: a client for a kubeconfig, plain-JSON
reads, and an unreachable server as one ClusterError line (the ground floor: the chart's
commands, the local cluster, the simulators' discovery and the models' rollout reads use
it). Callers get an ApiClient and use the typed APIs on it, or `get` for plain JSON."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from gridloop.errors import ClusterError

T = TypeVar("T")


def api_client(kubeconfig: Path, pool: int = 32) -> client.ApiClient:
    """A client for `kubeconfig`'s current context, sized for concurrent use, retrying a
    failed request three times (the local cluster's and the tests' client)."""
    conf = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=conf)
    conf.connection_pool_maxsize = pool
    conf.retries = 3
    return client.ApiClient(conf)


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

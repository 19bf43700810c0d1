"""The Kubernetes API as every package reaches it: the one client builder, plain-JSON
reads, and an unreachable server as one ClusterError line (the ground floor: the chart's
commands, `status`, the loop, the health service and its hook pods, the local cluster,
the simulators' discovery and the models' rollout reads use it). Callers get an
ApiClient and use the typed APIs on it, or `get` for plain JSON. It needs only the
health service's own dependencies (kubernetes, urllib3)."""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from gridloop.errors import ClusterError, UsageError, one_line

T = TypeVar("T")


def api_client(
    kubeconfig: str | Path | None = None,
    *,
    context: str | None = None,
    pool: int = 32,
    retries: int = 3,
    named: str = "kubeconfig",
) -> client.ApiClient:
    """A client for `context` (or the current one) of `kubeconfig`: one path or several
    joined with ':' as in $KUBECONFIG; with none, in a pod its ServiceAccount, elsewhere
    $KUBECONFIG or ~/.kube/config. `pool` connections for concurrent callers; a failed
    request is retried `retries` times (the CLI's commands take 0 or 1: an unreachable
    server is reported, not retried for minutes). An unreadable kubeconfig or a context
    it does not have is a UsageError naming it (`named`: how the caller's user gave the
    kubeconfig, e.g. `--kubeconfig`)."""
    conf = client.Configuration()
    try:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=conf)
        else:
            config.load_kube_config(
                config_file=str(kubeconfig) if kubeconfig else None,
                context=context,
                client_configuration=conf,
            )
    except (config.ConfigException, OSError, ValueError) as err:
        if context:
            raise UsageError(
                f"--context {context}: not in the kubeconfig (contexts: {contexts(kubeconfig)})"
            ) from err
        raise UsageError(f"{named} {kubeconfig or '(default)'}: {err}") from err
    conf.connection_pool_maxsize = max(conf.connection_pool_maxsize, pool)
    conf.retries = retries
    return client.ApiClient(conf)


def contexts(kubeconfig: str | Path | None) -> str:
    """The kubeconfig's context names, for a message: `a, b`, `none`, `none readable`."""
    try:
        found, _ = config.list_kube_config_contexts(
            config_file=str(kubeconfig) if kubeconfig else None
        )
    except (config.ConfigException, OSError, ValueError):
        return "none readable"
    return ", ".join(sorted(c["name"] for c in found)) or "none"


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


def record_event(
    core: client.CoreV1Api,
    about: client.V1ObjectReference,
    reason: str,
    message: str,
    *,
    namespace: str,
    component: str,
    instance: str,
    warning: bool,
    suffix: str,
) -> None:
    """A core/v1 Event about `about`, from `component` as reported by `instance` (a
    controller names its replica: `kubectl get events -o wide` shows who acted), named
    `<about.name>.<suffix>-<random>`; the message cut at the API's 1,024 characters."""
    now = dt.datetime.now(dt.UTC)
    core.create_namespaced_event(
        namespace,
        client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{about.name}.{suffix}-"),
            involved_object=about,
            reason=reason,
            message=message[:1024],
            type="Warning" if warning else "Normal",
            source=client.V1EventSource(component=component),
            reporting_component=component,
            reporting_instance=instance,
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        ),
        _preload_content=False,
    )


def watch_once(
    list_fn: Callable[..., Any],
    since: str,
    apply: Callable[[str, dict[str, Any]], None],
    stop: threading.Event,
    seconds: int,
    **selectors: str,
) -> str:
    """One watch of `list_fn` (CoreV1Api.list_node, ...) from resourceVersion `since`
    until the server ends it after `seconds` or `stop` is set: each event's type and raw
    object go to `apply` (bookmarks too, as BOOKMARK). Returns the last resourceVersion
    seen; an ERROR event (410 Gone among them) is raised as an ApiException."""
    w = watch.Watch()
    for event in w.stream(
        list_fn,
        resource_version=since,
        allow_watch_bookmarks=True,
        timeout_seconds=seconds,
        deserialize=False,
        **selectors,
    ):
        obj = event["object"]
        if event["type"] == "ERROR":
            raise ApiException(status=obj.get("code", 500), reason=obj.get("message", ""))
        since = (obj.get("metadata") or {}).get("resourceVersion") or since
        apply(event["type"], obj)
        if stop.is_set():
            w.stop()
    return since


def list_then_watch(
    relist: Callable[[], str],
    follow: Callable[[str], str],
    stop: threading.Event,
    *,
    listed: Callable[[int], None],
    broken: Callable[[str, int], None],
    retry_seconds: Sequence[float],
) -> None:
    """An informer's loop, until `stop`: `relist()` lists and returns the resourceVersion
    it ended at, then `follow(since)` watches from there, again and again as the server
    ends each watch. A 410 Gone (the watch fell too far behind) lists again at once; any
    other failure (an API error, the server refusing or resetting) is `broken(why,
    failures)`, then a wait of `retry_seconds[failures - 1]`, the last one repeated.
    `listed(failures)` runs after each list, with the failures that came before it."""
    failures = 0
    while not stop.is_set():
        try:
            since = relist()
            listed(failures)
            failures = 0
            while not stop.is_set():
                since = follow(since)
        except ApiException as err:
            if err.status == 410:
                continue
            failures += 1
            broken(f"{err.status} {err.reason}", failures)
            time.sleep(retry_seconds[min(failures, len(retry_seconds)) - 1])
        except Exception as err:  # refused or reset: the API server is away
            failures += 1
            broken(one_line(err, 200), failures)
            time.sleep(retry_seconds[min(failures, len(retry_seconds)) - 1])

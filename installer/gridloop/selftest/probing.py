"""The self-test's requests: HTTP GETs to the health service, dry-run creates to the API
server. Thin: each answer becomes an `HttpAnswer` or `ApiAnswer` and `verdicts` judges
it. Tries are bounded (`BACKOFFS_S`); no object is ever created (`dryRun=All`).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as TransportError

from gridloop.selftest.probes import Probe
from gridloop.selftest.verdicts import ApiAnswer, HttpAnswer

# Seconds to wait before each further try: a check gives up after five tries and 15 s of
# pauses (under a minute with every try timing out), inside `helm test`'s default 5 minutes.
BACKOFFS_S = (1.0, 2.0, 4.0, 8.0)
REQUEST_TIMEOUT_S = 5.0

A = TypeVar("A")


def with_retries(
    attempt: Callable[[], A],
    again: Callable[[A], bool],
    sleep: Callable[[float], None] = time.sleep,
) -> A:
    """`attempt()` until `again(answer)` is false or the backoffs run out; the last answer."""
    answer = attempt()
    for pause in BACKOFFS_S:
        if not again(answer):
            break
        sleep(pause)
        answer = attempt()
    return answer


def http_get(url: str) -> HttpAnswer:
    try:
        with urllib.request.urlopen(url, timeout=REQUEST_TIMEOUT_S) as response:
            return HttpAnswer(response.status, response.read().decode("utf-8", "replace"))
    except urllib.error.HTTPError as err:  # an answer, only not a 2xx one
        return HttpAnswer(err.code, err.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        return HttpAnswer(0, error=" ".join(str(reason).split()) or type(err).__name__)


def _status_message(body: Any) -> str:
    try:
        status = json.loads(body)
    except (TypeError, ValueError):
        return " ".join(str(body or "").split())
    return str(status.get("message", "")) if isinstance(status, dict) else str(status)


def submit(api: client.ApiClient, probe: Probe) -> ApiAnswer:
    """Create `probe.body` as a server-side dry run: admission runs, nothing is stored."""
    custom = client.CustomObjectsApi(api)
    creators = {
        "Pod": client.CoreV1Api(api).create_namespaced_pod_with_http_info,
        "Job": client.BatchV1Api(api).create_namespaced_job_with_http_info,
        "RayCluster": partial(
            _create_custom, custom.create_namespaced_custom_object_with_http_info, "rayclusters"
        ),
    }
    create = creators[probe.kind]
    try:
        _, status, headers = create(
            probe.namespace,
            probe.body,
            dry_run="All",
            _preload_content=False,
            _request_timeout=REQUEST_TIMEOUT_S,
        )
    except ApiException as err:
        if not err.status:  # the client's own failure, not the server's answer
            return ApiAnswer(0, " ".join(str(err.reason or err).split()))
        warnings = (err.headers or {}).get("Warning", "")
        return ApiAnswer(int(err.status), _status_message(err.body), str(warnings))
    except (TransportError, OSError) as err:  # refused, timed out, no route, TLS
        return ApiAnswer(0, " ".join(str(err).split()) or type(err).__name__)
    return ApiAnswer(int(status), "", str((headers or {}).get("Warning", "")))


def _create_custom(create: Any, plural: str, namespace: str, body: Any, **kwargs: Any) -> Any:
    """A custom object's create, called as the built-in kinds' are (namespace, body)."""
    group, _, version = body["apiVersion"].partition("/")
    return create(group, version, namespace, plural, body, **kwargs)

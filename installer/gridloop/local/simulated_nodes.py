"""Create the fleet's simulated GPU nodes and wait for kwok to make them Ready.

Level-triggered: the cluster ends up with exactly the fleet's nodes among
those labelled simulated (missing ones created, extra ones deleted, the rest
left alone). Creation is concurrent: one sequential client loop is the
baseline `bench/bench_local_up.py` compares against.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from gridloop.errors import ClusterError
from gridloop.fleet import SIMULATED_LABEL, Fleet, node_manifest, planned_nodes

SELECTOR = f"{SIMULATED_LABEL}=true"


@dataclass(frozen=True)
class Sync:
    created: int
    deleted: int
    kept: int


def _existing(core: client.CoreV1Api) -> set[str]:
    resp = core.list_node(label_selector=SELECTOR, _preload_content=False)
    return {item["metadata"]["name"] for item in json.loads(resp.data)["items"]}


def _create(core: client.CoreV1Api, body: dict[str, Any]) -> None:
    try:
        core.create_node(body=body, _preload_content=False)
    except ApiException as err:
        if err.status != 409:  # already there: fine, level-triggered
            raise ClusterError(f"creating node {body['metadata']['name']}: {err.reason}") from err


def _delete(core: client.CoreV1Api, name: str) -> None:
    try:
        core.delete_node(name, _preload_content=False)
    except ApiException as err:
        if err.status != 404:
            raise ClusterError(f"deleting node {name}: {err.reason}") from err


def sync(api: client.ApiClient, fleet: Fleet, workers: int = 16) -> Sync:
    core = client.CoreV1Api(api)
    want = {p.name: p for p in planned_nodes(fleet)}
    have = _existing(core)
    missing = [node_manifest(want[n]) for n in want if n not in have]
    extra = sorted(have - want.keys())
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda body: _create(core, body), missing))
        list(pool.map(lambda name: _delete(core, name), extra))
    return Sync(created=len(missing), deleted=len(extra), kept=len(have & want.keys()))


def _is_ready(node: dict[str, Any]) -> bool:
    for cond in node.get("status", {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def count_ready(api: client.ApiClient) -> tuple[int, int]:
    """(ready, total) among simulated nodes."""
    resp = client.CoreV1Api(api).list_node(label_selector=SELECTOR, _preload_content=False)
    items = json.loads(resp.data)["items"]
    return sum(1 for n in items if _is_ready(n)), len(items)


def wait_ready(
    api: client.ApiClient,
    expected: int,
    timeout: float,
    progress: Callable[[int, int], None] = lambda ready, total: None,
) -> float:
    """Block until `expected` simulated nodes are Ready; return the seconds it took."""
    start = time.monotonic()
    interval = 0.2 if expected < 500 else 1.0
    ready = 0
    while True:
        ready, _total = count_ready(api)
        progress(ready, expected)
        if ready >= expected:
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise ClusterError(
                f"only {ready} of {expected} simulated nodes became Ready within {timeout:.0f}s "
                "(see the kwok log in the state directory)"
            )
        time.sleep(interval)

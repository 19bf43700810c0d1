"""Create the fleet's simulated GPU nodes and wait for kwok to make them Ready.

Level-triggered: the cluster ends up with exactly the fleet's nodes among
those labelled simulated (missing ones created, extra ones deleted, the rest
left alone but for the GPU taint, added where a node made by an older gridloop
lacks it). Creation is concurrent: one sequential client loop is the
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
from gridloop.fleet import (
    GPU_TAINT,
    LABEL_GPU_PRODUCT,
    LABEL_POOL,
    LABEL_REGION,
    LABEL_SITE,
    LABEL_SITE_TYPE,
    RESOURCE_GPU,
    SIMULATED_LABEL,
    Fleet,
    node_manifest,
    planned_nodes,
)
from gridloop.local.node_taints import change_taints, with_taint

SELECTOR = f"{SIMULATED_LABEL}=true"


@dataclass(frozen=True)
class Sync:
    created: int
    deleted: int
    kept: int


def _existing(core: client.CoreV1Api) -> dict[str, list[dict[str, Any]]]:
    """Each simulated node's taints, by name."""
    resp = core.list_node(label_selector=SELECTOR, _preload_content=False)
    return {
        item["metadata"]["name"]: (item.get("spec") or {}).get("taints") or []
        for item in json.loads(resp.data)["items"]
    }


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
    extra = sorted(have.keys() - want.keys())
    add_taint = with_taint(GPU_TAINT)
    untainted = [n for n in want if n in have and add_taint(have[n]) != have[n]]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda body: _create(core, body), missing))
        list(pool.map(lambda name: _delete(core, name), extra))
        list(pool.map(lambda name: change_taints(core, name, add_taint), untainted))
    return Sync(created=len(missing), deleted=len(extra), kept=len(have.keys() & want.keys()))


def _is_ready(node: dict[str, Any]) -> bool:
    for cond in node.get("status", {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def _list(api: client.ApiClient) -> list[dict[str, Any]]:
    resp = client.CoreV1Api(api).list_node(label_selector=SELECTOR, _preload_content=False)
    items: list[dict[str, Any]] = json.loads(resp.data)["items"]
    return items


def count_ready(api: client.ApiClient) -> tuple[int, int]:
    """(ready, total) among simulated nodes."""
    items = _list(api)
    return sum(1 for n in items if _is_ready(n)), len(items)


@dataclass(frozen=True)
class PoolRow:
    site: str
    site_type: str
    region: str
    pool: str
    product: str
    ready: int
    nodes: int
    gpus: int


def summarize(nodes: list[dict[str, Any]]) -> list[PoolRow]:
    """Per site and pool: nodes Ready of total and allocatable GPUs (pure)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for node in nodes:
        labels = node["metadata"].get("labels", {})
        groups.setdefault((labels.get(LABEL_SITE, "?"), labels.get(LABEL_POOL, "?")), []).append(
            node
        )
    rows = []
    for (site, pool), members in sorted(groups.items()):
        labels = members[0]["metadata"].get("labels", {})
        rows.append(
            PoolRow(
                site=site,
                site_type=labels.get(LABEL_SITE_TYPE, "?"),
                region=labels.get(LABEL_REGION, "?"),
                pool=pool,
                product=labels.get(LABEL_GPU_PRODUCT, "?"),
                ready=sum(1 for n in members if _is_ready(n)),
                nodes=len(members),
                gpus=sum(
                    int(n.get("status", {}).get("allocatable", {}).get(RESOURCE_GPU, 0))
                    for n in members
                ),
            )
        )
    return rows


def fleet_rows(api: client.ApiClient) -> list[PoolRow]:
    return summarize(_list(api))


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

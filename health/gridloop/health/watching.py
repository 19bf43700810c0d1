"""GPU nodes kept current by a watch, so a cycle does not list the whole fleet each time.

Listing 5,000 nodes is ~23 MB of JSON, and decoding it costs the health service most of
a second of CPU per cycle; the fleet changes far less often than that. So the service
lists once, then follows a watch (as controller-runtime's informers do) and a cycle
reads the views in memory. Expect it to be slightly stale, and make stale harmless:

- every version of a node reaches the cache through `offer`, which keeps the newer of
  what it has and what it is offered (resourceVersions compared as numbers, as etcd
  issues them), so a late watch event never overwrites a newer node;
- the executor offers each node it patched straight from the API server's answer, so
  the next cycle sees its own quarantine even before the watch delivers it, and never
  plans the same quarantine twice;
- while the watch is broken (the API server restarting) the cache says so, and the
  service falls back to listing.

It keeps NodeViews only, not the node objects, and each node's resourceVersion and taints:
the executor builds its patches from those (`basis`) instead of reading the node first,
and the version makes the API server refuse a patch built from a node that changed since.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from gridloop import kube
from gridloop.health.listing import GPU_LABEL, GPU_NODES, list_views, node_view
from gridloop.health.observed import NodeView

Log = Callable[[str], None]
WATCH_SECONDS = 300  # the server ends a watch after this; the cache then resumes it
RETRY_SECONDS = (0.5, 1, 2, 5, 10)  # between failed lists, growing, then staying at 10


def _version(node: dict[str, Any]) -> int:
    try:
        return int(node["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return 0


class NodeCache:
    def __init__(self, api: client.ApiClient, opt_out_label: str, log: Log = print) -> None:
        self.core = client.CoreV1Api(api)
        self.opt_out_label = opt_out_label
        self.log = log
        self._views: dict[str, NodeView] = {}
        self._versions: dict[str, int] = {}
        self._taints: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.cpu_s = 0.0  # CPU time the watch thread has used, for the cycle's own accounting

    def start(self) -> NodeCache:
        self._thread = threading.Thread(target=self._run, name="health-nodes", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def views(self) -> dict[str, NodeView] | None:
        """A copy of every GPU node's view, or None while the cache is not in sync."""
        if not self._synced.is_set():
            return None
        with self._lock:
            return dict(self._views)

    def get(self, name: str) -> NodeView | None:
        """The view the cache holds for one node, in sync or not."""
        with self._lock:
            return self._views.get(name)

    def basis(self, name: str) -> dict[str, Any] | None:
        """What a node patch is built from (name, resourceVersion, taints), or None."""
        with self._lock:
            version, taints = self._versions.get(name), self._taints.get(name)
        if not version or taints is None:
            return None
        return {
            "metadata": {"name": name, "resourceVersion": str(version)},
            "spec": {"taints": taints},
        }

    def offer(self, node: dict[str, Any]) -> None:
        """Take this version of a node if it is newer than the one the cache has."""
        name, version = node["metadata"]["name"], _version(node)
        labels = node["metadata"].get("labels") or {}
        gpu_node = labels.get(GPU_LABEL[0]) == GPU_LABEL[1]
        with self._lock:
            if version and version < self._versions.get(name, 0):
                return
            self._versions[name] = version
            if gpu_node:
                self._views[name] = node_view(node, self.opt_out_label)
                self._taints[name] = (node.get("spec") or {}).get("taints") or []
            else:
                self._views.pop(name, None)
                self._taints.pop(name, None)

    def _forget(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        with self._lock:
            if _version(node) >= self._versions.get(name, 0):
                self._views.pop(name, None)
                self._versions.pop(name, None)
                self._taints.pop(name, None)

    def _list(self) -> str:
        listed = list_views(self.core, self.opt_out_label)
        with self._lock:
            self._views, self._versions, self._taints = listed.views, listed.versions, listed.taints
        return str(listed.resource_version)

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        if kind in ("ADDED", "MODIFIED"):
            self.offer(obj)
        elif kind == "DELETED":
            self._forget(obj)
        self.cpu_s = time.thread_time()

    def _follow(self, since: str) -> str:
        """Apply watch events until the server ends the watch; returns where it got to."""
        return kube.watch_once(
            self.core.list_node,
            since,
            self._apply,
            self._stop,
            WATCH_SECONDS,
            label_selector=GPU_NODES,
        )

    def _listed(self, failures: int) -> None:
        self.cpu_s = time.thread_time()
        self._synced.set()
        if failures:
            self.log("node watch back: cycles read the cache again")

    def _broken(self, why: str, failures: int) -> None:
        self._synced.clear()
        if failures == 1:
            self.log(f"node watch broken, listing each cycle until it is back: {why}")

    def _run(self) -> None:
        kube.list_then_watch(
            self._list,
            self._follow,
            self._stop,
            listed=self._listed,
            broken=self._broken,
            retry_seconds=RETRY_SECONDS,
        )

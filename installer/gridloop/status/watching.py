"""Big lists kept current by a watch, so a refresh does not list 5,000 nodes again.

A refresh of `gridloop status` must cost well under 100 ms of CPU; listing and
decoding 5,000 nodes costs most of a second. So the fleet's nodes and the pods that
hold GPUs are listed once (a page at a time, raw JSON), followed by a watch, and
each object is projected to the few fields status shows as it arrives: the cache
holds small values, not node objects. While the watch is broken (API server away)
the mirror keeps its last data and says why; it lists again when the server is back.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from gridloop import kube

T = TypeVar("T")
PAGE = 500
WATCH_SECONDS = 240
RETRY_SECONDS = (0.5, 1, 2, 5)
REQUEST_TIMEOUT = 10.0  # seconds for one list page; a watch is bounded by WATCH_SECONDS


def object_key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else str(meta["name"])


class Mirror(Generic[T]):
    """`list_fn` is a kubernetes client list call (CoreV1Api.list_node, ...);
    `project(obj)` turns one raw object into what is kept, or None to skip it."""

    def __init__(
        self,
        name: str,
        list_fn: Callable[..., Any],
        project: Callable[[dict[str, Any]], T | None],
        **selectors: str,
    ) -> None:
        self.name = name
        self.list_fn = list_fn
        self.project = project
        self.selectors = selectors
        self.problem = "not listed yet"
        self.version = 0  # bumped on every change, so readers can tell nothing moved
        self.events = 0  # watch events read, shown or not (a heartbeat is one)
        self.synced_at: float | None = None  # monotonic: when the first list was in
        self._items: dict[str, T] = {}
        self._changed: set[str] | None = None  # keys changed since changes(); None: all
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()

    def start(self) -> Mirror[T]:
        threading.Thread(target=self._run, name=f"status-{self.name}", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def items(self) -> dict[str, T]:
        with self._lock:
            return dict(self._items)

    def changes(self) -> tuple[dict[str, T], set[str] | None]:
        """The items, and the keys added, changed or removed since the last call (None
        when every key may have: the first call, and after a list). For one reader."""
        with self._lock:
            changed, self._changed = self._changed, set()
            return dict(self._items), changed

    def _list(self) -> str:
        items: dict[str, T] = {}
        token = None
        while True:
            raw = self.list_fn(
                limit=PAGE,
                _continue=token,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
                **self.selectors,
            )
            page = json.loads(raw.data)
            for obj in page["items"]:
                value = self.project(obj)
                if value is not None:
                    items[object_key(obj)] = value
            token = page["metadata"].get("continue")
            if not token:
                break
        with self._lock:
            self._items = items
            self._changed = None
            self.version += 1
        return str(page["metadata"]["resourceVersion"])

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        self.events += 1
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return
        key = object_key(obj)
        value = None if kind == "DELETED" else self.project(obj)
        with self._lock:
            before = self._items.get(key)
            if value is None:
                self._items.pop(key, None)
            else:
                self._items[key] = value
            # a kubelet heartbeat changes the node, not what status shows of it
            if value != before:
                self.version += 1
                if self._changed is not None:
                    self._changed.add(key)

    def _follow(self, since: str) -> str:
        return kube.watch_once(
            self.list_fn, since, self._apply, self._stop, WATCH_SECONDS, **self.selectors
        )

    def _listed(self, failures: int) -> None:
        self.problem = ""
        if not self._synced.is_set():
            self.synced_at = time.monotonic()
        self._synced.set()

    def _broken(self, why: str, failures: int) -> None:
        self.problem = f"{self.name} not current: {why}"

    def _run(self) -> None:
        kube.list_then_watch(
            self._list,
            self._follow,
            self._stop,
            listed=self._listed,
            broken=self._broken,
            retry_seconds=RETRY_SECONDS,
        )

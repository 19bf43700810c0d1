"""Carry out plan()'s actions on the cluster: the thin shell around patches.py.

Node patches carry a field manager and the resourceVersion they were built
from; a 409 Conflict is retried after a fresh read, a bounded number of times
(`BACKOFFS`). Every action that changes a node leaves a Kubernetes Event on
it. In dry-run nothing at all is sent: the outcomes say what would have been
done, and that is all.

Actions on different nodes are independent (plan() gives each node at most
one), so they run on a small pool of threads: 500 quarantines at once are
500 x (patch, Event) round trips, which one thread does at about 20 nodes a
second. A patch is built from the node watch's copy (`basis`: resourceVersion
and taints) when there is one, so the node is read only after a conflict. One
action failing (the API server refused it) is its own outcome, marked failed;
the others still happen. Responses are read as plain JSON, not as the client's
model classes, whose decoding costs more CPU than the request.

The long-running service sends Events in the background (`EventSender`), as
client-go's event recorder does: an action is done when its patch is, and a
storm's last quarantine does not wait for the Events of the first.
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

from gridloop import kube, names
from gridloop.errors import one_line
from gridloop.health import patches
from gridloop.health.actions import (
    Acknowledge,
    Action,
    ClearHealthy,
    MarkHealthy,
    Quarantine,
    Release,
)
from gridloop.health.observed import MANAGER

BACKOFFS = (0.05, 0.1, 0.2, 0.5, 1.0)  # seconds between conflict retries
WORKERS = 16  # concurrent node actions; the API client's connection pool is sized to match
EVENT_WORKERS = 4  # Events sent side by side in the background (connections on top of WORKERS)
SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})
EVENT_REASONS = {
    Quarantine: "GPUQuarantined",
    Release: "GPUReleased",
    Acknowledge: "GPUQuarantineOverridden",
}


@dataclass(frozen=True)
class Outcome:
    action: Action
    applied: bool
    detail: str = ""
    failed: bool = False  # the cluster refused it or could not be reached: nothing was done


class EventSender:
    """Node Events sent by a few threads of their own; `close` waits for the last."""

    def __init__(
        self, core: client.CoreV1Api, log: Callable[[str], None] = print, instance: str = MANAGER
    ) -> None:
        self.core, self.log, self.instance = core, log, instance
        self.pool = ThreadPoolExecutor(EVENT_WORKERS, thread_name_prefix="health-events")

    def send(self, node: str, reason: str, message: str) -> None:
        self.pool.submit(self._send, node, reason, message)

    def _send(self, node: str, reason: str, message: str) -> None:
        try:
            _node_event(self.core, node, reason, message, self.instance)
        except Exception as err:  # the action itself is done; say so and go on
            self.log(f"event {reason} on {node} not sent: {api_error(err)}")

    def close(self) -> None:
        self.pool.shutdown(wait=True)


class Executor:
    def __init__(
        self,
        api: client.ApiClient,
        dry_run: bool = False,
        protected_namespaces: frozenset[str] = SYSTEM_NAMESPACES,
        clock: Callable[[], float] = time.time,
        workers: int = WORKERS,
        on_patched: Callable[[dict[str, Any]], None] = lambda _node: None,
        basis: Callable[[str], dict[str, Any] | None] = lambda _name: None,
        events: EventSender | None = None,
        instance: str = MANAGER,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.instance = instance  # which replica reports the Events it sends itself
        self.dry_run = dry_run
        self.protected = protected_namespaces
        self.clock = clock
        self.workers = workers
        self.on_patched = on_patched  # gets each node as the API server returned it
        self.basis = basis  # a node's cached resourceVersion and taints, if known
        self.events = events  # None: each Event is sent before the action counts as done

    def apply(self, actions: list[Action]) -> list[Outcome]:
        """One outcome per action, in the same order."""
        if self.workers <= 1 or len(actions) <= 1:
            return [self._attempt(a) for a in actions]
        workers = min(self.workers, len(actions))
        with ThreadPoolExecutor(workers, thread_name_prefix="health-act") as pool:
            return list(pool.map(self._attempt, actions))

    def _attempt(self, action: Action) -> Outcome:
        try:
            return self._apply(action)
        except Exception as err:  # one refused patch must not stop the others
            return Outcome(action, applied=False, detail=f"failed: {api_error(err)}", failed=True)

    def _apply(self, action: Action) -> Outcome:
        build = self._patch_for(action)
        if build is None:  # Hold, Warn, Skip, TripBreaker: nothing to do on a node
            return Outcome(action, applied=False, detail="nothing to change on a node")
        node_name = action.node  # type: ignore[union-attr]
        if self.dry_run:
            return Outcome(action, applied=False, detail="dry-run: not applied")
        self._patch_node(node_name, build)
        if isinstance(action, Quarantine) and action.drain:
            evicted = self._drain(node_name)
            detail = f"evicted {evicted} GPU pods"
        else:
            detail = ""
        reason = EVENT_REASONS.get(type(action))
        if reason:
            self._event(node_name, reason, _message(action))
        return Outcome(action, applied=True, detail=detail)

    def _patch_for(self, action: Action) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
        match action:
            case Quarantine():
                return lambda node: patches.quarantine(node, action, self.clock())
            case Release():
                return patches.release
            case Acknowledge():
                return lambda node: patches.acknowledge(node, action)
            case MarkHealthy():
                return lambda node: patches.healthy_since(node, action.since)
            case ClearHealthy():
                return lambda node: patches.healthy_since(node, None)
        return None

    def _patch_node(self, name: str, build: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        cached = self.basis(name)  # the watch's copy: the node is read only if it is stale
        for delay in (*BACKOFFS, None):
            node = cached or json.loads(self.core.read_node(name, _preload_content=False).data)
            try:
                answer = self.core.patch_node(
                    name, build(node), field_manager=MANAGER, _preload_content=False
                )
                self.on_patched(json.loads(answer.data))
                return
            except ApiException as err:
                if err.status != 409 or delay is None:
                    raise
                if cached is None:  # a conflict on what was just read: someone is busy there
                    time.sleep(delay)
                cached = None

    def _drain(self, node: str) -> int:
        pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
        evicted = 0
        for pod in pods:
            if pod.metadata.namespace in self.protected or not _uses_gpu(pod):
                continue
            if any(o.kind == "DaemonSet" for o in pod.metadata.owner_references or []):
                continue
            body = client.V1Eviction(
                metadata=client.V1ObjectMeta(
                    name=pod.metadata.name, namespace=pod.metadata.namespace
                )
            )
            try:
                self.core.create_namespaced_pod_eviction(
                    pod.metadata.name, pod.metadata.namespace, body
                )
                evicted += 1
            except ApiException as err:
                if err.status not in (404, 429):  # 429: a PodDisruptionBudget says not now
                    raise
        return evicted

    def _event(self, node: str, reason: str, message: str) -> None:
        if self.events is not None:
            self.events.send(node, reason, message)
        else:
            _node_event(self.core, node, reason, message, self.instance)


def _node_event(
    core: client.CoreV1Api, node: str, reason: str, message: str, instance: str
) -> None:
    ref = client.V1ObjectReference(kind="Node", name=node, uid=node)
    record_event(core, "default", ref, reason, message, reason == "GPUQuarantined", instance)


def record_event(
    core: client.CoreV1Api,
    namespace: str,
    about: client.V1ObjectReference,
    reason: str,
    message: str,
    warning: bool,
    instance: str = MANAGER,
) -> None:
    """A core/v1 Event from the health service about `about` (a Node, the status ConfigMap),
    reported by `instance`: the replica's name in the leader Lease, so who acted can be told."""
    kube.record_event(
        core,
        about,
        reason,
        message,
        namespace=namespace,
        component=MANAGER,
        instance=instance,
        warning=warning,
        suffix="gpu-health",
    )


def api_error(err: Exception) -> str:
    if isinstance(err, ApiException):
        try:
            message = json.loads(err.body or "")["message"]
        except (ValueError, KeyError, TypeError):
            message = err.reason
        return f"{err.status} {one_line(Exception(message))}"[:300]
    return one_line(err)


def _uses_gpu(pod: Any) -> bool:
    for container in pod.spec.containers or []:
        res = container.resources
        wanted = {**((res and res.limits) or {}), **((res and res.requests) or {})}
        if names.GPU_RESOURCE in wanted:
            return True
    return False


def _message(action: Action) -> str:
    match action:
        case Quarantine():
            return f"quarantined by {MANAGER}: {action.reason}"
        case Release():
            return f"released by {MANAGER}: healthy for the whole hold-down"
        case Acknowledge():
            return (
                f"uncordoned by hand: {MANAGER} stands down for {', '.join(sorted(action.faults))}"
            )
    return ""

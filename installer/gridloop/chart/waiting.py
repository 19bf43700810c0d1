"""Wait until the release's workloads are ready, or webhooks' Services serve, with progress.

Reads only (Deployments, DaemonSets, StatefulSets, EndpointSlices), polled every
POLL seconds until a deadline; at the deadline a model's Deployment that is not ready
gets a Warning Event saying which revision serves and why the new one is stuck
(models/rollout_reading.py), and the error says the same, with every node whose kubelet
reports disk, memory or PID pressure (it evicts pods: the wait could not end). A model
whose new revision will certainly not start (rollouts.certain: no weights, refused keys,
a server that crashes again after two restarts) ends the wait at once, with the same
words. On a terminal the wait shows a progress bar (rich.progress: already installed as
Textual's renderer, it redraws one line and stays silent when the output is not a
terminal); elsewhere it prints nothing until it ends. The rules of readiness are in readiness.py.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from gridloop.chart import readiness
from gridloop.chart.exits import NotReady
from gridloop.chart.objects import Ref
from gridloop.kube import get
from gridloop.models import rollout_reading, rollouts

POLL = 1.0  # seconds between reads
PLURAL = {"Deployment": "deployments", "DaemonSet": "daemonsets", "StatefulSet": "statefulsets"}

Tick = Callable[[int], None]


@contextmanager
def progress(what: str, total: int) -> Iterator[Tick]:
    """A progress bar on a terminal, nothing elsewhere; yields `tick(done)`."""
    if not sys.stdout.isatty() or total == 0:
        yield lambda _done: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        f"  … {what}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True
    ) as bar:
        task = bar.add_task(what, total=total)
        yield lambda done: bar.update(task, completed=done)


def _read(api: client.ApiClient, ref: Ref) -> dict[str, Any] | None:
    path = f"/apis/apps/v1/namespaces/{ref.namespace}/{PLURAL[ref.kind]}/{ref.name}"
    try:
        found: dict[str, Any] = get(api, path)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return found


def workloads(api: client.ApiClient, refs: Sequence[Ref], timeout: float) -> None:
    """Return once every workload is ready; NotReady naming the rest at the deadline."""
    deadline = time.monotonic() + timeout
    with progress("waiting for workloads to be ready", len(refs)) as tick:
        while True:
            states = {ref: readiness.state(ref.kind, _read(api, ref)) for ref in refs}
            tick(sum(1 for why in states.values() if not why))
            if not any(states.values()):
                return
            models = _model_rollouts(api, states)
            hopeless = [f"model {r.model}" for _found, r in models if r.hopeless]
            if hopeless or time.monotonic() >= deadline:
                found = [*_stuck_models(api, models), *_pressured_nodes(api)]
                said = "".join(f"\n  {m}" for m in found)
                waited = time.monotonic() - deadline + timeout
                when = (
                    f"after {waited:.0f}s, given up before the {timeout:.0f}s timeout: "
                    f"{', '.join(hopeless)} will not start without a change"
                    if hopeless
                    else f"after {timeout:.0f}s"
                )
                raise NotReady(f"not ready {when}: {readiness.not_ready(states)}{said}")
            time.sleep(POLL)


def _pressured_nodes(api: client.ApiClient) -> list[str]:
    nodes: list[dict[str, Any]] = get(api, "/api/v1/nodes").get("items") or []
    return readiness.pressured(nodes)


def _model_rollouts(
    api: client.ApiClient, states: dict[Ref, str]
) -> list[tuple[dict[str, Any], rollouts.Rollout]]:
    """Each model Deployment among the workloads not ready, with its unfinished rollout."""
    out = []
    for ref, why in states.items():
        if not why or ref.kind != "Deployment":
            continue
        found = _read(api, ref)
        if found is None or not rollout_reading.is_model(found):
            continue
        rollout = rollout_reading.read(api, found)
        if not rollout.done:
            out.append((found, rollout))
    return out


def _stuck_models(
    api: client.ApiClient, models: list[tuple[dict[str, Any], rollouts.Rollout]]
) -> list[str]:
    """For each model Deployment not ready: which revision serves and why the new one is
    stuck (rollouts.certain says when no wait helps), also written as an Event on it."""
    said = []
    for found, rollout in models:
        try:
            said.append(rollout_reading.record(api, found, rollout))
        except ApiException as err:  # the reason still reaches the user, without the Event
            said.append(f"model {rollout.model}: {rollout.summary()} (no Event: {err.reason})")
    return said


def services(api: client.ApiClient, services: Sequence[tuple[str, str]], timeout: float) -> None:
    """Return once every (namespace, name) Service has a ready endpoint."""
    deadline = time.monotonic() + timeout
    with progress("waiting for webhook endpoints", len(services)) as tick:
        while True:
            left = [
                (ns, name)
                for ns, name in services
                if not readiness.serving(
                    get(
                        api,
                        f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
                        {"labelSelector": f"kubernetes.io/service-name={name}"},
                    ).get("items")
                    or []
                )
            ]
            tick(len(services) - len(left))
            if not left:
                return
            if time.monotonic() >= deadline:
                named = ", ".join(f"Service {ns}/{name}" for ns, name in left)
                raise NotReady(
                    f"webhooks not serving after {timeout:.0f}s: no ready endpoint for {named}"
                )
            time.sleep(POLL)


WEBHOOK_PLURAL = {
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
}


def ca_bundles(api: client.ApiClient, configs: Sequence[tuple[str, str]], timeout: float) -> None:
    """Return once every fail-closed Service webhook of these (kind, name) configurations
    has a caBundle; NotReady naming the rest at the deadline."""
    deadline = time.monotonic() + timeout
    with progress("waiting for webhook CA bundles", len(configs)) as tick:
        while True:
            left: dict[str, list[str]] = {}
            for kind, name in configs:
                path = f"/apis/admissionregistration.k8s.io/v1/{WEBHOOK_PLURAL[kind]}/{name}"
                try:
                    live = get(api, path)
                except ApiException as err:
                    if err.status != 404:
                        raise
                    live = None
                if missing := readiness.without_ca(live):
                    left[f"{kind} {name}"] = missing
            tick(len(configs) - len(left))
            if not left:
                return
            if time.monotonic() >= deadline:
                named = "; ".join(f"{c}: {', '.join(h)}" for c, h in left.items())
                raise NotReady(f"webhooks without a CA bundle after {timeout:.0f}s: {named}")
            time.sleep(POLL)

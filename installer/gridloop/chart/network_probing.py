"""`gridloop doctor --probe-network`: create the probe pair, read what its client saw,
delete it all (network_probe.py decides what to create and what it means)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from gridloop.chart import network_probe
from gridloop.chart.diagnosis import Check
from gridloop.kube import status_of

WAIT_S = 120.0  # for the three pods: a first pull of gridloop's image included
STUCK = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError")


def probe(api: client.ApiClient, docs: Sequence[dict[str, Any]], wait_s: float = WAIT_S) -> Check:
    template = network_probe.pod_template(docs)
    if template is None:
        return network_probe.unfinished("the chart renders no pod in gridloop's image")
    core, net = client.CoreV1Api(api), client.NetworkingV1Api(api)
    ns = f"{network_probe.NAMESPACE_PREFIX}{uuid.uuid4().hex[:5]}"
    deadline = time.monotonic() + wait_s
    try:
        core.create_namespace(network_probe.namespace(ns))
        net.create_namespaced_network_policy(ns, network_probe.deny_closed(ns))
        for role in ("open", "closed"):
            core.create_namespaced_pod(ns, network_probe.pod(template, ns, role))
        ips = [_wait(core, ns, role, _ready, deadline) for role in ("open", "closed")]
        if not all(ips):
            return network_probe.unfinished(_why(core, ns, ("open", "closed"), wait_s))
        core.create_namespaced_pod(ns, network_probe.pod(template, ns, "client", ips))
        if not _wait(core, ns, "client", _done, deadline):
            return network_probe.unfinished(_why(core, ns, ("client",), wait_s))
        # raw: the client library would read a JSON log line as a dict and give its repr
        log = core.read_namespaced_pod_log("client", ns, _preload_content=False)
        seen = network_probe.parse(log.data.decode(errors="replace"))
        if seen is None:
            return network_probe.unfinished("the probe's client printed no result")
        return network_probe.verdict(seen)
    except ApiException as err:
        return network_probe.unfinished(f"making the probe in {ns} failed: {status_of(err)}")
    finally:
        with contextlib.suppress(ApiException):  # never made, or already going
            core.delete_namespace(ns, propagation_policy="Background")


def _ready(pod: client.V1Pod) -> str:
    conditions = pod.status.conditions or []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    return str(pod.status.pod_ip) if ready and pod.status.pod_ip else ""


def _done(pod: client.V1Pod) -> str:
    return "done" if pod.status.phase in ("Succeeded", "Failed") else ""


def _wait(
    core: client.CoreV1Api, ns: str, name: str, test: Callable[[client.V1Pod], str], deadline: float
) -> str:
    while True:
        pod = core.read_namespaced_pod(name, ns)
        if found := test(pod):
            return found
        if _stuck(pod) or time.monotonic() > deadline:
            return ""
        time.sleep(0.5)


def _stuck(pod: client.V1Pod) -> str:
    for status in pod.status.container_statuses or []:
        waiting = status.state.waiting if status.state else None
        if waiting and waiting.reason in STUCK:
            return f"{waiting.reason}: {waiting.message or ''}".strip(": ")
    return ""


def _why(core: client.CoreV1Api, ns: str, names: Sequence[str], wait_s: float) -> str:
    for name in names:
        pod = core.read_namespaced_pod(name, ns)
        if stuck := _stuck(pod):
            return f"probe pod {name}: {stuck}"
    return f"the probe pods were not running within {wait_s:.0f} s"

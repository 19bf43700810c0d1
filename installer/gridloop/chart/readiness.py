"""When a workload counts as ready, and how a wait's timeout reads (pure).

The rules are `kubectl rollout status`'s: the controller has seen the newest spec
(observedGeneration), every replica runs it, and all of them are available (ready).
A workload not found yet is not ready. `helm --wait` is not used: it says only that
the wait timed out, and marks the release failed; this names what is not ready.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from gridloop.chart.objects import Ref

_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def seconds(duration: str) -> float:
    """A Go duration (`90s`, `5m`, `1h30m`) in seconds."""
    return sum(float(n) * _UNIT[u] for n, u in _PART.findall(duration))


def state(kind: str, obj: Mapping[str, Any] | None) -> str:
    """ "" when ready, else why not, in a few words."""
    if obj is None:
        return "not found"
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    generation = (obj.get("metadata") or {}).get("generation", 0)
    if status.get("observedGeneration", 0) < generation:
        return "not yet seen by its controller"
    if kind == "DaemonSet":
        want = int(status.get("desiredNumberScheduled", 0))
        updated = int(status.get("updatedNumberScheduled", 0))
        have = int(status.get("numberAvailable", 0))
    else:
        want = 1 if spec.get("replicas") is None else int(spec["replicas"])
        updated = int(status.get("updatedReplicas", 0))
        have = int(status.get("availableReplicas" if kind == "Deployment" else "readyReplicas", 0))
    if updated < want:
        return f"{updated}/{want} updated"
    old = int(status.get("replicas", 0)) - updated
    if kind != "DaemonSet" and old > 0:
        return f"{old} old replicas still running"
    if have < want:
        return f"{have}/{want} ready"
    return ""


def not_ready(states: Mapping[Ref, str]) -> str:
    """`Deployment gridloop-system/gridloop-health (0/1 ready), ...`"""
    return ", ".join(f"{ref.label()} ({why})" for ref, why in states.items() if why)


def serving(slices: list[Mapping[str, Any]]) -> bool:
    """A Service's EndpointSlices hold at least one ready endpoint."""
    return any(
        (endpoint.get("conditions") or {}).get("ready", True)
        for s in slices
        for endpoint in s.get("endpoints") or []
    )


def without_ca(config: Mapping[str, Any] | None) -> list[str]:
    """The webhooks of a live webhook configuration that fail closed, call a Service and
    have no caBundle yet: the API server cannot verify them, so every request they cover
    fails until their injector (Kueue's, cert-manager) has filled it in."""
    if config is None:
        return ["(not found)"]
    return [
        str(hook.get("name", ""))
        for hook in config.get("webhooks") or []
        if hook.get("failurePolicy", "Fail") == "Fail"
        and ((hook.get("clientConfig") or {}).get("service"))
        and not (hook.get("clientConfig") or {}).get("caBundle")
    ]


PRESSURES = ("DiskPressure", "MemoryPressure", "PIDPressure")


def pressured(nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """`node system-000 has DiskPressure ...` for each node a kubelet reports under
    pressure: it evicts pods and admits no new ones, so a wait on them cannot end."""
    said = []
    for node in nodes:
        conditions = (node.get("status") or {}).get("conditions") or []
        true = [c["type"] for c in conditions if c.get("status") == "True"]
        under = [kind for kind in true if kind in PRESSURES]
        if under:
            name = (node.get("metadata") or {}).get("name", "?")
            said.append(
                f"node {name} has {' and '.join(under)}: its kubelet evicts pods and "
                "admits no new ones"
            )
    return said

"""The few edits the bundle makes to upstream manifests, as data (pure).

Each edit returns new documents and leaves its input alone. An edit whose
target is missing fails: an upstream change that moved it must be noticed,
not shipped silently without the edit.

Two kinds of edit. `pin` fixes what a Go-module rendering gets wrong (the
staging image kustomize leaves in); it only runs on renderings. `integrate`
ties a component to the chart and runs on every origin, mirrors included:
a mirror is the upstream release copied for a machine that cannot download
it, and without these edits it would not work with the chart. What only the
release knows (its namespace, a checksum) is written as a
placeholder that templates/upstream.yaml fills in; PLACEHOLDERS lists them.
A controller upstream ships with no securityContext gets a locked-down one, and every
controller's readiness is looked at from its start, every few seconds.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any, TypeGuard

from gridloop.bundle.manifests import Doc, ManifestProblem, name_of
from gridloop.bundle.sources import ImagePin, Source
from gridloop.versions import Component

# Filled in by templates/upstream.yaml (keep the two in step): the release namespace and
# the checksum of the config the chart renders for the component
# (templates/kueue-config.yaml for Kueue).
RELEASE_NAMESPACE = "${GRIDLOOP_RELEASE_NAMESPACE}"
CONFIG_CHECKSUM = "${GRIDLOOP_CONFIG_CHECKSUM}"
PLACEHOLDERS = (RELEASE_NAMESPACE, CONFIG_CHECKSUM)

CONFIG_CHECKSUM_ANNOTATION = "gridloop.io/config-checksum"

_TEMPLATE_KINDS = ("Deployment", "DaemonSet", "StatefulSet")


def pin(source: Source, comp: Component, docs: list[Doc]) -> list[Doc]:
    """`docs` with the released image set, for a rendering (not a mirror)."""
    if source.pin is not None:
        docs = pin_image(docs, source.pin, comp.version)
    return docs


def integrate(source: Source, docs: list[Doc]) -> list[Doc]:
    """`docs` with every edit that ties `source`'s component to the chart."""
    docs = locked_down(docs)
    docs = ready_when_ready(docs)
    if source.release_namespace_from:
        docs = into_release_namespace(docs, source.release_namespace_from)
    for kind, name in source.chart_rendered:
        if kind == "ConfigMap":
            docs = restart_on_config_change(docs, name)
    if source.needs_flag is not None:
        check_flag(docs, *source.needs_flag, source.needs_flag_from)
    return docs


# What a controller's pod and containers get where upstream sets no securityContext at all
# (agent-sandbox's controller, v0.2.1 and v1.0.3 alike, for one): Pod Security
# `restricted` and the read-only root Trivy's checks want. Upstream's own settings, where it
# has any, are kept as they are.
POD_SECURITY = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


def locked_down(docs: list[Doc]) -> list[Doc]:
    """Workloads whose pod or containers set no securityContext, given the defaults above."""
    out: list[Doc] = []
    for doc in docs:
        pod = _pod(doc) if doc.get("kind") in _TEMPLATE_KINDS else {}
        bare = "securityContext" not in pod or any(
            "securityContext" not in c for c in _containers(pod)
        )
        if pod and bare:
            doc = copy.deepcopy(doc)
            pod = _pod(doc)
            pod.setdefault("securityContext", copy.deepcopy(POD_SECURITY))
            for container in _containers(pod):
                container.setdefault("securityContext", copy.deepcopy(CONTAINER_SECURITY))
        out.append(doc)
    return out


# A readiness probe's first look and its period, at most: Kueue's (5 s, then every 10 s)
# and KubeRay's (10 s, then every 5) kept the pods unready 6 to 8 s after they served
# (measured on the local cluster: Kueue's webhook served 5 s after the pod was made, the
# pod Ready at 12 s), and every install waits for Kueue's webhook. Liveness probes, which
# restart a container, keep upstream's delays.
READINESS_PERIOD_S = 2


def ready_when_ready(docs: list[Doc]) -> list[Doc]:
    """Workloads whose readiness probes start late or look rarely: probed from the start,
    every READINESS_PERIOD_S at most (upstream's thresholds and timeouts kept)."""
    out: list[Doc] = []
    for doc in docs:
        pod = _pod(doc) if doc.get("kind") in _TEMPLATE_KINDS else {}
        if any(_slow(c.get("readinessProbe")) for c in _containers(pod)):
            doc = copy.deepcopy(doc)
            for container in _containers(_pod(doc)):
                probe = container.get("readinessProbe")
                if _slow(probe):
                    probe.pop("initialDelaySeconds", None)
                    probe["periodSeconds"] = min(
                        int(probe.get("periodSeconds", 10)), READINESS_PERIOD_S
                    )
        out.append(doc)
    return out


def _slow(probe: object) -> TypeGuard[dict[str, Any]]:
    """A readiness probe that starts late or looks less often than READINESS_PERIOD_S."""
    if not isinstance(probe, dict):
        return False
    # Kubernetes' default period is 10 s
    return (
        bool(probe.get("initialDelaySeconds"))
        or int(probe.get("periodSeconds", 10)) > READINESS_PERIOD_S
    )


def check_flag(docs: list[Doc], deployment: str, container: str, flag: str, where: str) -> None:
    """The Deployment's container runs with `flag` (the chart's objects need it)."""
    for doc in docs:
        if doc.get("kind") == "Deployment" and name_of(doc) == deployment:
            args = [str(a) for a in _container(doc, container).get("args") or []]
            if flag in args or f"{flag}=true" in args:  # a boolean flag, on
                return
            raise ManifestProblem(
                f"Deployment {deployment!r} runs {container!r} without {flag}, which the "
                f"chart's objects need: {where}"
            )
    raise ManifestProblem(f"no Deployment {deployment!r}")


def pin_image(docs: list[Doc], pin: ImagePin, version: str) -> list[Doc]:
    image = pin.for_version(version)
    out: list[Doc] = []
    found = False
    for doc in docs:
        if doc.get("kind") == pin.kind and name_of(doc) == pin.name:
            doc = copy.deepcopy(doc)
            for container in _pod(doc).get("containers") or []:
                if container.get("name") == pin.container:
                    container["image"] = image
                    found = True
        out.append(doc)
    if not found:
        raise ManifestProblem(f"no container {pin.container!r} in {pin.kind} {pin.name!r}")
    return out


def into_release_namespace(docs: list[Doc], upstream: str) -> list[Doc]:
    """Every object and reference in namespace `upstream` moved to the release namespace.

    Objects, binding subjects, webhook and APIService service references are moved;
    any other field still naming `upstream` is an error, so nothing is left behind.
    """
    out: list[Doc] = []
    moved = 0
    for doc in docs:
        doc = copy.deepcopy(doc)
        for holder in _namespace_holders(doc):
            if holder.get("namespace") == upstream:
                holder["namespace"] = RELEASE_NAMESPACE
                moved += 1
        for path in _fields_naming(doc, upstream):
            raise ManifestProblem(
                f"{doc.get('kind')} {name_of(doc)!r}: {path} names namespace {upstream!r}, "
                "which the bundle does not know how to move"
            )
        out.append(doc)
    if not moved:
        raise ManifestProblem(f"no object in namespace {upstream!r} to move")
    return out


def _namespace_holders(doc: Doc) -> Iterator[dict[str, Any]]:
    """The maps whose `namespace` key places the object or names one it refers to."""
    if isinstance(doc.get("metadata"), dict):
        yield doc["metadata"]
    for subject in doc.get("subjects") or []:
        if isinstance(subject, dict):
            yield subject
    for webhook in doc.get("webhooks") or []:
        service = ((webhook or {}).get("clientConfig") or {}).get("service")
        if isinstance(service, dict):
            yield service
    service = (doc.get("spec") or {}).get("service") if doc.get("kind") == "APIService" else None
    if isinstance(service, dict):
        yield service


def _fields_naming(value: object, namespace: str, path: str = "") -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if key == "namespace" and item == namespace:
                yield where
            else:
                yield from _fields_naming(item, namespace, where)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _fields_naming(item, namespace, f"{path}[{index}]")


def restart_on_config_change(docs: list[Doc], config_map: str) -> list[Doc]:
    """Workloads mounting `config_map` annotated with its checksum, so a change restarts them."""
    out: list[Doc] = []
    found = False
    for doc in docs:
        if doc.get("kind") in _TEMPLATE_KINDS and _mounts(doc, config_map):
            doc = copy.deepcopy(doc)
            template = doc["spec"]["template"]
            metadata = template.setdefault("metadata", {})
            annotations = metadata.get("annotations") or {}
            metadata["annotations"] = {**annotations, CONFIG_CHECKSUM_ANNOTATION: CONFIG_CHECKSUM}
            found = True
        out.append(doc)
    if not found:
        raise ManifestProblem(f"no workload mounts ConfigMap {config_map!r}")
    return out


def _mounts(doc: Doc, config_map: str) -> bool:
    return any(
        ((v or {}).get("configMap") or {}).get("name") == config_map
        for v in _pod(doc).get("volumes") or []
    )


def _pod(doc: Doc) -> dict[str, Any]:
    pod = ((doc.get("spec") or {}).get("template") or {}).get("spec")
    return pod if isinstance(pod, dict) else {}


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]


def _container(doc: Doc, name: str) -> dict[str, Any]:
    for container in _pod(doc).get("containers") or []:
        if container.get("name") == name:
            return container  # type: ignore[no-any-return]
    raise ManifestProblem(f"no container {name!r} in {doc.get('kind')} {name_of(doc)!r}")

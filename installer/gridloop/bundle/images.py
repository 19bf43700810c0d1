"""Every container image a bundle runs, for mirroring into an air-gapped registry (pure).

Images come from the pod templates of the rendered upstream manifests and
from the chart's values.yaml (`image:` as a string or as a map with
registry/repository/tag/digest, the convention of most charts). Images that
an operator starts at run time from its own configuration (model images,
for instance) are not in any pod template and are not listed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gridloop.bundle.manifests import Doc

_TEMPLATE = ("spec", "template", "spec")
POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "Deployment": _TEMPLATE,
    "DaemonSet": _TEMPLATE,
    "StatefulSet": _TEMPLATE,
    "ReplicaSet": _TEMPLATE,
    "ReplicationController": _TEMPLATE,
    "Job": _TEMPLATE,
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def in_manifests(docs: Iterable[Doc]) -> set[str]:
    """The images of every container, init container and ephemeral container."""
    images: set[str] = set()
    for doc in docs:
        path = POD_SPEC_PATHS.get(str(doc.get("kind")))
        if path is None:
            continue
        pod: Any = doc
        for key in path:
            pod = pod.get(key) if isinstance(pod, dict) else None
        if not isinstance(pod, dict):
            continue
        for key in CONTAINER_LISTS:
            for container in pod.get(key) or []:
                image = container.get("image") if isinstance(container, dict) else None
                if isinstance(image, str) and image:
                    images.add(image)
    return images


def in_values(values: object, default_tag: str = "") -> set[str]:
    """The images a chart's values name; a map without a tag gets `default_tag`.

    A value that is still a template (`{{ ... }}`) names no image yet and is skipped.
    """
    images: set[str] = set()
    if isinstance(values, dict):
        for key, value in values.items():
            if key == "image":
                image = _image_ref(value, default_tag)
                if image:
                    images.add(image)
                    continue
            images |= in_values(value, default_tag)
    elif isinstance(values, list):
        for item in values:
            images |= in_values(item, default_tag)
    return images


def _image_ref(value: object, default_tag: str) -> str:
    if isinstance(value, str):
        return "" if "{{" in value else value
    if not isinstance(value, dict) or not isinstance(value.get("repository"), str):
        return ""
    ref = value["repository"]
    registry = value.get("registry")
    if isinstance(registry, str) and registry:
        ref = f"{registry.rstrip('/')}/{ref}"
    digest, tag = value.get("digest"), value.get("tag")
    if isinstance(digest, str) and digest:
        ref = f"{ref}@{digest}"
    elif tag not in (None, ""):
        ref = f"{ref}:{tag}"
    elif default_tag:
        ref = f"{ref}:{default_tag}"
    return "" if "{{" in ref else ref


def listing(images: Iterable[str]) -> str:
    """images.txt: sorted, one per line."""
    return "".join(f"{image}\n" for image in sorted(set(images)))

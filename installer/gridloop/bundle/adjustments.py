"""The few edits the bundle makes to upstream manifests, as data (pure).

Each edit returns new documents and leaves its input alone. An edit whose
target is missing fails: an upstream change that moved it must be noticed,
not shipped silently without the edit.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from gridloop.bundle.manifests import Doc, ManifestProblem, name_of
from gridloop.bundle.sources import ImagePin, Source
from gridloop.versions import Component

KUEUE_CONFIG_MAP = "kueue-manager-config"
KUEUE_CONFIG_KEY = "controller_manager_config.yaml"


def adjust(source: Source, comp: Component, docs: list[Doc]) -> list[Doc]:
    """`docs` with every edit `source` asks for applied."""
    if source.pin is not None:
        docs = pin_image(docs, source.pin, comp.version)
    if source.kueue_frameworks:
        docs = enable_kueue_frameworks(docs, source.kueue_frameworks)
    return docs


def pin_image(docs: list[Doc], pin: ImagePin, version: str) -> list[Doc]:
    image = pin.for_version(version)
    out: list[Doc] = []
    found = False
    for doc in docs:
        if doc.get("kind") == pin.kind and name_of(doc) == pin.name:
            doc = copy.deepcopy(doc)
            pod = (((doc.get("spec") or {}).get("template") or {}).get("spec")) or {}
            for container in pod.get("containers") or []:
                if container.get("name") == pin.container:
                    container["image"] = image
                    found = True
        out.append(doc)
    if not found:
        raise ManifestProblem(f"no container {pin.container!r} in {pin.kind} {pin.name!r}")
    return out


def enable_kueue_frameworks(docs: list[Doc], frameworks: tuple[str, ...]) -> list[Doc]:
    """Kueue's controller config with `frameworks` among its integrations (order kept)."""
    out: list[Doc] = []
    found = False
    for doc in docs:
        if doc.get("kind") == "ConfigMap" and name_of(doc) == KUEUE_CONFIG_MAP:
            doc = _with_frameworks(doc, frameworks)
            found = True
        out.append(doc)
    if not found:
        raise ManifestProblem(f"no ConfigMap {KUEUE_CONFIG_MAP!r} (Kueue's controller config)")
    return out


def _with_frameworks(config_map: Doc, frameworks: tuple[str, ...]) -> Doc:
    data = dict(config_map.get("data") or {})
    if KUEUE_CONFIG_KEY not in data:
        raise ManifestProblem(f"ConfigMap {KUEUE_CONFIG_MAP!r} has no {KUEUE_CONFIG_KEY}")
    try:
        config: Any = yaml.safe_load(data[KUEUE_CONFIG_KEY]) or {}
    except yaml.YAMLError as err:
        raise ManifestProblem(f"{KUEUE_CONFIG_KEY} is not valid YAML: {err}") from err
    if not isinstance(config, dict):
        raise ManifestProblem(f"{KUEUE_CONFIG_KEY} is not a mapping")
    integrations = dict(config.get("integrations") or {})
    enabled = list(integrations.get("frameworks") or [])
    enabled += [f for f in frameworks if f not in enabled]
    integrations["frameworks"] = enabled
    config["integrations"] = integrations
    data[KUEUE_CONFIG_KEY] = yaml.safe_dump(config, sort_keys=False)
    return {**config_map, "data": data}

"""Kubernetes manifests as data: parse, mark what must be kept, split, dump (pure).

Upstream manifests are read into plain dicts, edited as data and dumped back:
never edited as text. libyaml is used when PyYAML has it: Kueue's CRDs alone
are megabytes, and the pure-Python parser takes seconds on them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import yaml

Doc = dict[str, Any]

KEEP = {"helm.sh/resource-policy": "keep"}
# Deleting a CRD deletes every object of its kind; deleting a Namespace deletes
# everything in it. `helm uninstall` must leave both, with the users' data.
KEPT_KINDS = frozenset({"CustomResourceDefinition", "Namespace"})
CRD = "CustomResourceDefinition"
# The chart folders the bundle writes: Helm's CRD folder, and the upstream templates' input.
CRDS = "crds"
UPSTREAM = "upstream"
BASES = "bases"

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BaseDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class ManifestProblem(ValueError):
    """Why a set of manifests cannot be used; one line, without the component."""


class _Dumper(_BaseDumper):  # type: ignore[misc,valid-type]
    """Multi-line strings (embedded config files, scripts) as readable `|` blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def parse(text: str, what: str) -> list[Doc]:
    """The Kubernetes objects in a multi-document YAML text (`kind: List` flattened)."""
    try:
        raw = [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ManifestProblem(
            f"{what}:{where} invalid YAML: {getattr(err, 'problem', err)}"
        ) from err
    docs: list[Doc] = []
    for index, doc in enumerate(raw, start=1):
        if isinstance(doc, dict) and doc.get("kind") == "List":
            docs.extend(_objects(doc.get("items") or [], f"{what}: document {index}"))
        else:
            docs.extend(_objects([doc], f"{what}: document {index}"))
    return docs


def _objects(items: Iterable[object], what: str) -> list[Doc]:
    out: list[Doc] = []
    for item in items:
        if not (
            isinstance(item, dict)
            and isinstance(item.get("kind"), str)
            and isinstance(item.get("apiVersion"), str)
        ):
            raise ManifestProblem(f"{what} is not a Kubernetes object (no kind or apiVersion)")
        out.append(item)
    return out


def dump(docs: Iterable[Doc]) -> str:
    """Multi-document YAML, each document starting with `---`."""
    return str(
        yaml.dump_all(
            list(docs),
            Dumper=_Dumper,
            explicit_start=True,
            sort_keys=False,
            allow_unicode=True,
            width=1 << 16,
        )
    )


def dump_compact(docs: Iterable[Doc]) -> str:
    """Multi-document YAML with each document one line of JSON (valid YAML), after a
    `# <kind> <name>` line.

    For CRDs: Helm keeps every chart file in its release Secret (limit 1 MiB) as
    base64 before compressing, which defeats much of gzip; the indentation of a
    deeply nested CRD schema is a third to a half of its YAML. ASCII only, so YAML
    and JSON readers agree on every string.
    """
    return "".join(
        f"---\n# {doc.get('kind')} {name_of(doc)}\n{json.dumps(doc, separators=(',', ':'))}\n"
        for doc in docs
    )


def dump_file(path: str, docs: Iterable[Doc]) -> str:
    """The text of one file from `layout`: CRDs compact, everything else readable YAML."""
    return dump_compact(docs) if path.startswith(f"{CRDS}/") else dump(docs)


def name_of(doc: Doc) -> str:
    metadata = doc.get("metadata") or {}
    return str(metadata.get("name", ""))


def kept(doc: Doc) -> Doc:
    """`doc`, annotated so Helm never deletes it, if it is a CRD or a Namespace."""
    if doc.get("kind") not in KEPT_KINDS:
        return doc
    metadata = dict(doc.get("metadata") or {})
    metadata["annotations"] = {**(metadata.get("annotations") or {}), **KEEP}
    return {**doc, "metadata": metadata}


def identity(doc: Doc) -> tuple[str, str, str, str]:
    """(API group, kind, namespace, name): what makes two documents the same object."""
    api_version = str(doc.get("apiVersion", ""))
    group = api_version.split("/")[0] if "/" in api_version else ""
    metadata = doc.get("metadata") or {}
    return group, str(doc.get("kind")), str(metadata.get("namespace", "")), name_of(doc)


def as_applied(docs: Iterable[Doc]) -> list[Doc]:
    """`docs` as `kubectl apply` would leave them, one after the other: an object that
    comes again replaces its earlier copy, in the earlier copy's place.

    agent-sandbox's extensions.yaml restates the controller Deployment of its
    manifest.yaml; a Helm release must hold each object once.
    """
    out: dict[tuple[str, str, str, str], Doc] = {}
    for doc in docs:
        out[identity(doc)] = doc  # a dict keeps the first insertion's place
    return list(out.values())


def split(docs: Iterable[Doc]) -> tuple[list[Doc], list[Doc]]:
    """(CRDs, everything else), each in upstream order."""
    crds: list[Doc] = []
    rest: list[Doc] = []
    for doc in docs:
        (crds if doc.get("kind") == CRD else rest).append(doc)
    return crds, rest


def layout(
    component: str, docs: Iterable[Doc], bases: Iterable[tuple[str, str]] = ()
) -> dict[str, list[Doc]]:
    """The files the bundle writes for `component`, by path inside the chart.

    CRDs go to `crds/<component>.yaml`: Helm installs that folder on first install,
    never templates it and never deletes it, and (unlike a template) keeps it out of
    the release's rendered manifest, which Helm stores in a Secret limited to 1 MiB.
    Objects named in `bases` (kind, name) are ones the chart renders itself from values;
    upstream's copy goes to `upstream/<component>/bases/` (see base_file), which no
    template emits as it is. Everything else goes to
    `upstream/<component>/<component>.yaml`, emitted by templates/upstream.yaml when the
    component is enabled. Every CRD and Namespace comes out annotated
    `helm.sh/resource-policy: keep`; an empty file is left out. A base that is not there
    is an error.
    """
    wanted = set(bases)
    crds, rest = split(kept(doc) for doc in docs)
    files = {crd_file(component): crds, f"{UPSTREAM}/{component}/{component}.yaml": []}
    for doc in rest:
        key = (str(doc.get("kind")), name_of(doc))
        if key in wanted:
            files[base_file(component, *key)] = [doc]
            wanted.discard(key)
        else:
            files[f"{UPSTREAM}/{component}/{component}.yaml"].append(doc)
    if wanted:
        missing = ", ".join(f"{kind} {name!r}" for kind, name in sorted(wanted))
        raise ManifestProblem(f"no {missing} (the chart renders it from values)")
    return {name: content for name, content in files.items() if content}


def base_file(component: str, kind: str, name: str) -> str:
    """Where upstream's copy of an object the chart renders from values lives."""
    return f"{UPSTREAM}/{component}/{BASES}/{kind.lower()}-{name}.yaml"


def crd_file(component: str) -> str:
    """Where a component's CRDs live inside the bundled chart."""
    return f"{CRDS}/{component}.yaml"

"""The rendered chart as objects, sorted by what the install does with them (pure).

An install goes in phases, each waiting for what the next one needs:

1. `crds`: the chart's CustomResourceDefinitions, applied server-side, then Established;
2. `components`: every other object except custom resources and webhook
   configurations (namespaces, RBAC, config, Services, the controllers themselves),
   applied with Helm's ownership marks so the release adopts them; then the Services
   that webhooks call must have a ready endpoint;
3. `release`: `helm upgrade --install`, which records the release and adds the webhook
   configurations and the custom resources (ClusterQueues, ...), which those webhooks
   validate. Applied before their webhook serves, they would be refused.

Objects are plain dicts as YAML gives them; nothing here talks to a cluster.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import yaml

from gridloop import names
from gridloop.health.queues import CONFIGURED

GPU = names.GPU_RESOURCE

Doc = dict[str, Any]

CRD = "CustomResourceDefinition"
WEBHOOK_KINDS = frozenset({"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"})
WORKLOAD_KINDS = ("Deployment", "DaemonSet", "StatefulSet")
# Helm adopts an existing object only when it carries these (Helm 3.2+, Helm 4)
MANAGED_BY = "app.kubernetes.io/managed-by"
RELEASE_NAME = "meta.helm.sh/release-name"
RELEASE_NAMESPACE = "meta.helm.sh/release-namespace"
RESOURCE_POLICY = "helm.sh/resource-policy"  # "keep": helm uninstall leaves the object

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Ref:
    """Where an object lives: kind, namespace ("" for cluster-wide), name."""

    api_version: str
    kind: str
    namespace: str
    name: str

    def label(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


_SEPARATOR = re.compile(r"^---[ \t]*$", re.MULTILINE)


def parse(text: str) -> list[Doc]:
    """Every object in a multi-document text. A document that is one line of JSON (the
    bundle writes CRDs so: bundle/manifests.py dump_compact) is read as JSON, which is
    many times faster than YAML for Kueue's CRDs."""
    docs: list[Any] = []
    for chunk in _SEPARATOR.split(text):
        body = "\n".join(line for line in chunk.splitlines() if not line.startswith("#")).strip()
        if body.startswith("{") and "\n" not in body:
            docs.append(json.loads(body))
        elif body:
            docs.extend(yaml.load_all(chunk, Loader=_Loader))
    return [d for d in docs if isinstance(d, dict) and d.get("kind")]


def dump(docs: Iterable[Doc]) -> str:
    """Documents as kubectl reads them: one JSON line each (valid YAML, and fast)."""
    return "".join(f"---\n{json.dumps(doc, separators=(',', ':'))}\n" for doc in docs)


_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_SUFFIX: dict[str, Decimal] = {"": Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6")}
_SUFFIX |= {"m": Decimal("1e-3"), **{s: Decimal(1000) ** (i + 1) for i, s in enumerate("kMGTPE")}}
_SUFFIX |= {s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))}


def quantity(text: str) -> Decimal | None:
    """A Kubernetes quantity's value (`16384Gi` and `16Ti` are the same), else None."""
    found = _QUANTITY.match(text)
    if not found:
        return None
    return Decimal(found.group(1)) * _SUFFIX[found.group(2) or ""]


def _same(live: Any, wanted: Any) -> bool:
    if live == wanted:
        return True
    if isinstance(live, str) and isinstance(wanted, str):
        a, b = quantity(live), quantity(wanted)
        return a is not None and a == b
    return False


def contains(live: Any, wanted: Any) -> bool:
    """Every field `wanted` sets has that value in `live` (which may hold more: defaults
    the API server filled in, fields others own). Lists must match item by item, and a
    quantity equals its canonical form: Kueue's webhook rewrites `16384Gi` as `16Ti`."""
    if isinstance(wanted, dict):
        return isinstance(live, dict) and all(
            k in live and contains(live[k], v) for k, v in wanted.items()
        )
    if isinstance(wanted, list):
        return (
            isinstance(live, list)
            and len(live) == len(wanted)
            and all(contains(a, b) for a, b in zip(live, wanted, strict=True))
        )
    return _same(live, wanted)


def without_managed_by(doc: Doc) -> Doc:
    """`doc` without its app.kubernetes.io/managed-by label: adopting an object into the
    release sets it to Helm (`adoptable`), whatever upstream wrote (Kueue's say kustomize),
    so it is no difference to act on."""
    labels = (doc.get("metadata") or {}).get("labels")
    if not labels or MANAGED_BY not in labels:
        return doc
    kept = {k: v for k, v in labels.items() if k != MANAGED_BY}
    return {**doc, "metadata": {**doc["metadata"], "labels": kept}}


def as_configured(live: Doc) -> Doc:
    """A ClusterQueue as the chart configured it: GPU quotas the health service lowered
    (its record `quota.gridloop.io/configured`, {flavor: {"configured": N, "set": M}},
    docs/queues.md) read as their configured value while the live quota is still the
    one it set. Anything else is returned as it is. A re-run of the install then sees
    a queue whose GPUs are out for health reasons as up to date, instead of raising the
    quota for the health service to lower it again a second later."""
    notes = (live.get("metadata") or {}).get("annotations") or {}
    try:
        record = json.loads(notes.get(CONFIGURED, ""))
    except ValueError:
        return live
    if live.get("kind") != "ClusterQueue" or not isinstance(record, dict):
        return live
    view = copy.deepcopy(live)
    for group in (view.get("spec") or {}).get("resourceGroups") or ():
        for flavor in group.get("flavors") or ():
            mine = record.get(flavor.get("name"))
            if not isinstance(mine, dict):
                continue
            for res in flavor.get("resources") or ():
                quota = res.get("nominalQuota")
                if res.get("name") == GPU and str(quota) == str(mine.get("set")):
                    configured = mine.get("configured")
                    res["nominalQuota"] = str(configured) if isinstance(quota, str) else configured
    return view


def crd_kinds(crds: Iterable[Doc]) -> dict[str, tuple[str, str, bool]]:
    """kind -> (group, plural, namespaced) for the chart's CRDs."""
    out: dict[str, tuple[str, str, bool]] = {}
    for crd in crds:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        if names.get("kind"):
            out[names["kind"]] = (
                str(spec.get("group", "")),
                str(names.get("plural", "")),
                spec.get("scope") == "Namespaced",
            )
    return out


def custom_kinds(docs: Iterable[Doc]) -> set[str]:
    """Kinds of an API group outside Kubernetes' own ("" and *.k8s.io, with no dot for
    apps, batch, policy, ...): a CRD defines them (Kueue's kueue.x-k8s.io is one)."""
    out = set()
    for doc in docs:
        group = str(doc.get("apiVersion", "")).rpartition("/")[0]
        if "." in group and not group.endswith(".k8s.io"):
            out.add(str(doc.get("kind")))
    return out


def custom_resources(docs: Iterable[Doc], crd_kinds: Iterable[str]) -> list[Doc]:
    """Objects of a kind some CRD defines (the chart's or one already on the cluster)."""
    kinds = set(crd_kinds)
    return [d for d in docs if d.get("kind") in kinds]


def components(docs: Iterable[Doc], crd_kinds: Iterable[str]) -> list[Doc]:
    """What phase 2 applies: not CRDs, custom resources or webhook configurations."""
    kinds = set(crd_kinds)
    return [d for d in docs if d.get("kind") not in kinds | WEBHOOK_KINDS | {CRD}]


def adoptable(doc: Doc, release: str, namespace: str) -> Doc:
    """`doc` with the marks that let `helm upgrade --install` take it into the release."""
    out = copy.deepcopy(doc)
    metadata = out.setdefault("metadata", {})
    metadata["labels"] = {**(metadata.get("labels") or {}), MANAGED_BY: "Helm"}
    marks = {RELEASE_NAME: release, RELEASE_NAMESPACE: namespace}
    metadata["annotations"] = {**(metadata.get("annotations") or {}), **marks}
    return out


def by_namespace(docs: Iterable[Doc], default: str) -> dict[str, list[Doc]]:
    """Docs grouped by their namespace, the release's when they name none (kubectl applies
    a cluster-wide object whatever -n says)."""
    out: dict[str, list[Doc]] = {}
    for doc in docs:
        namespace = (doc.get("metadata") or {}).get("namespace") or default
        out.setdefault(namespace, []).append(doc)
    return out


def webhook_services(docs: Sequence[Doc], default_namespace: str) -> list[tuple[str, str]]:
    """(namespace, name) of every Service this rendering runs that one of its webhooks or
    CRD conversions calls (a Service run by someone else is theirs to keep serving)."""
    rendered = {
        ((d.get("metadata") or {}).get("namespace") or default_namespace, d["metadata"]["name"])
        for d in docs
        if d.get("kind") == "Service"
    }
    found: set[tuple[str, str]] = set()
    for doc in docs:
        configs: list[Any] = []
        if doc.get("kind") in WEBHOOK_KINDS:
            configs = [hook.get("clientConfig") for hook in doc.get("webhooks") or []]
        elif doc.get("kind") == CRD:
            conversion = (doc.get("spec") or {}).get("conversion") or {}
            configs = [(conversion.get("webhook") or {}).get("clientConfig")]
        for config in configs:
            service = (config or {}).get("service") or {}
            where = (str(service.get("namespace")), str(service.get("name")))
            if where in rendered:
                found.add(where)
    return sorted(found)


def webhook_configurations(docs: Sequence[Doc]) -> list[tuple[str, str]]:
    """(kind, name) of every webhook configuration this rendering applies, to wait for
    their CA bundles (an injector such as Kueue's fills them in after the apply)."""
    return sorted(
        (str(d["kind"]), str(d["metadata"]["name"])) for d in docs if d.get("kind") in WEBHOOK_KINDS
    )


def workloads(docs: Iterable[Doc], default_namespace: str) -> list[Ref]:
    """The Deployments, DaemonSets and StatefulSets the release runs, to wait for."""
    return [
        ref(d, default_namespace, namespaced=True) for d in docs if d.get("kind") in WORKLOAD_KINDS
    ]


def ref(doc: Doc, default_namespace: str, namespaced: bool) -> Ref:
    metadata = doc.get("metadata") or {}
    namespace = (metadata.get("namespace") or default_namespace) if namespaced else ""
    return Ref(str(doc.get("apiVersion")), str(doc.get("kind")), namespace, str(metadata["name"]))


def flavors(docs: Iterable[Doc]) -> dict[str, dict[str, str]]:
    """ResourceFlavor name -> the node labels it selects."""
    return {
        str(d["metadata"]["name"]): {
            str(k): str(v) for k, v in ((d.get("spec") or {}).get("nodeLabels") or {}).items()
        }
        for d in docs
        if d.get("kind") == "ResourceFlavor"
    }


def runtime_classes(docs: Iterable[Doc]) -> dict[str, str]:
    return {
        str(d["metadata"]["name"]): str(d.get("handler", ""))
        for d in docs
        if d.get("kind") == "RuntimeClass"
    }


def same_objects(a: Sequence[Doc], b: Sequence[Doc]) -> bool:
    """Two renderings hold the same objects (order kept, formatting ignored)."""
    return list(a) == list(b)


def identities(docs: Iterable[Doc], default_namespace: str) -> set[tuple[str, str, str]]:
    """(kind, namespace-or-default, name): to tell which objects a new rendering drops."""
    out = set()
    for doc in docs:
        metadata: Mapping[str, Any] = doc.get("metadata") or {}
        ns = str(metadata.get("namespace") or default_namespace)
        out.add((str(doc.get("kind")), ns, str(metadata.get("name"))))
    return out

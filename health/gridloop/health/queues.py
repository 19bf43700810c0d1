"""Kueue's ResourceFlavors and ClusterQueues, read into what quotas.py plans with.

A flavor says which nodes its quota stands for (`spec.nodeLabels`); a
ClusterQueue's `spec.resourceGroups[].flavors[].resources[]` holds its
`nvidia.com/gpu` nominalQuota per flavor. Two annotations on a ClusterQueue
carry what the plan needs besides:

- `quota.gridloop.io/manual`: an operator's quota, `<flavor>=<GPUs>[,...]`, which
  always wins (see docs/queues.md);
- `quota.gridloop.io/configured`: gridloop's own record, JSON
  `{flavor: {"configured": GPUs, "set": GPUs}}`: the quota each flavor had before
  gridloop changed it, so it can give it back, and the quota gridloop set. A
  flavor not in it, or whose nominalQuota is no longer what gridloop set (a
  `helm upgrade` or a person changed it since), has the nominalQuota as it
  stands for its configured quota.

Parsing is pure (`flavor_of`, `queue_quotas`); `read` is the one API call per
kind per cycle. Kueue serves v1beta2 (since v0.15; v0.19.2 is pinned).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.utils import parse_quantity

from gridloop.health.capacity import GPU, Flavor
from gridloop.health.quotas import QueueQuota

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
MANUAL = "quota.gridloop.io/manual"
CONFIGURED = "quota.gridloop.io/configured"


class QuotaProblem(ValueError):
    """A ClusterQueue gridloop cannot plan for; one line naming the object and field."""


@dataclass(frozen=True)
class Kueue:
    flavors: list[Flavor]
    queues: dict[str, dict[str, Any]]  # ClusterQueue name -> the object as read
    quotas: list[QueueQuota]
    problems: dict[str, str]  # ClusterQueue name -> why it is left alone this cycle


def flavor_of(obj: Mapping[str, Any]) -> Flavor:
    labels = (obj.get("spec") or {}).get("nodeLabels") or {}
    return Flavor(name=obj["metadata"]["name"], node_labels=dict(labels))


def _gpus(value: object, where: str) -> int:
    try:
        quantity = parse_quantity(value)
    except (ValueError, TypeError) as err:
        raise QuotaProblem(f"{where}: {value!r} is not a quantity") from err
    if quantity != int(quantity) or quantity < 0:
        raise QuotaProblem(f"{where}: {value!r} is not a whole number of GPUs")
    return int(quantity)


def parse_manual(text: str, where: str) -> dict[str, int]:
    """`us-east-h100=24, onprem-a100=0` -> {flavor: GPUs}; anything else is refused."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        flavor, sep, value = part.partition("=")
        flavor, value = flavor.strip(), value.strip()
        if not sep or not flavor or not value.isdigit():
            raise QuotaProblem(f"{where}: {part!r} is not <flavor>=<GPUs> (e.g. us-east-h100=24)")
        if flavor in out:
            raise QuotaProblem(f"{where}: flavor {flavor} is given twice")
        out[flavor] = int(value)
    return out


def _record(text: str | None, where: str) -> dict[str, dict[str, int]]:
    """gridloop's record: {flavor: {"configured": GPUs, "set": GPUs}}."""
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and all(
        isinstance(v, dict)
        and set(v) == {"configured", "set"}
        and all(isinstance(n, int) and not isinstance(n, bool) for n in v.values())
        for v in data.values()
    ):
        return {str(k): dict(v) for k, v in data.items()}
    raise QuotaProblem(
        f'{where}: not gridloop\'s record (JSON {{flavor: {{"configured": N, "set": N}}}}): '
        f"{text[:80]!r}"
    )


def queue_quotas(obj: Mapping[str, Any]) -> list[QueueQuota]:
    """The GPU quota of every flavor in one ClusterQueue; QuotaProblem if it cannot be read."""
    meta = obj["metadata"]
    name, notes = meta["name"], meta.get("annotations") or {}
    where = f"clusterqueue/{name}"
    manual = parse_manual(notes.get(MANUAL, ""), f"{where}: annotation {MANUAL}")
    record = _record(notes.get(CONFIGURED), f"{where}: annotation {CONFIGURED}")
    out = []
    groups = (obj.get("spec") or {}).get("resourceGroups") or []
    for g, group in enumerate(groups):
        for f, flavor in enumerate(group.get("flavors") or []):
            for r, resource in enumerate(flavor.get("resources") or []):
                if resource.get("name") != GPU:
                    continue
                path = f"spec.resourceGroups[{g}].flavors[{f}].resources[{r}].nominalQuota"
                nominal = _gpus(resource.get("nominalQuota"), f"{where}: {path}")
                mine = record.get(flavor["name"])
                # gridloop's record counts only while the quota is still what gridloop set
                configured = mine["configured"] if mine and mine["set"] == nominal else nominal
                out.append(
                    QueueQuota(
                        queue=name,
                        flavor=flavor["name"],
                        nominal=nominal,
                        configured=configured,
                        manual=manual.get(flavor["name"]),
                    )
                )
    unknown = sorted(set(manual) - {q.flavor for q in out})
    if unknown:
        raise QuotaProblem(
            f"{where}: annotation {MANUAL}: flavor {unknown[0]} has no GPU quota in this queue"
        )
    return out


def read(custom: client.CustomObjectsApi) -> Kueue | None:
    """Flavors and ClusterQueues; None when Kueue's API is not installed."""
    try:
        flavors = custom.list_cluster_custom_object(GROUP, VERSION, "resourceflavors")
        queues = custom.list_cluster_custom_object(GROUP, VERSION, "clusterqueues")
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    kueue = Kueue([flavor_of(f) for f in flavors["items"]], {}, [], {})
    for obj in queues["items"]:
        name = obj["metadata"]["name"]
        kueue.queues[name] = obj
        try:
            kueue.quotas.extend(queue_quotas(obj))
        except QuotaProblem as err:
            kueue.problems[name] = str(err)
    return kueue


def quota_patch(obj: Mapping[str, Any], changes: Mapping[str, tuple[int, int]]) -> dict[str, Any]:
    """A merge patch setting each changed flavor's GPU nominalQuota (pure).

    `changes` is {flavor: (new quota, configured quota)}. The patch carries the
    resourceVersion it was computed from (a changed queue is a 409, read again), the
    whole resourceGroups list (a merge patch replaces lists whole), and gridloop's
    record: a flavor away from its configured quota is in it with the quota set, a
    restored one is dropped.
    """
    meta = obj["metadata"]
    record = _record((meta.get("annotations") or {}).get(CONFIGURED), meta["name"])
    groups = json.loads(json.dumps((obj.get("spec") or {}).get("resourceGroups") or []))
    for group in groups:
        for flavor in group.get("flavors") or []:
            if flavor.get("name") not in changes:
                continue
            after, configured = changes[flavor["name"]]
            for resource in flavor.get("resources") or []:
                if resource.get("name") == GPU:
                    resource["nominalQuota"] = str(after)
            if after == configured:
                record.pop(flavor["name"], None)
            else:
                record[flavor["name"]] = {"configured": configured, "set": after}
    note = json.dumps(record, sort_keys=True) if record else None
    return {
        "metadata": {"resourceVersion": meta["resourceVersion"], "annotations": {CONFIGURED: note}},
        "spec": {"resourceGroups": groups},
    }

"""What `gridloop uninstall --purge` may delete, and when it must refuse (pure).

`helm uninstall` keeps the CRDs (the chart ships them in crds/ and Helm never deletes
those) and so every object of their kinds. Deleting a CRD deletes all of its objects:
ClusterQueues, RayJobs and Workloads that users and controllers made, not only the
release's own. So a purge touches only the CRDs gridloop applied (field manager
`gridloop`), and refuses while any object of theirs exists that the release does not
own (unless forced), and unless a person confirmed it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gridloop.chart.diagnosis import Existing

SHOWN = 4


def gridloops(managers: Mapping[str, Sequence[str]], field_manager: str) -> list[str]:
    """CRD names (from name -> its managedFields managers) that gridloop applied."""
    return sorted(name for name, found in managers.items() if field_manager in found)


def controlled(metadata: Mapping[str, Any]) -> bool:
    """Whether an object's controller is another object (an ownerReference with
    `controller: true`, as agent-sandbox's warm pool on its Sandboxes): it lives and dies
    with that owner, which is counted itself, so it is not one more object left behind."""
    owners = metadata.get("ownerReferences") or []
    return any(owner.get("controller") is True for owner in owners)


def others(objects: Sequence[Existing], release: str, namespace: str) -> list[Existing]:
    """The objects `helm uninstall` of this release leaves behind."""
    return [o for o in objects if (o.release, o.release_namespace) != (release, namespace)]


def refusal(crds: Sequence[str], left: Sequence[Existing], force: bool, confirmed: bool) -> str:
    """Why the purge must not go ahead ("" when it may)."""
    if left and not force:
        shown = ", ".join(o.label() for o in left[:SHOWN])
        more = f" (+{len(left) - SHOWN} more)" if len(left) > SHOWN else ""
        return (
            f"--purge: {len(left)} custom resources not from this release still exist: "
            f"{shown}{more}; delete them first, or add --force to delete them with their CRDs"
        )
    if crds and not confirmed:
        return f"--purge deletes {len(crds)} CRDs: confirm it (type yes, or pass --yes)"
    return ""

"""Whether the cluster holds the chart's CRDs exactly as `gridloop install` applied them
(pure).

Every install and upgrade applied the chart's CRDs server-side and waited for them to be
Established: seconds of kubectl each time (the local profile's 19, mostly Kueue's
schemas), on every `gridloop upgrade` a model rollout or the learning loop makes too.
Each CRD gridloop applies now carries the digest of the chart's copy it applied
(`gridloop.io/applied-digest`), and when every one on the cluster carries its chart
copy's digest and is Established, the apply is skipped. The digest is of the chart's
text, so a CRD the chart changes in any way (a field added or dropped, a new version) is
applied again; Helm, for comparison, applies `crds/` at the first install only. A hand
edit that leaves the annotation as it was is left alone until the chart's CRD changes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

Doc = dict[str, Any]

DIGEST = "gridloop.io/applied-digest"


def digest(crd: Doc) -> str:
    """The chart copy's digest: its content, keys in order, whatever YAML it came from."""
    text = json.dumps(crd, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def marked(crd: Doc) -> Doc:
    """The CRD as gridloop applies it: the chart's copy, annotated with its digest."""
    meta = dict(crd.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), DIGEST: digest(crd)}
    return {**crd, "metadata": meta}


def established(live: Doc) -> bool:
    conditions = (live.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def as_applied(crds: Sequence[Doc], live: Mapping[str, Doc | None]) -> bool:
    """Every chart CRD is on the cluster (`live`, by name; None when absent) with the
    digest gridloop applied it with, equal to its chart copy's now, and Established."""
    for crd in crds:
        found = live.get(crd["metadata"]["name"])
        if found is None or not established(found):
            return False
        if ((found.get("metadata") or {}).get("annotations") or {}).get(DIGEST) != digest(crd):
            return False
    return True

"""What an install of these values would do, as doctor's checks need it (pure).

From the rendering (its kinds, ResourceFlavors, RuntimeClasses), the merged values
(which upstream controllers the chart installs), the versions the bundle pins and the
chart's `kubeVersion`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from gridloop.chart import diagnosis, objects
from gridloop.chart.objects import Doc
from gridloop.chart.values import Layer, SetSyntax, coalesce, user_values

# values keys of the upstream controllers, and of the DCGM exporter
ENABLED_KEYS = ("kueue", "kuberay", "kaito", "agentSandbox", "dcgmExporter")
# an upstream component's folder in the bundle (upstream/<component>/) -> its values key
VALUES_KEY = {"agent-sandbox": "agentSandbox"}
DEFAULT_MIN_KUBERNETES = "v1.30.0"


def merged_values(
    defaults: Mapping[str, Any], layers: Sequence[Layer], sets: Sequence[str]
) -> dict[str, Any]:
    """The values helm renders with (a --set this parser cannot read counts as absent:
    the rendering already refused or accepted it)."""
    try:
        user, _ = user_values(layers, sets)
    except SetSyntax:
        user = {}
    return coalesce(dict(defaults), user)


def enabled(values: Mapping[str, Any]) -> dict[str, bool]:
    out = {}
    for key in ENABLED_KEYS:
        section = values.get(key)
        out[key] = bool(section.get("enabled")) if isinstance(section, dict) else False
    return out


def min_kubernetes(chart_meta: Mapping[str, Any]) -> str:
    """The lowest version in Chart.yaml's `kubeVersion: ">=1.30.0-0"`."""
    found = re.search(r">=\s*v?(\d+\.\d+(?:\.\d+)?)", str(chart_meta.get("kubeVersion", "")))
    return f"v{found.group(1)}" if found else DEFAULT_MIN_KUBERNETES


def plan(
    release: str,
    namespace: str,
    values: Mapping[str, Any],
    docs: Sequence[Doc],
    pinned: Mapping[str, str],
    chart_meta: Mapping[str, Any],
    tested_kubernetes: str,
    left_out: Mapping[str, str] | None = None,
) -> diagnosis.Planned:
    """`left_out`: the bundle's components it says it left out (folder name -> why)."""
    return diagnosis.Planned(
        release=release,
        namespace=namespace,
        enabled=enabled(values),
        pinned=pinned,
        kinds=frozenset(str(d.get("kind")) for d in docs),
        flavors=objects.flavors(docs),
        runtime_classes=objects.runtime_classes(docs),
        left_out={VALUES_KEY.get(k, k): why for k, why in (left_out or {}).items()},
        min_kubernetes=min_kubernetes(chart_meta),
        tested_kubernetes=tested_kubernetes,
        secrets=named_secrets(values),
        sandbox_egress=sandbox_egress(values),
        denied_cidrs=tuple(str(c) for c in _network(values).get("deniedCIDRs") or ()),
    )


def _network(values: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((values.get("agentSandbox") or {}).get("network")) or {}


def sandbox_egress(values: Mapping[str, Any]) -> str:
    """agentSandbox.network.egress, or "" when the chart makes no sandbox namespace."""
    sb = values.get("agentSandbox") or {}
    if not (sb.get("enabled") and (sb.get("sandboxes") or {}).get("enabled")):
        return ""
    if not sb.get("namespaces"):
        return ""
    return str(_network(values).get("egress") or "none")


def named_secrets(values: Mapping[str, Any]) -> dict[str, str]:
    """The Secrets the values name, which must exist in the release namespace before the
    pods need them: name -> the first values key naming it."""
    out: dict[str, str] = {}
    inference = values.get("inference") or {}
    if not inference.get("enabled", True):
        return out
    for i, model in enumerate(inference.get("models") or []):
        name = model.get("credentialsSecret") if isinstance(model, Mapping) else None
        if name:
            out.setdefault(str(name), f"inference.models[{i}].credentialsSecret")
    return out

"""Where the chart tests find the chart and the values they render it with."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "gridloop"
# every part of gridloop's own on (tests/unit/chart_values/everything.yaml)
EVERYTHING = Path(__file__).parent / "chart_values" / "everything.yaml"
# the upstream components off: their manifests come from `gridloop bundle`, not git (the
# DCGM exporter is the chart's own template and stays as each profile has it)
UPSTREAM_OFF = (
    "kueue.enabled=false,kuberay.enabled=false,kaito.enabled=false,agentSandbox.enabled=false"
)
PROFILE_NAMES = sorted(p.stem for p in (CHART / "profiles").glob("*.yaml"))

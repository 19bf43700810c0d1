"""The chart's alert rules as a plain Prometheus rules file, for promtool and for the
local cluster's Prometheus (which loads ``rules/*.yml`` beside its config).

The PrometheusRule objects are rendered by the real ``helm template`` from
``charts/gridloop`` (the rules are Helm templates: the XID list comes from the health
policy, the ``for`` durations from values), then their ``spec.groups`` are concatenated.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from gridloop import resources
from gridloop.errors import UsageError

CHART = resources.chart()
# no upstream manifests: their files come from `gridloop bundle`, not git
UPSTREAM_OFF = (
    "kueue.enabled=false",
    "kuberay.enabled=false",
    "kaito.enabled=false",
    "agentSandbox.enabled=false",
    "dcgmExporter.enabled=false",
)


def groups(docs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """A rules file (``{"groups": [...]}``) of every PrometheusRule in ``docs``."""
    out: list[Any] = []
    for doc in docs:
        if doc and doc.get("kind") == "PrometheusRule":
            out.extend(doc["spec"]["groups"])
    return {"groups": out}


def render(helm: Path, sets: Sequence[str] = ()) -> dict[str, Any]:
    """The chart's rules file, rendered with ``--set`` ``sets`` on top of the defaults."""
    argv = [str(helm), "template", "gridloop", str(CHART), "--namespace", "gridloop-system"]
    for item in (*UPSTREAM_OFF, *sets):
        argv += ["--set", item]
    env = {**os.environ, "KUBECONFIG": os.devnull}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    if done.returncode != 0:
        raise UsageError(f"helm template {CHART}: {done.stderr.strip()}")
    return groups(yaml.safe_load_all(done.stdout))


def alert_names(rules: dict[str, Any]) -> list[str]:
    return [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]

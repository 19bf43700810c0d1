"""Which dashboards gridloop ships, and each one as the exact JSON file the chart carries.

``render`` is the one way a dashboard becomes text: keys sorted, two-space indent, a
trailing newline, and a ``__generated`` key (sorted first) saying where it comes from. The
same code always gives the same bytes, so the committed files can be checked against it.

Pure: no I/O here (``generating.py`` writes and compares the files).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from gridloop.dashboards import fleet_health, health_service, inference, queues, sandboxes
from gridloop.dashboards.panels import Board

# file stem in charts/gridloop/dashboards/ -> the module that builds it
DASHBOARDS: Mapping[str, Callable[[], Board]] = MappingProxyType(
    {
        "gpu-fleet-health": fleet_health.build,
        "queues": queues.build,
        "inference": inference.build,
        "health-service": health_service.build,
        "sandboxes": sandboxes.build,
    }
)
SOURCES = {
    "gpu-fleet-health": "fleet_health.py",
    "queues": "queues.py",
    "inference": "inference.py",
    "health-service": "health_service.py",
    "sandboxes": "sandboxes.py",
}


def header(name: str) -> str:
    return (
        f"generated from dashboards/gridloop/dashboards/{SOURCES[name]} by "
        "`gridloop dashboards generate`: do not edit"
    )


def dashboard(name: str) -> dict[str, Any]:
    """Dashboard ``name`` as Grafana's JSON model, with its generated header."""
    data = DASHBOARDS[name]().json()
    data["__generated"] = header(name)
    return data


def render(name: str) -> str:
    return json.dumps(dashboard(name), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def file_name(name: str) -> str:
    return f"{name}.json"

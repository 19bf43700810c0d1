"""Write the dashboards into the chart, or say which committed files differ from the code.

The shell around ``catalog.render``: it reads and writes ``charts/gridloop/dashboards/``
and nothing else. A JSON file there that no dashboard module makes is stale too (a
renamed dashboard must not leave its old file behind).
"""

from __future__ import annotations

from pathlib import Path

from gridloop import resources
from gridloop.dashboards.catalog import DASHBOARDS, file_name, render


def default_dir() -> Path:
    """The chart's dashboards/ (the checkout's, where `gridloop dashboards generate` writes)."""
    return resources.chart() / "dashboards"


def differences(folder: Path) -> list[str]:
    """File names in ``folder`` that are missing, different from the code, or not made by
    any dashboard module; empty when the folder is exactly what the code generates."""
    wanted = {file_name(n): render(n) for n in DASHBOARDS}
    present = {p.name for p in folder.glob("*.json")} if folder.is_dir() else set()
    out = [
        name
        for name, text in wanted.items()
        if name not in present or (folder / name).read_text(encoding="utf-8") != text
    ]
    return sorted(out + sorted(present - set(wanted)))


def write(folder: Path) -> list[str]:
    """Make ``folder`` exactly what the code generates; returns the files changed."""
    changed = differences(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name in DASHBOARDS:
        (folder / file_name(name)).write_text(render(name), encoding="utf-8")
    for stale in set(changed) - {file_name(n) for n in DASHBOARDS}:
        (folder / stale).unlink()
    return changed

"""Where gridloop's own files are: the chart, its profiles and dashboards, the health
policy, the example fleets.

In an installed wheel they are package data under `gridloop/_data/`, in the layout of
the repository (pyproject.toml's force-include); in a source checkout (an editable
install, the tests) they are the repository's own folders. Every command finds them
here, never by walking up from its own file, so `pip install gridloop` works anywhere.
`versions.yaml` is found by versions.py the same way.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent
PACKAGED = _HERE / "_data"  # in a wheel: site-packages/gridloop/_data
CHECKOUT = _HERE.parents[1]  # in a checkout: installer/gridloop/ -> the repository


def find(relative: str) -> Path:
    """The packaged copy of `relative` (a path in the repository's layout, e.g.
    "charts/gridloop"), else the checkout's. Either may be missing: the caller says
    what it needed."""
    packaged = PACKAGED / relative
    return packaged if packaged.exists() else CHECKOUT / relative


def chart() -> Path:
    return find("charts/gridloop")


def health_policy() -> Path:
    return find("policies/health.yaml")


def default_fleet() -> Path:
    return find("examples/fleets/default.yaml")

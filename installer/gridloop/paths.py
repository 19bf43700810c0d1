"""Where gridloop keeps things outside the repository (the ground floor: the local
cluster, the bundle cache and the chart's lookup all read it from here):

- the build cache, keyed by component and version: `$GRIDLOOP_CACHE` or
  `~/.cache/gridloop/<component>-<version>/`;
- the tools folder, `<cache>/bin/`: links to the helm and kubectl `gridloop local build`
  made at the pinned versions, which commands fall back to when PATH has none;
- the state of one running cluster (pids, ports, certificates, etcd data,
  logs): `$GRIDLOOP_STATE` or `~/.local/state/gridloop/local/`.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    env = os.environ.get("GRIDLOOP_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gridloop"


# the built tools linked into tools_dir(), for commands on a machine with none of its own
TOOLS = ("helm", "kubectl")


def tools_dir() -> Path:
    return cache_root() / "bin"


def state_root() -> Path:
    env = os.environ.get("GRIDLOOP_STATE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gridloop" / "local"


# `gridloop bundle`'s default --out, and the chart it writes there, relative to where it
# runs: where install, render and doctor look for a chart before the package's own
BUNDLE_OUT = Path("dist")
DEFAULT_BUNDLE = BUNDLE_OUT / "gridloop"

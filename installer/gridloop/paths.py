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

STATE_FILE = "state.json"  # in a local cluster's state folder, beside its kubeconfig


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


def local_state_dir(kubeconfig: str | os.PathLike[str] | None) -> Path | None:
    """The state folder of the `gridloop local` cluster a kubeconfig belongs to (the
    first file of a $KUBECONFIG list; its state.json beside it), or None for any other
    cluster. The one test of "is this a local cluster's kubeconfig"."""
    if not kubeconfig:
        return None
    folder = Path(str(kubeconfig).split(os.pathsep)[0]).parent
    return folder if (folder / STATE_FILE).is_file() else None


# `gridloop bundle`'s default --out, and the chart it writes there, relative to where it
# runs: where install, render and doctor look for a chart before the package's own
BUNDLE_OUT = Path("dist")
DEFAULT_BUNDLE = BUNDLE_OUT / "gridloop"

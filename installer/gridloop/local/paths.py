"""Where the local cluster keeps things: all of it outside the repository.

- the build cache, keyed by component and version: `$GRIDLOOP_CACHE` or
  `~/.cache/gridloop/<component>-<version>/`;
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


def state_root() -> Path:
    env = os.environ.get("GRIDLOOP_STATE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gridloop" / "local"

"""The tiny model the serving tests stream: `gridloop models make` (a small Llama, random
weights from a seed) pushed with `gridloop models push` to s3://models/<name>/<revision>/
of the local object store, with the host's keys (`gridloop local env`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from platform_install import GRIDLOOP

from gridloop.local.addons import object_store


def store_env(local_cluster) -> dict[str, str]:
    """The environment `gridloop local env` exports: the store's endpoint and host keys."""
    state = local_cluster.state
    return {**os.environ, **object_store.shell_env(state.dir, state.ports.object_store)}


def run_gridloop(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GRIDLOOP, *args], capture_output=True, text=True, env=env, timeout=600)


def push(local_cluster, folder: Path, name: str, revision: str, seed: str) -> Path:
    """The model made in `folder` and pushed to s3://models/<name>/<revision>/."""
    made = run_gridloop("models", "make", str(folder), "--size", "tiny", "--seed", seed)
    assert made.returncode == 0, made.stderr
    up = run_gridloop(
        "models",
        "push",
        str(folder),
        f"s3://models/{name}/{revision}/",
        env=store_env(local_cluster),
    )
    assert up.returncode == 0, up.stderr
    return folder

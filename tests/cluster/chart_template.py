"""`helm template` of the chart in git, with Helm's caches and config kept in `home`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from gridloop.local.build import building

CHART = Path(__file__).resolve().parents[2] / "charts" / "gridloop"


def helm_template(release: str, namespace: str, home: Path, *args: str) -> list[dict[str, Any]]:
    """The objects `helm template RELEASE CHART -n NAMESPACE ARGS...` renders."""
    env = {
        **os.environ,
        "KUBECONFIG": os.devnull,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    done = subprocess.run(
        [str(building.binary("helm")), "template", release, str(CHART), "-n", namespace, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]

"""helm and kubectl for the commands that act on a cluster: the user's own.

`--helm PATH` / `--kubectl PATH` win; then, when the kubeconfig a call names is a
`gridloop local` cluster's, that cluster's own (`<state>/bin`: they match its server);
else the one on PATH;
else, only if `gridloop local build` made one, that one (its link in the tools folder,
gridloop.paths). Nothing here builds
anything or needs Go: on a user's machine the tools are theirs. Each is checked once per
run: Helm must be 3.x or 4.x; kubectl must say its version, and doctor checks it against
the server's skew window (`kubectl_skew` in chart/checks.py). Failures are one line
naming the flag.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

from gridloop import paths
from gridloop.errors import UsageError

HELM_MAJORS = (3, 4)
_chosen: dict[str, str] = {}


def configure(helm: str | os.PathLike[str] | None, kubectl: str | os.PathLike[str] | None) -> None:
    """The --helm and --kubectl flags, once per run (cli.py)."""
    _chosen.clear()
    for name, value in (("helm", helm), ("kubectl", kubectl)):
        if value is not None:
            _chosen[name] = str(value)
    _find.cache_clear()


def local_bin(kubeconfig: str | None) -> Path | None:
    """`<state>/bin` when `kubeconfig` is a `gridloop local` cluster's (and names that one
    file, not a list); None for any other cluster."""
    if not kubeconfig or len(kubeconfig.split(os.pathsep)) != 1:
        return None
    state = paths.local_state_dir(kubeconfig)
    return state / "bin" if state is not None and (state / "bin").is_dir() else None


def helm(kubeconfig: str | None = None) -> Path:
    """The helm to run against the cluster of `kubeconfig` (None: no cluster)."""
    path, _ = _find("helm", local_bin(kubeconfig))
    return path


def kubectl(kubeconfig: str | None = None) -> Path:
    path, _ = _find("kubectl", local_bin(kubeconfig))
    return path


def kubectl_version(kubeconfig: str | None = None) -> str:
    """The client's gitVersion, e.g. v1.35.4."""
    _, version = _find("kubectl", local_bin(kubeconfig))
    return version


def version_of(text: str) -> tuple[int, int] | None:
    found = re.match(r"^v?(\d+)\.(\d+)", text.strip())
    return (int(found.group(1)), int(found.group(2))) if found else None


@cache
def _find(name: str, local: Path | None) -> tuple[Path, str]:
    explicit = _chosen.get(name)
    if explicit is not None:
        path = shutil.which(explicit)
        if path is None:
            raise UsageError(f"--{name} {explicit}: no such executable")
        return _checked(name, Path(path), f"--{name} {explicit}")
    if local is not None and (local / name).is_file():
        return _checked(name, local / name, f"{name} of the local cluster ({local})")
    on_path = shutil.which(name)
    if on_path is not None:
        return _checked(name, Path(on_path), f"{name} on PATH ({on_path})")
    built = _built(name)
    if built is not None:
        return _checked(name, built, f"{name} of gridloop local ({built})")
    need = "Helm 3.x or 4.x" if name == "helm" else "kubectl"
    raise UsageError(f"{name} not found on PATH: install {need}, or pass --{name} PATH")


def _built(name: str) -> Path | None:
    """The local cluster's own build, only if it is there (never built from here)."""
    link = paths.tools_dir() / name
    return link if link.is_file() else None


def _checked(name: str, path: Path, where: str) -> tuple[Path, str]:
    if name == "helm":
        args = ["version", "--template", "{{.Version}}"]
    else:
        args = ["version", "--client", "--output", "json"]
    try:
        done = subprocess.run(
            [str(path), *args], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError as err:
        raise UsageError(f"{where}: cannot run it: {err.strerror}") from err
    out = done.stdout.strip()
    if name == "kubectl":
        try:
            out = str(json.loads(out)["clientVersion"]["gitVersion"])
        except (ValueError, KeyError, TypeError):
            out = ""
    parsed = version_of(out)
    if done.returncode != 0 or parsed is None:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise UsageError(
            f"{where}: `{name} {' '.join(args[:1])}` did not give a version"
            + (f": {said[-1]}" if said else "")
        )
    if name == "helm" and parsed[0] not in HELM_MAJORS:
        raise UsageError(
            f"{where} is Helm {out}: gridloop needs Helm 3.x or 4.x (--helm PATH for another)"
        )
    return path, out

"""The umbrella chart as the bundle uses it: read its metadata, copy it, package it.

The copy follows symlinks (the chart links `files/health.yaml` to
policies/health.yaml, and a packaged chart must carry the file itself), and
leaves out what an earlier bundle wrote into the source (its `upstream/` folder
and the upstream components' `crds/<component>.yaml`): the bundle writes its own.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from gridloop import resources, toolchain
from gridloop.bundle import manifests
from gridloop.bundle.sources import COMPONENTS
from gridloop.errors import BuildError, UsageError

REPO_CHART = resources.chart()  # the packaged chart, or the checkout's


@dataclass(frozen=True)
class Chart:
    folder: Path
    name: str
    version: str
    app_version: str
    values: object  # the parsed values.yaml ({} when there is none)


def read(folder: Path, flag: str = "--chart") -> Chart:
    meta = _yaml(folder / "Chart.yaml", flag)
    if not isinstance(meta, dict) or not meta.get("name") or not meta.get("version"):
        raise UsageError(f"{flag} {folder}: Chart.yaml has no name or version")
    values_file = folder / "values.yaml"
    values = _yaml(values_file, flag) if values_file.is_file() else {}
    return Chart(
        folder=folder,
        name=str(meta["name"]),
        version=str(meta["version"]),
        app_version=str(meta.get("appVersion") or ""),
        values=values or {},
    )


def _yaml(path: Path, flag: str) -> object:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise UsageError(f"{flag}: cannot read {path}: {err.strerror}") from err
    except yaml.YAMLError as err:
        raise UsageError(f"{flag}: {path} is not valid YAML: {err}") from err


def copy(chart: Path, dest: Path) -> None:
    """`chart` into `dest` (replaced), symlinks followed, without upstream manifests."""
    shutil.rmtree(dest, ignore_errors=True)
    try:
        shutil.copytree(chart, dest, symlinks=False, ignore=_bundled_before(chart))
    except shutil.Error as err:
        first = err.args[0][0] if err.args and err.args[0] else err
        raise BuildError(f"copying the chart {chart} failed: {first}") from err
    except OSError as err:
        raise BuildError(f"copying the chart {chart} failed: {err}") from err


def _bundled_before(chart: Path) -> Callable[[str, list[str]], list[str]]:
    upstream_crds = {Path(manifests.crd_file(c)).name for c in COMPONENTS}

    def ignore(folder: str, names: list[str]) -> list[str]:
        if Path(folder) == chart:
            return [n for n in names if n == manifests.UPSTREAM]
        if Path(folder) == chart / manifests.CRDS:
            return [n for n in names if n in upstream_crds]
        return []

    return ignore


def package(folder: Path, destination: Path) -> Path:
    """`helm package` the bundled chart; returns the .tgz."""
    helm = toolchain.helm()
    proc = subprocess.run(
        [str(helm), "package", str(folder), "--destination", str(destination)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise BuildError(f"helm package {folder} failed (exit {proc.returncode}): {last}")
    meta = read(folder)
    tgz = destination / f"{meta.name}-{meta.version}.tgz"
    if not tgz.is_file():
        raise BuildError(f"helm package {folder} wrote no {tgz.name}")
    return tgz

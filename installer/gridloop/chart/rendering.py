"""Render the chart with the project-built helm (`helm template --include-crds`).

Rendering never reaches a cluster: helm runs with KUBECONFIG pointing at nothing. Before
helm, the merged values' fleet is checked with gridloop's own fleet schema; after it,
a failure is one line `values: <helm's problem>`. The values helm gets are exactly the
ones `install` passes to `helm upgrade --install`, in the same order.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from gridloop import names, toolchain
from gridloop.bundle import charting
from gridloop.chart import locating, messages
from gridloop.chart.values import Layer, fleet_problem
from gridloop.errors import UsageError

HELM_TIMEOUT = 120.0  # seconds; rendering the bundle takes about one


@dataclass(frozen=True)
class Request:
    chart: Path
    profile: Path | None = None
    files: tuple[Path, ...] = ()
    sets: tuple[str, ...] = ()
    namespace: str = names.DEFAULT_NAMESPACE
    release: str = names.DEFAULT_RELEASE

    def values_args(self) -> list[str]:
        """The profile, then each -f, then each --set: later ones win, as on the command line."""
        args: list[str] = []
        for path in (self.profile, *self.files):
            if path is not None:
                args += ["-f", str(path)]
        for expression in self.sets:
            args += ["--set", expression]
        return args


@dataclass(frozen=True)
class Rendered:
    text: str  # what helm printed: every CRD first, then the templates
    crds: int  # objects from crds/
    objects: int  # objects from templates
    manifest: str  # the templates' part: what Helm records as the release's manifest
    hooks: int = 0  # Helm hooks (helm test): in `text`, not in the manifest


def check_values(request: Request) -> None:
    """Refuse unreadable values files and a broken fleet, before helm runs."""
    layers = []
    if request.profile is not None:
        layers.append(Layer(str(request.profile), locating.values_file(request.profile)))
    layers += [Layer(str(path), locating.values_file(path)) for path in request.files]
    chart_values = charting.read(request.chart).values
    defaults = chart_values if isinstance(chart_values, dict) else {}
    problem = fleet_problem(defaults, layers, request.sets)
    if problem:
        raise UsageError(problem)


def render(request: Request) -> Rendered:
    """The whole rendering, CRDs included; bad values are a UsageError of one line."""
    check_values(request)
    cmd = [str(toolchain.helm()), "template", request.release, str(request.chart)]
    cmd += ["--namespace", request.namespace, "--include-crds", *request.values_args()]
    env = {**os.environ, "KUBECONFIG": os.devnull}
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, env=env, timeout=HELM_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired as err:
        raise UsageError(f"values: helm template took over {HELM_TIMEOUT:.0f}s") from err
    if proc.returncode != 0:
        raise UsageError(f"values: {messages.helm_error(proc.stderr)}")
    return split(proc.stdout, charting.read(request.chart).name)


_SEPARATOR = re.compile(r"^---[ \t]*$", re.MULTILINE)
_SOURCE = re.compile(r"^# Source: (\S+)", re.MULTILINE)


def split(text: str, chart_name: str) -> Rendered:
    """Count what `helm template --include-crds` printed, and cut out the manifest (the
    templates' objects without Helm's hooks).

    Helm marks each file with `# Source: <chart>/<path>`; the documents after a mark
    (an upstream file holds many) belong to it until the next one.
    """
    crd_prefix = f"{chart_name}/crds/"
    source = ""
    crds = objects = hooks = 0
    manifest: list[str] = []
    for chunk in _SEPARATOR.split(text):
        mark = _SOURCE.search(chunk)
        if mark:
            source = mark.group(1)
        if not any(line.strip() and not line.startswith("#") for line in chunk.splitlines()):
            continue
        if source.startswith(crd_prefix):
            crds += 1
        elif _is_hook(chunk):
            hooks += 1
        else:
            objects += 1
            manifest.append(chunk.strip("\n"))
    body = "".join(f"---\n{chunk}\n" for chunk in manifest)
    return Rendered(text=text, crds=crds, objects=objects, manifest=body, hooks=hooks)


def _is_hook(chunk: str) -> bool:
    """A Helm hook (`helm test` pods and their RBAC): Helm runs it at its hook, and keeps
    it out of the release's manifest; so does this (only chunks naming the annotation
    are parsed)."""
    if "helm.sh/hook" not in chunk:
        return False
    try:
        doc = yaml.safe_load(chunk)
    except yaml.YAMLError:
        return False
    annotations = (doc.get("metadata") or {}).get("annotations") if isinstance(doc, dict) else None
    return isinstance(annotations, dict) and "helm.sh/hook" in annotations

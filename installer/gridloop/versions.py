"""Read the pinned upstream versions (`versions.yaml`, the one place they live).

In a source checkout the file is at the repository root; in a built wheel it is
packaged next to this module. Nothing here may hard-code a version.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from gridloop.errors import UsageError

_HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Component:
    name: str
    version: str
    module: str
    debian: str = ""  # a Debian package name, for components unpacked from Debian
    # a download URL template ({version}, {bare} = version without its leading v),
    # for components that are neither a Go module nor a Debian package
    release: str = ""
    # the module's go.sum hash (h1:...), for modules gridloop fetches without Go
    # (bundle/modules.py)
    sum: str = ""
    # a container image repository run at this version as its tag, for components the
    # chart runs but nothing builds or bundles (the vLLM model servers)
    image: str = ""
    # a PyPI project, for components installed from wheels (the heavy images' locks)
    pypi: str = ""
    # the sha256 of what `release` downloads; a release without one is not downloaded
    sha256: str = ""
    # a release no registry here serves, read from a mirror folder (`--mirror DIR`): the
    # archive's file name there ({version}, {bare}), its sha256, and the chart's folder
    # inside it
    mirror: str = ""
    mirror_sha256: str = ""
    mirror_chart: str = ""
    # the folder inside that archive holding the Go source (`go.mod`) a local build of its
    # controller starts from (installer/gridloop/local/build/recipes.py)
    mirror_source: str = ""

    def _filled(self, template: str) -> str:
        return template.format(version=self.version, bare=self.version.lstrip("v"))

    @property
    def release_url(self) -> str:
        """`release` with the version filled in ("" when there is none)."""
        return self._filled(self.release)

    @property
    def mirror_name(self) -> str:
        """`mirror` with the version filled in ("" when there is none)."""
        return self._filled(self.mirror)

    @property
    def mirror_chart_path(self) -> str:
        return self._filled(self.mirror_chart)

    @property
    def mirror_source_path(self) -> str:
        return self._filled(self.mirror_source)

    @property
    def bare(self) -> str:
        """`v0.12.0` -> `0.12.0`, the tag some projects give their images."""
        return self.version.lstrip("v")

    @property
    def image_ref(self) -> str:
        """`vllm/vllm-openai` at `v0.33.0` -> `vllm/vllm-openai:v0.33.0` ("" without image)."""
        return f"{self.image}:{self.version}" if self.image else ""

    @property
    def minor(self) -> str:
        """`v1.35.4` -> `35` (Kubernetes' gitMinor)."""
        return self.version.lstrip("v").split(".")[1]


def versions_file() -> Path:
    override = os.environ.get("GRIDLOOP_VERSIONS_FILE")
    if override:
        return Path(override)
    for candidate in (_HERE.parents[1] / "versions.yaml", _HERE / "versions.yaml"):
        if candidate.is_file():
            return candidate
    raise UsageError("versions.yaml not found next to the gridloop package or at the repo root")


@cache
def load() -> dict[str, Component]:
    path = versions_file()
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise UsageError(f"{path}: cannot read the versions file: {err.strerror}") from err
    except yaml.YAMLError as err:
        raise UsageError(f"{path}: not valid YAML: {err}") from err
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a mapping of component -> version")
    out: dict[str, Component] = {}
    for name, spec in data.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("version"), str):
            raise UsageError(f"{path}: {name}.version: missing or not a string")
        out[name] = Component(
            name=name,
            version=spec["version"],
            module=str(spec.get("module", "")),
            debian=str(spec.get("debian", "")),
            release=str(spec.get("release", "")),
            image=str(spec.get("image", "")),
            sum=str(spec.get("sum", "")),
            pypi=str(spec.get("pypi", "")),
            sha256=str(spec.get("sha256", "")),
            mirror=str(spec.get("mirror", "")),
            mirror_sha256=str(spec.get("mirror_sha256", "")),
            mirror_chart=str(spec.get("mirror_chart", "")),
            mirror_source=str(spec.get("mirror_source", "")),
        )
    return out


def get(name: str) -> Component:
    components = load()
    if name not in components:
        raise UsageError(f"versions.yaml: no component named {name!r}")
    return components[name]

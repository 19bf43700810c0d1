"""How big Helm's record of a release would be, before Helm tries to store it.

Helm 4 keeps each revision in a Secret `sh.helm.release.v1.<release>.v<n>` whose one
key is base64(gzip(JSON of the release)): the chart's every file (templates, crds/,
upstream/, README, ... each itself base64 inside the JSON, which gzip compresses
poorly), its values and schema, the user's values, the rendered manifest and the
notes. A Secret holds at most 1 MiB, and past it the install fails after the CRDs
have been applied. This estimate follows Helm's encoding (pkg/storage/driver/util.go
encodeRelease, pkg/chart/v2/loader) closely enough to refuse early. Go's gzip at
BestCompression writes about 1.2% more than Python's zlib at level 9 on this data
(measured on the bundle), so the estimate adds a margin.
"""

from __future__ import annotations

import base64
import fnmatch
import gzip
import json
from pathlib import Path

import yaml

from gridloop import names

SECRET_LIMIT = 1024 * 1024  # bytes of data a Kubernetes Secret may hold
SPECIAL = ("Chart.yaml", "values.yaml", "values.schema.json")  # not stored as files
GO_GZIP_MARGIN = 1.03  # Go's compressor vs zlib, with room to spare


def estimate(chart: Path, manifest: str, notes: str = "", config: object = None) -> int:
    """Bytes of the release Secret's data for `chart` rendered as `manifest`."""
    templates: list[dict[str, str]] = []
    files: list[dict[str, str]] = []
    for path in _chart_files(chart):
        name = path.relative_to(chart).as_posix()
        if name in SPECIAL:
            continue
        entry = {"name": name, "data": _b64(path.read_bytes())}
        (templates if name.startswith("templates/") else files).append(entry)
    schema = chart / "values.schema.json"
    release = {
        "name": "gridloop",
        "info": {"status": "deployed", "description": "Install complete", "notes": notes},
        "chart": {
            "metadata": _yaml(chart / "Chart.yaml"),
            "lock": None,
            "templates": templates,
            "values": _yaml(chart / "values.yaml"),
            "schema": _b64(schema.read_bytes()) if schema.is_file() else None,
            "files": files,
        },
        "config": config or {},
        "manifest": manifest,
        "version": 1,
        "namespace": names.DEFAULT_NAMESPACE,
    }
    raw = json.dumps(release, separators=(",", ":")).encode()
    compressed = gzip.compress(raw, compresslevel=9, mtime=0)
    return int(len(base64.b64encode(compressed)) * GO_GZIP_MARGIN)


def mib(size: int) -> str:
    return f"{size / SECRET_LIMIT:.2f} MiB"


def _chart_files(chart: Path) -> list[Path]:
    ignored = _helmignore(chart)
    out = []
    for path in sorted(chart.rglob("*")):
        rel = path.relative_to(chart)
        if path.is_file() and not any(_matches(rel, p) for p in ignored):
            out.append(path)
    return out


def _helmignore(chart: Path) -> list[str]:
    try:
        text = (chart / ".helmignore").read_text()
    except OSError:
        return []
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _matches(rel: Path, pattern: str) -> bool:
    if pattern.endswith("/"):
        return pattern.rstrip("/") in rel.parts[:-1]
    return fnmatch.fnmatch(rel.name, pattern) or fnmatch.fnmatch(rel.as_posix(), pattern)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _yaml(path: Path) -> object:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None

"""The rendering cache: one upstream rendering per component and version, outside the repo.

`<cache>/upstream/<component>-<version>/rendered.yaml` holds what the
upstream tool produced (kustomize, the release file, `helm template`) before
any gridloop edit, so a change to the edits never needs a cache purge. A
`.complete` stamp with the source's fingerprint is written last; a rendering
without one, or with another, is redone.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from gridloop import paths
from gridloop.bundle.sources import Source
from gridloop.versions import Component

STAMP = ".complete"
RENDERED = "rendered.yaml"


def folder(comp: Component) -> Path:
    return paths.cache_root() / "upstream" / f"{comp.name}-{comp.version}"


def read(source: Source, comp: Component) -> str | None:
    """The cached rendering, or None when there is none for this fingerprint."""
    where = folder(comp)
    try:
        stamp = json.loads((where / STAMP).read_text())
        if stamp.get("fingerprint") != source.fingerprint(comp):
            return None
        return (where / RENDERED).read_text(encoding="utf-8")
    except (OSError, ValueError):
        return None


def write(source: Source, comp: Component, text: str) -> None:
    where = folder(comp)
    where.mkdir(parents=True, exist_ok=True)
    (where / STAMP).unlink(missing_ok=True)
    tmp = where / f".{RENDERED}.tmp"
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(where / RENDERED)
    stamp = {"fingerprint": source.fingerprint(comp), "rendered": time.time()}
    (where / STAMP).write_text(json.dumps(stamp) + "\n")

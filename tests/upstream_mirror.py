"""The folder of upstream releases no registry here serves (../shared/upstream/, whose
README lists them; or $GRIDLOOP_UPSTREAM_MIRROR): what `--mirror DIR` reads in the tests,
as an air-gapped site's mirror. Found by suite.py too, for the KAITO build beside the lanes.
Tests that need it fail without it, never skip."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = "GRIDLOOP_UPSTREAM_MIRROR"


def find() -> Path | None:
    for candidate in (
        os.environ.get(ENV, ""),
        ROOT.parent / "shared" / "upstream",
        Path("/work/shared/upstream"),
    ):
        if candidate and (Path(candidate) / "README.md").is_file():
            return Path(candidate)
    return None


def folder() -> Path:
    found = find()
    if found is None:
        import pytest

        pytest.fail(f"no upstream mirror: set {ENV} to ../shared/upstream")
    return found

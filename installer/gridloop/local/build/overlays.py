"""Build-time edits of upstream source, applied with `go build -overlay` (pure).

Some upstream programs hard-code a path that only makes sense in their
container image (Kueue reads its metrics certificate from
`/etc/kueue/metrics/certs`). gridloop never writes into /etc and never runs
anything as another user, so such a path is made configurable at build time
instead: the edited copy of the file is generated in the build cache and
handed to `go build -overlay`; the module cache and the repository are never
changed, and no upstream file is copied into the repository.

A patch names the exact upstream text it replaces. When a version bump moves
or changes that text, the build stops with one line saying which patch no
longer applies, rather than building a binary that silently ignores it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass


class PatchMismatch(ValueError):
    """A patch whose upstream text is not in the file exactly once; one line."""


@dataclass(frozen=True)
class SourcePatch:
    # path of the file inside the upstream module (forward slashes)
    file: str
    # the upstream text replaced, which must occur exactly once; "" adds `file` as a new file
    old: str
    new: str
    # what the patch is for, in the error when it no longer applies
    why: str

    def fingerprint(self) -> str:
        return f"{self.file}|{self.old}|{self.new}"


def apply_patch(patch: SourcePatch, original: str | None) -> str:
    """The text of `patch.file` after the patch; `original` is None when the file is absent."""
    if not patch.old:
        if original is not None:
            raise PatchMismatch(f"{patch.file} exists upstream; the patch ({patch.why}) adds it")
        return patch.new
    if original is None:
        raise PatchMismatch(f"{patch.file} is gone upstream; the patch ({patch.why}) edits it")
    count = original.count(patch.old)
    if count != 1:
        found = "not found" if count == 0 else f"found {count} times"
        raise PatchMismatch(
            f"{patch.file}: the text the patch ({patch.why}) replaces is {found}: "
            f"{patch.old.strip().splitlines()[0]!r}"
        )
    return original.replace(patch.old, patch.new)


def overlay_document(replace: Mapping[str, str]) -> str:
    """The JSON file `go build -overlay` reads: upstream path -> path of the edited copy."""
    return json.dumps({"Replace": dict(sorted(replace.items()))}, indent=2) + "\n"

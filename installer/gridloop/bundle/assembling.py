"""The bundle `render` and `install` assemble themselves when they are given none.

After `pip install gridloop`, `gridloop install` is one command: the package's chart is
bundled with its upstream components (Kueue, KubeRay, agent-sandbox from the Go module
proxy, KAITO from its release) into the cache, keyed by what it is made of: the chart's
files and each component's version. A component that cannot be fetched (no route to
where it is published) is left out with the reason, and the chart renders the rest
(templates/upstream.yaml, NOTES.txt); a bundle with something left out is assembled again
on the next run, so it is complete once the machine can fetch it. Anything else that
fails (a module whose hash is not the pinned one, a manifest that does not parse) stops
the command: it is never left out.

`--chart DIR`, `--bundle FILE` and `./dist/gridloop` (`gridloop bundle`) still win:
chart/locating.py asks here last.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gridloop import paths, versions
from gridloop.bundle import adjustments, bundling, charting, fetching, manifests
from gridloop.bundle.sources import SOURCES
from gridloop.errors import UsageError

STAMP = ".complete"  # written into a bundle folder that has every component

Say = Callable[[str], None]


@dataclass(frozen=True)
class Assembled:
    chart: Path  # the bundled chart folder
    left_out: dict[str, str]  # component -> why it is not in it
    reused: bool  # found complete in the cache


def key(chart: Path, mirror: Path | None = None) -> str:
    """What the bundle is made of: every file of the chart (path and bytes, links
    followed), each upstream component's rendering fingerprint and, with a mirror, what
    the mirror holds for each (its manifests' bytes, its release archive's pinned hash),
    and the code of the edits the bundle makes to them."""
    digest = hashlib.sha256()
    for path in sorted(p for p in chart.rglob("*") if p.is_file()):
        rel = path.relative_to(chart).as_posix()
        if rel.startswith(f"{manifests.UPSTREAM}/"):
            continue  # what an earlier bundle wrote into the source: not copied either
        digest.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    # the edits made to every upstream component's manifests (adjustments.integrate)
    digest.update(Path(adjustments.__file__).read_bytes() + b"\0")
    for source in SOURCES:
        comp = versions.get(source.component)
        digest.update(source.fingerprint(comp).encode() + b"\0")
        if mirror is not None:
            for path in fetching.mirror_files(mirror, comp.name):
                digest.update(b"mirror\0" + path.read_bytes() + b"\0")
            if fetching.mirror_archive(mirror, comp) is not None:  # checked: refused if changed
                digest.update(f"archive\0{comp.mirror_sha256}\0".encode())
    return digest.hexdigest()[:16]


def folder(chart: charting.Chart, made_of: str) -> Path:
    return paths.cache_root() / "bundles" / f"{chart.name}-{chart.version}-{made_of}"


def assemble(say: Say, mirror: Path | None = None) -> Assembled:
    """The package's chart, bundled (from the cache when a complete one is there), with
    what `mirror` holds (`--mirror DIR`, as `gridloop bundle` reads it)."""
    if mirror is not None and not mirror.is_dir():
        raise UsageError(f"--mirror {mirror}: no such directory")
    chart = charting.read(charting.REPO_CHART)
    where = folder(chart, key(chart.folder, mirror))
    if (where / STAMP).is_file():
        return Assembled(where / "gridloop", {}, reused=True)
    say(f"assembling the bundle for {chart.name} {chart.version} in {where}")
    where.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{where.name}-", dir=where.parent))
    try:
        request = bundling.Request(
            out=work, chart=chart.folder, mirror=mirror, leave_out_unfetchable=True
        )
        result = bundling.bundle(request, say)
        if not result.left_out:
            (work / STAMP).write_text("")
        _replace(where, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Assembled(where / "gridloop", result.left_out, reused=False)


def _replace(where: Path, work: Path) -> None:
    """`work` becomes `where`; a complete bundle another run put there first is kept."""
    if (where / STAMP).is_file():
        return
    old = where.with_name(f".{where.name}-old-{os.getpid()}")
    if where.exists():
        where.rename(old)
    work.rename(where)
    shutil.rmtree(old, ignore_errors=True)

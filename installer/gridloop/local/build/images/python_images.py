"""Upstream Python programs made into images: agent-sandbox's sandbox runtime.

Each row names an upstream folder inside a pinned Go module (read from the module proxy
with its go.sum hash checked, bundle/modules.py), the files of it the image needs, and
upstream's own `requirements.txt` (pinned with hashes by pip-compile; or gridloop's lock of
upstream's `requirements.in` beside the Containerfile where upstream's pins name wheels the
image's Python has none of: `lock`). The build context,
in the cache and never in the repository, holds those files, the repository's
`images/<name>/Containerfile`, and `wheels/`: every requirement downloaded from PyPI with
`--require-hashes` (pip's cache makes a warm download a few hashes). The image is built
on the same local Debian base as gridloop's own (gridloop_image.base_image) with
`--network=none`, and installs the wheels with `--require-hashes` again, so what runs is
exactly what upstream pinned.

Cached by what it is made of: the base's image ID, the Containerfile, the upstream
files and the hashed requirements (which name every wheel by its digest), so a warm
build downloads nothing.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import dataclass

from gridloop import versions
from gridloop.bundle import modules
from gridloop.local.build.images import buildah, gridloop_image

RUNTIME = "sandbox-runtime"


@dataclass(frozen=True)
class PythonImage:
    name: str  # images/<name>/Containerfile in the repository
    repository: str  # the chart's image repository; the tag is the component's version
    component: str  # the versions.yaml component whose Go module holds the sources
    folder: str  # the upstream folder inside that module
    files: tuple[str, ...]  # what of it goes into the build context
    requirements: str = "requirements.txt"  # in `folder`, pinned with hashes
    # or gridloop's lock of upstream's requirements.in, beside the Containerfile, where
    # upstream's pins do not install on the image's Python (its header says why)
    lock: bool = False
    # gridloop's own files beside the Containerfile (images/<name>/) that go in too
    own_files: tuple[str, ...] = ()

    @property
    def ref(self) -> str:
        return f"{self.repository}:{versions.get(self.component).version}"


IMAGES = (
    PythonImage(
        name=RUNTIME,
        repository="ghcr.io/gridloop/sandbox-runtime",
        component="agent-sandbox",
        folder="examples/python-runtime-sandbox",
        files=("main.py",),
        lock=True,
    ),
)


def by_name(name: str) -> PythonImage:
    for image in IMAGES:
        if image.name == name:
            return image
    raise KeyError(name)


def build(image: PythonImage) -> gridloop_image.Built:
    """Build the image unless the cache has it; pushing is apart."""
    t0 = time.monotonic()
    root = gridloop_image.repo_root()
    base, _ = gridloop_image.base_image()
    source = modules.module_dir(versions.get(image.component)) / image.folder
    cache = gridloop_image.cache_dir()
    context = cache / f"{image.name}.context"
    shutil.rmtree(context, ignore_errors=True)
    wheels = context / "wheels"
    wheels.mkdir(parents=True)
    log = cache / f"{image.name}.log"
    log.write_text(f"gridloop local build: {image.ref}\n")
    what = f"building image {image.ref}"
    shutil.copyfile(root / "images" / image.name / "Containerfile", context / "Containerfile")
    for name in (*image.files, *(() if image.lock else (image.requirements,))):
        shutil.copyfile(source / name, context / name)
    if image.lock:
        lock = root / "images" / image.name / image.requirements
        shutil.copyfile(lock, context / image.requirements)
    for name in image.own_files:
        shutil.copyfile(root / "images" / image.name / name, context / name)
    # requirements.txt pins every wheel by its hash, so the context's files say what the
    # image is made of: a warm build downloads nothing
    sha = gridloop_image.sha256
    parts = [image.ref, buildah.image_id(base)]
    parts += [f"{p.name}={sha(p)}" for p in sorted(context.iterdir()) if p.is_file()]
    fingerprint = "|".join(parts)
    stamp = cache / f"{image.name}.json"
    if gridloop_image.stamp_ok(stamp, fingerprint) and buildah.exists(image.ref):
        shutil.rmtree(context, ignore_errors=True)
        return gridloop_image.Built(image.ref, False, time.monotonic() - t0)
    stamp.unlink(missing_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes"]
    pip += ["--only-binary=:all:", "--dest", str(wheels), "-r", str(context / image.requirements)]
    buildah.run_logged(pip, log, f"{what}: downloading upstream's pinned requirements")
    buildah.bud(context, image.ref, base, log, what)
    shutil.rmtree(context, ignore_errors=True)
    stamp.write_text(json.dumps({"fingerprint": fingerprint}) + "\n")
    return gridloop_image.Built(image.ref, True, time.monotonic() - t0)

"""gridloop's heavy images, each a Containerfile on a hashed lock of PyPI wheels.

Three rows: the vLLM CPU image (images/vllm-cpu/: about 7 GiB unpacked, torch and its CUDA
runtime wheels are most of it), the Ray image (images/ray/: Ray with its dashboard, which
the RayJobs of the training examples run, about 0.6 GB) and the trainer image
(images/trainer/: Ray's lock, taken from images/ray/, in a second venv on top of the vLLM
CPU image, whose torch and transformers it imports; the learning loop's fine-tuning runs
on it). None of them is built by `gridloop local build` or `make demo`: `gridloop local
build vllm-cpu`, `ray` or `trainer` does (the trainer builds the vLLM image first), and
`make test` asks for all three (`gridloop local build all`, which builds them one after
the other on a thread beside the Go builds). Once built, `local up` pushes them to the
local registry like every other image (once: the registry's storage is in the cache),
with their layers uncompressed. The first two sit on the same local Debian base as
gridloop's own image (gridloop_image.base_image), so they share its layer; the trainer
shares all of the vLLM image's.

The build context, in the cache and never in the repository, holds the row's own files
(the Containerfile, the hashed lock requirements.txt, and e.g. vLLM's `vllm` wrapper),
the files the row takes from the build cache (Debian's libnuma, wget and libpsl), and
`wheels/`: every locked wheel downloaded from PyPI with --require-hashes (pip's cache
makes a warm download a few hashes). Cached by what it is made of: the base's image ID
and those files' digests.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gridloop import versions
from gridloop.local.build import building
from gridloop.local.build.images import buildah, gridloop_image


@dataclass(frozen=True)
class LockedImage:
    name: str  # images/<name>/ and the build's name on the command line
    component: str  # the versions.yaml entry whose image:version the image is
    own_files: tuple[str, ...]  # from images/<name>/, into the context
    # build-cache binaries (by their name) copied into the context beside them
    binaries: tuple[str, ...] = ()
    # the recipes the build needs besides its base image (runc runs its RUN steps)
    needs: tuple[str, ...] = ("runc",)
    why: str = ""
    # the images/ folder whose requirements.txt is the lock ("": the row's own folder)
    lock_from: str = ""
    # the heavy image this one is built FROM (None: the local Debian base)
    base: LockedImage | None = None

    def ref(self) -> str:
        """The image as the cluster pulls it: versions.yaml's `image`:`version`."""
        return versions.get(self.component).image_ref

    def folder(self) -> Path:
        return gridloop_image.repo_root() / "images" / self.name

    def lock(self) -> Path:
        """The hashed lock the build installs (the row's own or another row's)."""
        folder = self.folder().parent / self.lock_from if self.lock_from else self.folder()
        return folder / "requirements.txt"

    def lock_pins(self) -> dict[str, str]:
        """The lock's `name==version` pins, by lower-case name."""
        out = {}
        for line in self.lock().read_text().splitlines():
            if "==" in line and not line.startswith(("#", " ")):
                name, version = line.split(" ", 1)[0].split("==")
                out[name.lower()] = version
        return out

    def base_ref(self) -> str:
        """The image the Containerfile's BASE names: the base row's, or the Debian base."""
        if self.base is not None:
            return self.base.ref()
        return f"localhost/gridloop-base/debian:{versions.get('debian-base').version}"

    def stamped(self) -> bool:
        """Whether the image was built from what the repository holds now, on the base
        buildah holds now (no download)."""
        if self.base is not None and not self.base.stamped():
            return False
        base = self.base_ref()
        if not buildah.exists(base) or not buildah.exists(self.ref()):
            return False
        return gridloop_image.stamp_ok(self._stamp(), self._fingerprint(buildah.image_id(base)))

    def needs_push(self) -> bool:
        """Whether the registry may hold an older build under the same tag (a rebuild keeps
        the tag: its version is upstream's)."""
        try:
            return self._pushed().read_text() != self._stamp().read_text()
        except OSError:
            return True

    def mark_pushed(self) -> None:
        self._pushed().write_text(self._stamp().read_text())

    def build(self) -> gridloop_image.Built:
        """Build the image unless the cache has it; pushing is apart."""
        t0 = time.monotonic()
        # a base row is built (or found cached) first: its image ID is in the fingerprint,
        # so a rebuilt base rebuilds this image
        base = self.base.build().ref if self.base is not None else gridloop_image.base_image()[0]
        image = self.ref()
        fingerprint = self._fingerprint(buildah.image_id(base))
        if gridloop_image.stamp_ok(self._stamp(), fingerprint) and buildah.exists(image):
            return gridloop_image.Built(image, False, time.monotonic() - t0)
        self._stamp().unlink(missing_ok=True)
        cache = gridloop_image.cache_dir()
        context = cache / f"{self.name}.context"
        shutil.rmtree(context, ignore_errors=True)
        wheels = context / "wheels"
        wheels.mkdir(parents=True)
        for name in self.own_files:
            shutil.copy2(self.folder() / name, context / name)
        if self.lock_from:
            shutil.copy2(self.lock(), context / "requirements.txt")
        for name in self.binaries:
            shutil.copy2(building.binary(name), context / name)
        log = cache / f"{self.name}.log"
        log.write_text(f"gridloop local build: {image}\n")
        what = f"building image {image}"
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes"]
        pip += ["--only-binary=:all:", "--dest", str(wheels)]
        pip += ["-r", str(context / "requirements.txt")]
        buildah.run_logged(pip, log, f"{what}: downloading the locked wheels")
        buildah.bud(context, image, base, log, what)
        shutil.rmtree(context, ignore_errors=True)
        self._stamp().write_text(json.dumps({"fingerprint": fingerprint}) + "\n")
        return gridloop_image.Built(image, True, time.monotonic() - t0)

    def _stamp(self) -> Path:
        return gridloop_image.cache_dir() / f"{self.name}.json"

    def _pushed(self) -> Path:
        return gridloop_image.cache_dir() / f"{self.name}.pushed"

    def _fingerprint(self, base_id: str) -> str:
        sha = gridloop_image.sha256
        parts = [self.ref(), base_id]
        parts += [f"{n}={sha(self.folder() / n)}" for n in self.own_files]
        if self.lock_from:  # another row's lock, named by its folder
            parts.append(f"{self.lock_from}/requirements.txt={sha(self.lock())}")
        parts += [f"{n}={sha(building.binary(n))}" for n in self.binaries]
        return "|".join(parts)


VLLM_CPU = LockedImage(
    name="vllm-cpu",
    component="vllm-cpu",
    own_files=("Containerfile", "vllm", "requirements.txt"),
    # Debian's libnuma (recipes.py): vLLM's CPU ops link it
    binaries=("libnuma.so.1",),
    needs=("libnuma", "runc"),
    why="vLLM's OpenAI server on CPU with the Run:ai streamer (the inference tests)",
)
RAY = LockedImage(
    name="ray",
    component="ray",
    own_files=("Containerfile", "requirements.txt"),
    # Debian's GNU wget and its libpsl (recipes.py), for KubeRay's probes
    binaries=("wget", "libpsl.so.5"),
    needs=("wget", "libpsl", "runc"),
    why="Ray with its dashboard and job server, as KubeRay runs it (the training tests)",
)
TRAINER = LockedImage(
    name="trainer",
    component="trainer",
    own_files=("Containerfile",),
    binaries=("wget", "libpsl.so.5"),
    needs=("wget", "libpsl", "runc"),
    why="Ray with torch and transformers from the vLLM image's layers (the loop's fine-tuning)",
    lock_from="ray",  # the Ray image's lock: both images pin the same Ray
    base=VLLM_CPU,
)
# in build order: a row comes after its base
IMAGES = (VLLM_CPU, RAY, TRAINER)


def by_name(name: str) -> LockedImage:
    for image in IMAGES:
        if image.name == name:
            return image
    raise KeyError(name)


def names() -> tuple[str, ...]:
    return tuple(image.name for image in IMAGES)


def needs(images: tuple[LockedImage, ...] = IMAGES) -> tuple[str, ...]:
    """Every recipe one of `images` or their bases needs, once, in order."""
    return tuple(dict.fromkeys(n for image in images for n in _needs_with_bases(image)))


def _needs_with_bases(image: LockedImage) -> tuple[str, ...]:
    below = _needs_with_bases(image.base) if image.base is not None else ()
    return (*below, *image.needs)

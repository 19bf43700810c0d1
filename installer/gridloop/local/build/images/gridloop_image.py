"""gridloop's own image, from the repository's Containerfile, on a Debian base made here.

No registry on the internet is reachable here, so the Containerfile's BASE is made from
Debian's packages: debootstrap (minbase) of the pinned suite with python3 and
python3-venv, the package caches and lists removed, committed with buildah as
`localhost/gridloop-base/debian:<suite>`. Then `buildah bud` builds the Containerfile
exactly as a release would (another BASE is the only difference), with a context of
wheels: gridloop's, built from this checkout, and its dependencies', downloaded from PyPI
as the hashed lock `images/gridloop/requirements.txt` names them (`--require-hashes`,
checked again by the install in the image). The build runs with no network
(`--network=none`), so what is in the image is what the lock says.

Both steps are cached by what they are made of (the suite, the package list and
debootstrap's version; the base's digest, the Containerfile and every wheel's digest),
so a warm build is a few hashes and one `pip wheel` that finds everything in pip's cache.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from gridloop import paths, versions
from gridloop.errors import BuildError
from gridloop.local.build.images import buildah

BASE_PACKAGES = ("python3", "python3-venv")
MIRROR = "http://deb.debian.org/debian"
REPOSITORY = "ghcr.io/gridloop/gridloop"  # the chart's health.image.repository
# the hashed lock of its dependencies (pip-compile --generate-hashes), in the repository
LOCK = "images/gridloop/requirements.txt"


def repo_root() -> Path:
    """The source checkout gridloop's wheel is built from (the image is a developer's
    build: a release publishes it from CI)."""
    root = versions.versions_file().resolve().parent
    if not (root / "pyproject.toml").is_file() or not (root / "Containerfile").is_file():
        raise BuildError(
            "gridloop's image is built from a source checkout (pyproject.toml and "
            f"Containerfile beside versions.yaml); {root} has none"
        )
    return root


def image_ref() -> str:
    """`ghcr.io/gridloop/gridloop:<chart appVersion>`: the image the chart deploys."""
    import yaml

    chart = yaml.safe_load((repo_root() / "charts" / "gridloop" / "Chart.yaml").read_text())
    return f"{REPOSITORY}:{chart['appVersion']}"


def cache_dir() -> Path:
    return paths.cache_root() / "images"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stamp_ok(stamp: Path, fingerprint: str) -> bool:
    try:
        return bool(json.loads(stamp.read_text()).get("fingerprint") == fingerprint)
    except (OSError, ValueError):
        return False


def _debootstrap_version() -> str:
    proc = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "debootstrap"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0 or shutil.which("debootstrap") is None:
        raise BuildError(
            "debootstrap not found: gridloop's image base is made with it (apt-get install "
            "debootstrap)"
        )
    return proc.stdout.strip()


@dataclass(frozen=True)
class Built:
    ref: str
    fresh: bool  # built now (else the cache had it)
    seconds: float


def base_image() -> tuple[str, bool]:
    """The local Debian base (its name, and whether it was made now)."""
    comp = versions.get("debian-base")
    name = f"localhost/gridloop-base/debian:{comp.version}"
    fingerprint = "|".join([comp.version, *BASE_PACKAGES, MIRROR, _debootstrap_version()])
    stamp = cache_dir() / f"base-{comp.version}.json"
    if stamp_ok(stamp, fingerprint) and buildah.exists(name):
        return name, False
    log = cache_dir() / f"base-{comp.version}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"gridloop local build: {name}\n")
    root = cache_dir() / f"base-{comp.version}.root"
    shutil.rmtree(root, ignore_errors=True)
    what = f"making the image base {name} (debootstrap {comp.version})"
    buildah.run_logged(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            comp.version,
            str(root),
            MIRROR,
        ],
        log,
        what,
    )
    packages = buildah.run_logged(
        ["chroot", str(root), "dpkg-query", "-W", "-f=${Package} ${Version}\\n"], log, what
    )
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
        for item in (root / junk).glob("*"):
            if item.is_dir() and not item.is_symlink():
                shutil.rmtree(item, ignore_errors=True)
            else:
                item.unlink(missing_ok=True)
    buildah.commit_rootfs(root, name, log, what)
    shutil.rmtree(root, ignore_errors=True)
    stamp.write_text(json.dumps({"fingerprint": fingerprint, "packages": packages}) + "\n")
    return name, True


def build() -> Built:
    """gridloop's image from the Containerfile, unless the cache has it; pushing is apart."""
    import time

    t0 = time.monotonic()
    ref, root = image_ref(), repo_root()
    base, _ = base_image()
    context = cache_dir() / "gridloop.context"
    shutil.rmtree(context, ignore_errors=True)
    wheels = context / "wheels"
    wheels.mkdir(parents=True)
    log = cache_dir() / "gridloop.log"
    log.write_text(f"gridloop local build: {ref}\n")
    what = f"building image {ref}"
    # gridloop's own wheel, alone; its dependencies exactly as the hashed lock names them
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir"]
    buildah.run_logged([*pip, str(wheels), str(root)], log, f"{what}: building gridloop's wheel")
    shutil.copyfile(root / LOCK, wheels / "requirements.txt")
    pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes"]
    pip += ["--only-binary=:all:", "--dest", str(wheels), "-r", str(wheels / "requirements.txt")]
    buildah.run_logged(pip, log, f"{what}: downloading the locked wheels")
    shutil.copyfile(root / "Containerfile", context / "Containerfile")
    parts = [ref, buildah.image_id(base), sha256(context / "Containerfile")]
    parts += [f"{w.name}={sha256(w)}" for w in sorted(wheels.iterdir())]
    fingerprint = "|".join(parts)
    stamp = cache_dir() / "gridloop.json"
    if stamp_ok(stamp, fingerprint) and buildah.exists(ref):
        shutil.rmtree(context, ignore_errors=True)
        return Built(ref, False, time.monotonic() - t0)
    stamp.unlink(missing_ok=True)
    buildah.bud(context, ref, base, log, what)
    shutil.rmtree(context, ignore_errors=True)
    stamp.write_text(json.dumps({"fingerprint": fingerprint}) + "\n")
    return Built(ref, True, time.monotonic() - t0)


def size(ref: str) -> str:
    return buildah.image_size(ref)

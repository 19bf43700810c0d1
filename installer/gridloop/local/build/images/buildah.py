"""Build an image row with buildah, cache it by what it is made of, push it to the registry.

buildah (Debian's) builds `FROM scratch` with the vfs storage driver, in storage kept in
the build cache, so a warm build is a stamp comparison and a push only happens when the
registry lacks the tag. Nothing runs inside the image while building (no `buildah run`):
the files and links are laid out in a staging folder and copied in, so no OCI runtime or
network is needed to build.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from gridloop import paths
from gridloop.errors import BuildError
from gridloop.local.build.images import registry
from gridloop.local.build.images.table import Image


def _runroot() -> Path:
    return paths.cache_root() / "buildah" / "run"


def command() -> list[str]:
    """buildah with gridloop's storage (in the build cache, vfs driver)."""
    found = shutil.which("buildah")
    if found is None:
        raise BuildError(
            "buildah not found: the local images are built with it (apt-get install buildah)"
        )
    root = paths.cache_root() / "buildah"
    return [
        found,
        "--root",
        str(root / "storage"),
        "--runroot",
        str(_runroot()),
        "--storage-driver",
        "vfs",
    ]


def bud(context: Path, ref: str, base: str, log: Path, what: str) -> None:
    """`buildah bud` of the Containerfile in `context` as `ref` on `base`, with no network.

    RUN steps run under the cache's runc (Debian's, as the container nodes use), not
    buildah's default crun: crun 1.8 refuses a host with cgroup v1 hierarchies beside a
    cgroup2 mount that has a controller ("cgroups in hybrid mode not supported"), which
    some of these machines have (/sys/fs/cgroup/unified with hugetlb); runc runs there."""
    from gridloop.local.build import building

    runc = building.binary("runc")
    cmd = [*command(), "bud", "--isolation=oci", f"--runtime={runc}", "--network=none"]
    cmd += ["--format=oci", "--layers=false", f"--build-arg=BASE={base}", "-t", ref, str(context)]
    run_logged(cmd, log, what)
    prune(log, what)


def prune(log: Path, what: str) -> None:
    """Remove the images a new build took the tag from: the vfs driver keeps each one
    whole (gridloop's image is 243 MB, rebuilt on every change of the checkout: 17 left
    in half a day filled 4 GB of the disk the local cluster's node pulls onto)."""
    run_logged([*command(), "rmi", "--prune"], log, what)


def _slug(image: Image) -> str:
    return image.ref.replace("/", "_").replace(":", "_")


def _stamp(image: Image) -> Path:
    return paths.cache_root() / "images" / f"{_slug(image)}.json"


def local_name(image: Image) -> str:
    return f"localhost/gridloop-build/{_slug(image)}:latest"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_logged(cmd: list[str], log: Path, what: str) -> str:
    """Run `cmd`, its stderr (and its stdout) into `log`; one line naming `what` on failure."""
    with log.open("a") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=fh, text=True, check=False)
        fh.write(proc.stdout)
    if proc.returncode != 0:
        raise BuildError(f"{what} failed (exit {proc.returncode}): see {log}")
    return proc.stdout.strip()


def built(image: Image, binary: Callable[[str], Path]) -> bool:
    stamp = _stamp(image)
    try:
        recorded = json.loads(stamp.read_text()).get("fingerprint")
    except (OSError, ValueError):
        return False
    return bool(recorded == image.fingerprint(lambda n: _sha256(binary(n))))


def build(image: Image, binary: Callable[[str], Path]) -> Path:
    """Build `image` into buildah's storage unless its stamp matches; return the log."""
    log = paths.cache_root() / "images" / f"{_slug(image)}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    if built(image, binary):
        return log
    _stamp(image).unlink(missing_ok=True)
    log.write_text(f"gridloop local images: {image.ref}\n")
    what = f"building image {image.ref}"
    staging = paths.cache_root() / "images" / f"{_slug(image)}.root"
    shutil.rmtree(staging, ignore_errors=True)
    for inside, name in image.files.items():
        target = staging / inside.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(binary(name), target)
        target.chmod(0o755)
    for inside, text in image.texts.items():
        target = staging / inside.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        target.chmod(0o644)
    for inside in image.scratch_dirs:
        folder = staging / inside.lstrip("/")
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o1777)
    for inside, points_to in image.links.items():
        link = staging / inside.lstrip("/")
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(points_to)
    bah = command()
    container = run_logged([*bah, "from", "scratch"], log, what)
    try:
        run_logged([*bah, "copy", container, f"{staging}/", "/"], log, what)
        config = [*bah, "config", "--user", image.user]
        config += ["--entrypoint", json.dumps(list(image.entrypoint))] if image.entrypoint else []
        config += ["--cmd", json.dumps(list(image.cmd))] if image.cmd else []
        run_logged(
            [*config, "--label", f"org.opencontainers.image.ref.name={image.ref}", container],
            log,
            what,
        )
        run_logged([*bah, "commit", "--format", "oci", container, local_name(image)], log, what)
    finally:
        subprocess.run([*bah, "rm", container], capture_output=True, check=False)
    shutil.rmtree(staging, ignore_errors=True)
    fingerprint = image.fingerprint(lambda n: _sha256(binary(n)))
    _stamp(image).write_text(json.dumps({"fingerprint": fingerprint}) + "\n")
    return log


def push(image: Image, port: int, force: bool = False) -> bool:
    """Push `image` to the local registry unless it holds the tag (or `force`: the image
    was just rebuilt); True when pushed."""
    log = paths.cache_root() / "images" / f"{_slug(image)}.log"
    return push_named(local_name(image), image.ref, port, force, log)


def push_named(
    local: str, ref: str, port: int, force: bool, log: Path, compress: bool = True
) -> bool:
    """Push buildah's image `local` as `ref` (stored in the registry under the path
    `<registry>/<repository>`), unless the registry holds it and not `force`. Without
    `compress` the layers go as plain tar: for a large image on this machine's own
    registry, gzip on the way in and out costs more than the bytes do."""
    host, repository, tag = registry.ref_parts(ref)
    if not force and registry.has(port, host, repository, tag):
        return False
    dest = f"docker://127.0.0.1:{port}/{host}/{repository}:{tag}"
    cmd = [*command(), "push", "--tls-verify=false"]
    cmd += [] if compress else ["--disable-compression"]
    cmd += [local, dest]
    run_logged(cmd, log, f"pushing image {ref}")
    return True


def exists(name: str) -> bool:
    proc = subprocess.run([*command(), "inspect", "--type", "image", name], capture_output=True)
    return proc.returncode == 0


def image_id(name: str) -> str:
    proc = subprocess.run(
        [*command(), "inspect", "--type", "image", "--format", "{{.FromImageID}}", name],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise BuildError(f"image {name} is not in buildah's storage: {proc.stderr.strip()}")
    return proc.stdout.strip()


def image_size(name: str) -> str:
    """The image's size as `buildah images` shows it (its layers unpacked, e.g. 459 MB)."""
    proc = subprocess.run(
        [*command(), "images", "--json", name], capture_output=True, text=True, check=False
    )
    try:
        return str(json.loads(proc.stdout)[0]["size"])
    except (ValueError, IndexError, KeyError):
        raise BuildError(f"image {name} is not in buildah's storage") from None


def commit_rootfs(root: Path, name: str, log: Path, what: str) -> None:
    """An image FROM scratch holding the folder `root` as its filesystem."""
    bah = command()
    container = run_logged([*bah, "from", "scratch"], log, what)
    try:
        run_logged([*bah, "copy", container, f"{root}/", "/"], log, what)
        path = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        run_logged([*bah, "config", "--env", path, "--cmd", '["/bin/bash"]', container], log, what)
        run_logged([*bah, "commit", "--format", "oci", container, name], log, what)
    finally:
        subprocess.run([*bah, "rm", container], capture_output=True, check=False)
    prune(log, what)

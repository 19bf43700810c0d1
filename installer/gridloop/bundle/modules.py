"""A Go module's files, from the Go module proxy, without Go.

`gridloop bundle` reads Kueue's, KubeRay's and agent-sandbox's manifests from their Go
modules. A user's machine has no Go toolchain, so the module's zip is fetched the way
`go mod download` does it (`$GOPROXY/<escaped path>/@v/<version>.zip`, GOPROXY's
entries in order, default https://proxy.golang.org) and checked against the `sum:` that
versions.yaml pins: the go.sum hash (`h1:`, Go's dirhash), so a proxy cannot hand over
other files than the ones the version was released with. The unpacked module is cached
by version under the cache root, outside git.

The pure parts (path escaping, the proxy list, the hash) are separate from the fetch.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path, PurePosixPath

from gridloop import paths
from gridloop.errors import BuildError, Unfetchable
from gridloop.versions import Component

DEFAULT_PROXY = "https://proxy.golang.org"
TIMEOUT = 120.0  # seconds; the largest module zip here is a few MB
STAMP = ".complete"


def escape(module: str) -> str:
    """Go's module path escaping: each capital letter becomes `!` and its lower case."""
    return "".join(f"!{c.lower()}" if c.isupper() else c for c in module)


def proxies(goproxy: str | None) -> list[str]:
    """The proxy URLs of a GOPROXY value, in order; `direct` and `off` are Go's own
    (a VCS checkout, or nothing) and are skipped: without Go there is no VCS fetch."""
    value = goproxy if goproxy else DEFAULT_PROXY
    urls = [p.strip().rstrip("/") for p in value.replace("|", ",").split(",")]
    return [u for u in urls if u and u not in ("direct", "off")]


def zip_url(proxy: str, module: str, version: str) -> str:
    return f"{proxy}/{escape(module)}/@v/{version}.zip"


def h1(data: bytes) -> str:
    """The go.sum hash of a module zip (golang.org/x/mod/sumdb/dirhash Hash1): the
    SHA-256 of the lines "<sha256 hex>  <file name>\\n", sorted by name."""
    summary = hashlib.sha256()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = sorted(i.filename for i in archive.infolist() if not i.is_dir())
        for name in names:
            digest = hashlib.sha256(archive.read(name)).hexdigest()
            summary.update(f"{digest}  {name}\n".encode())
    return "h1:" + base64.b64encode(summary.digest()).decode()


def folder(comp: Component) -> Path:
    return paths.cache_root() / "modules" / f"{escape(comp.module)}@{comp.version}"


def module_dir(comp: Component) -> Path:
    """The unpacked module (cached by version), fetched and checked when not there."""
    where = folder(comp)
    if (where / STAMP).is_file():
        return where
    if not comp.sum:
        raise BuildError(
            f"{comp.name} {comp.version}: versions.yaml pins no `sum:` for {comp.module}, "
            "so its files cannot be checked"
        )
    data = _download(comp)
    got = h1(data)
    if got != comp.sum:
        raise BuildError(
            f"{comp.name} {comp.version}: the module proxy's {comp.module} zip hashes to "
            f"{got}, versions.yaml pins {comp.sum}: not unpacked"
        )
    _unpack(data, comp, where)
    return where


def _download(comp: Component) -> bytes:
    urls = [zip_url(p, comp.module, comp.version) for p in proxies(os.environ.get("GOPROXY"))]
    if not urls:
        raise BuildError(
            f"{comp.name} {comp.version}: GOPROXY={os.environ.get('GOPROXY')} names no "
            "module proxy; set GOPROXY to one, or pass --mirror DIR"
        )
    problems = []
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
                return bytes(response.read())
        except (urllib.error.URLError, OSError, ValueError) as err:
            problems.append(f"{url}: {getattr(err, 'reason', None) or err}")
    why = f"cannot download {comp.module} from the module proxy ({'; '.join(problems)})"
    raise Unfetchable(
        f"{comp.name} {comp.version}: {why}; put its manifests in DIR/{comp.name}/*.yaml "
        "and pass --mirror DIR",
        why,
    )


def _unpack(data: bytes, comp: Component, where: Path) -> None:
    """The zip's files under `where`, without the `<module>@<version>/` prefix every
    name carries; a name outside that prefix or with `..` is refused."""
    prefix = PurePosixPath(f"{comp.module}@{comp.version}")
    where.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".unpack-", dir=where.parent))
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                name = PurePosixPath(info.filename)
                if info.is_dir():
                    continue
                if prefix not in name.parents or ".." in name.parts:
                    raise BuildError(f"{comp.name} {comp.version}: bad file name {name} in the zip")
                target = work / name.relative_to(prefix)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(info))
        (work / STAMP).write_text(comp.sum + "\n")
        shutil.rmtree(where, ignore_errors=True)
        work.replace(where)
    finally:
        shutil.rmtree(work, ignore_errors=True)

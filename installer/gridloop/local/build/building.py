"""`gridloop local build`: build upstream binaries from Go modules into a cache.

Each recipe lands in `<cache>/<recipe>-<version>/bin/` (a recipe is named for its
component, or for what it builds from it: `kubernetes-node`, `pause`), with its build
log beside it and a `.complete` stamp written last. A component whose stamp
matches its recipe is never rebuilt, so a warm run takes seconds; a failed or
interrupted build leaves no stamp and is redone. Builds run one at a time: a
single Kubernetes binary peaks near 2 GB of memory while linking.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from gridloop import paths, versions
from gridloop.errors import BuildError
from gridloop.local.build.gomod import wrapper_for
from gridloop.local.build.overlays import PatchMismatch, apply_patch, overlay_document
from gridloop.local.build.recipes import RECIPES, Recipe, binary_names
from gridloop.versions import Component

STAMP = ".complete"
VERSION_FILE = "version"  # beside a C program's bin/: the version upstream's Makefile gives it
LOCAL_COPY = "upstream"  # the folder, inside a build's src/, holding a module to patch
MIN_GO = (1, 26)


@dataclass(frozen=True)
class Progress:
    component: str
    version: str
    binary: str
    status: str  # "cached" | "building" | "built"
    seconds: float = 0.0
    log: Path | None = None


Reporter = Callable[[Progress], None]


def recipe_dir(recipe: Recipe, comp: Component) -> Path:
    return paths.cache_root() / f"{recipe.name}-{comp.version}"


def _is_cached(recipe: Recipe, comp: Component) -> bool:
    folder = recipe_dir(recipe, comp)
    stamp = folder / STAMP
    if not stamp.is_file():
        return False
    try:
        recorded = json.loads(stamp.read_text()).get("fingerprint")
    except (OSError, ValueError):
        return False
    bins = [folder / "bin" / name for name in binary_names(recipe)]
    return bool(recorded == recipe.fingerprint(comp) and all(b.is_file() for b in bins))


def binary(name: str) -> Path:
    """The cached binary `name` (e.g. kube-apiserver), or a BuildError saying how to get it."""
    for recipe in RECIPES:
        if name in binary_names(recipe):
            comp = versions.get(recipe.component)
            path = recipe_dir(recipe, comp) / "bin" / name
            if _is_cached(recipe, comp):
                return path
            raise BuildError(f"{name} {comp.version} is not built yet: run `gridloop local build`")
    raise KeyError(name)


def cached(name: str) -> Path | None:
    """The cached binary `name`, or None when it is not built (yet)."""
    try:
        return binary(name)
    except BuildError:
        return None


def missing_components() -> list[str]:
    """The recipes (by name) whose binaries are not cached yet."""
    return [r.name for r in RECIPES if not _is_cached(r, versions.get(r.component))]


def check_go(for_what: str) -> str:
    """Fail with one line unless a Go toolchain new enough is on PATH; return `go`'s path."""
    go = shutil.which("go")
    want = ".".join(map(str, MIN_GO))
    if go is None:
        raise BuildError(
            f"go toolchain not found on PATH: needed to build {for_what} (install Go >= {want})"
        )
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False)
    have = out.stdout.strip() or "?"
    m = re.match(r"go(\d+)\.(\d+)", have)
    if not m or (int(m.group(1)), int(m.group(2))) < MIN_GO:
        raise BuildError(f"go toolchain {have} is too old to build {for_what}: need Go >= {want}")
    return go


def planned(components: Iterable[str] | None, mirror: bool) -> list[Recipe]:
    """The recipes `build` goes through: those named (a component names all of its
    recipes), or every one, less those built from a release archive unless a mirror is
    given."""
    every = [r.name for r in RECIPES if not r.from_mirror or mirror]
    wanted = list(components) if components is not None else every
    unknown = sorted(set(wanted) - {n for r in RECIPES for n in (r.name, r.component)})
    if unknown:
        known = ", ".join(r.name for r in RECIPES)
        raise BuildError(f"nothing to build called {', '.join(unknown)} (known: {known})")
    return [r for r in RECIPES if r.name in wanted or r.component in wanted]


def build(
    components: Iterable[str] | None = None,
    report: Reporter = lambda p: None,
    mirror: Path | None = None,
) -> None:
    """Build every recipe (or those named: a component names all of its recipes) that is
    not already cached. A recipe built from a release archive (KAITO's) is built when it
    is named, or with every other one when `mirror` (the folder holding the archive) is
    given; named without a mirror, it is refused in one line unless it is cached."""
    for recipe in planned(components, mirror is not None):
        comp = versions.get(recipe.component)
        if _is_cached(recipe, comp):
            for name in binary_names(recipe):
                report(Progress(comp.name, comp.version, name, "cached"))
        elif recipe.from_mirror:
            archive = _mirror_archive(comp, mirror)
            _build_from_archive(
                check_go(f"{comp.name} {comp.version}"), recipe, comp, archive, report
            )
        elif recipe.debian_files:
            _unpack_debian(recipe, comp, report)
        elif recipe.c_programs:
            _compile_c(check_go(f"{comp.name} {comp.version}"), recipe, comp, report)
        else:
            _build_component(check_go(f"{comp.name} {comp.version}"), recipe, comp, report)
        link_tools(recipe, comp)


def link_tools(recipe: Recipe, comp: Component) -> None:
    """Link the recipe's user-facing tools (paths.TOOLS: helm, kubectl) into the tools
    folder, where commands find them when PATH has none (gridloop.toolchain)."""
    for name in set(binary_names(recipe)) & set(paths.TOOLS):
        link = paths.tools_dir() / name
        link.parent.mkdir(parents=True, exist_ok=True)
        fresh = link.with_name(f".{name}.new")
        fresh.unlink(missing_ok=True)
        fresh.symlink_to(recipe_dir(recipe, comp) / "bin" / name)
        fresh.replace(link)  # atomic: a command running meanwhile sees one or the other


# The compiler and linker are Go programs: with the collector running at a quarter of
# the default frequency a cold build of helm3 took 67 and 74 s against 87 and 89 s
# (alternated on the 2-core machine, 2026-12-03; docs/local-cluster.md); the memory
# limit makes the collector run anyway before one process takes more than a quarter of
# the machine's memory. The binaries are the same either way. A GOGC or GOMEMLIMIT the
# user set is kept.
GOGC = "400"
# `-ldflags -w` drops the debug information at link time, so the compiler need not make
# it either: the binaries are the same, a cold compile a little shorter (kube-apiserver
# from an empty GOCACHE: 200 s against 208 s, its cache 1.8 GB against 2.1 GB, 2026-12-06)
NO_DWARF = "-gcflags=all=-dwarf=false"


def _go_env(folder: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        CGO_ENABLED="0",
        GOFLAGS="-mod=mod -buildvcs=false",
        # never fetch another toolchain: use the one on PATH or fail clearly
        GOTOOLCHAIN="local",
        GOWORK="off",
    )
    env.setdefault("GOGC", GOGC)
    env.setdefault("GOMEMLIMIT", f"{_memory_bytes() // 4 // 2**20}MiB")
    return env


def _memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _run(cmd: list[str], cwd: Path, log: Path, env: dict[str, str], what: str) -> str:
    with log.open("a") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=fh, text=True)
        fh.write(proc.stdout)
    if proc.returncode != 0:
        raise BuildError(f"{what} failed (exit {proc.returncode}): see {log}")
    return proc.stdout


def _build_component(go: str, recipe: Recipe, comp: Component, report: Reporter) -> None:
    folder = recipe_dir(recipe, comp)
    src, bindir, log = folder / "src", folder / "bin", folder / "build.log"
    (folder / STAMP).unlink(missing_ok=True)
    src.mkdir(parents=True, exist_ok=True)
    bindir.mkdir(parents=True, exist_ok=True)
    log.write_text(f"gridloop local build: {recipe.name} {comp.version} ({comp.module})\n")
    env = _go_env(folder)
    if recipe.experiments:
        env["GOEXPERIMENT"] = ",".join(recipe.experiments)
    what = f"building {comp.name} {comp.version}"

    info = _download(go, comp, src, log, env, what)
    upstream = Path(info["GoMod"]).read_text()
    module_dir = Path(info["Dir"])
    if recipe.patches:
        module_dir = _copy_module(module_dir, src / LOCAL_COPY)
    wrapper = wrapper_for(
        path=f"gridloop.local/build/{comp.name}",
        module=comp.module,
        version=comp.version,
        upstream_gomod=upstream,
        tools=recipe.binaries.values(),
        pin_version=lambda module: recipe.pin(comp, module),
        local_copy=f"./{LOCAL_COPY}" if recipe.patches else None,
    )
    (src / "go.mod").write_text(wrapper.render())
    (src / "go.sum").unlink(missing_ok=True)
    for name, pkg in recipe.shims.items():
        shim = src / "cmd" / name
        shim.mkdir(parents=True, exist_ok=True)
        (shim / "main.go").write_text(_shim_source(pkg))
    for name, source in recipe.mains.items():
        main = src / "cmd" / name
        main.mkdir(parents=True, exist_ok=True)
        (main / "main.go").write_text(source)
    _run([go, "mod", "tidy"], src, log, env, f"{what}: resolving modules")
    overlay = _write_overlay(recipe, comp, module_dir, folder)

    targets = {name: f"./cmd/{name}" for name in [*recipe.shims, *recipe.mains]} | recipe.binaries
    _go_build(go, recipe, comp, targets, src, env, report, overlay)
    _stamp(folder, recipe, comp)


def _go_build(
    go: str,
    recipe: Recipe,
    comp: Component,
    targets: dict[str, str],
    cwd: Path,
    env: dict[str, str],
    report: Reporter,
    overlay: Path | None = None,
) -> None:
    """`go build` of each target (binary name -> package) in `cwd` into the recipe's bin/,
    with upstream's release flags, each written whole or not at all."""
    folder = recipe_dir(recipe, comp)
    bindir, log = folder / "bin", folder / "build.log"
    what = f"building {comp.name} {comp.version}"
    for name, pkg in targets.items():
        report(Progress(comp.name, comp.version, name, "building", log=log))
        start = time.monotonic()
        tmp = bindir / f".{name}.tmp"
        cmd = [go, "build", "-trimpath", NO_DWARF, "-o", str(tmp)]
        if recipe.tags:
            cmd += ["-tags", ",".join(recipe.tags)]
        if overlay:
            cmd += ["-overlay", str(overlay)]
        cmd += ["-ldflags", " ".join(["-s", "-w", *recipe.ldflags(comp)]), pkg]
        _run(cmd, cwd, log, env, f"{what}: {name}")
        tmp.replace(bindir / name)
        report(Progress(comp.name, comp.version, name, "built", time.monotonic() - start, log))


def _mirror_archive(comp: Component, mirror: Path | None) -> Path:
    """The component's release archive in `mirror`, checked against its pinned sha256."""
    from gridloop.bundle import fetching

    archive = fetching.mirror_archive(mirror, comp) if mirror is not None else None
    if archive is None:
        where = f"{mirror} has no {comp.mirror_name}" if mirror else "no --mirror given"
        raise BuildError(
            f"{comp.name} {comp.version} builds from its release archive {comp.mirror_name}, "
            f"which no registry here serves: {where} (pass --mirror DIR, the folder holding it)"
        )
    return archive


def _build_from_archive(
    go: str, recipe: Recipe, comp: Component, archive: Path, report: Reporter
) -> None:
    """The recipe's binaries from the Go source in the release archive: unpacked (tarfile's
    data filter: no link or path out of it), then `go build` with the source's own go.mod
    and go.sum (-mod=readonly: a module whose hash differs is refused, nothing is added)."""
    from gridloop.bundle.fetching import unpack_folder

    folder = recipe_dir(recipe, comp)
    src, bindir, log = folder / "src", folder / "bin", folder / "build.log"
    (folder / STAMP).unlink(missing_ok=True)
    bindir.mkdir(parents=True, exist_ok=True)
    log.write_text(f"gridloop local build: {recipe.name} {comp.version} (from {archive})\n")
    what = f"building {comp.name} {comp.version}"
    inside = comp.mirror_source_path.strip("/")
    root = unpack_folder(archive, inside, src, what)
    if not (root / "go.mod").is_file():
        raise BuildError(f"{what}: {archive} has no Go source at {inside}/ (no go.mod)")
    env = _go_env(folder)
    env["GOFLAGS"] = "-mod=readonly -buildvcs=false"
    _go_build(go, recipe, comp, recipe.binaries, root, env, report)
    for name, path in recipe.source_files.items():
        shutil.copyfile(root / path, bindir / name)
    shutil.rmtree(src, ignore_errors=True)  # the source is the archive's; the binary is what stays
    _stamp(folder, recipe, comp)


def _stamp(folder: Path, recipe: Recipe, comp: Component) -> None:
    (folder / STAMP).write_text(
        json.dumps({"fingerprint": recipe.fingerprint(comp), "built": time.time()}) + "\n"
    )


def _compile_c(go: str, recipe: Recipe, comp: Component, report: Reporter) -> None:
    """C programs of a Go module (the pause program): the module from the Go module proxy,
    compiled with the host's gcc and the flags of upstream's Makefile."""
    folder = recipe_dir(recipe, comp)
    bindir, log = folder / "bin", folder / "build.log"
    (folder / STAMP).unlink(missing_ok=True)
    bindir.mkdir(parents=True, exist_ok=True)
    log.write_text(f"gridloop local build: {recipe.name} {comp.version} ({comp.module})\n")
    gcc = shutil.which("gcc")
    if gcc is None:
        raise BuildError(
            f"gcc not found on PATH: needed to build {recipe.name} (apt-get install gcc)"
        )
    env, what = _go_env(folder), f"building {recipe.name} {comp.version}"
    info = _download(go, comp, folder, log, env, what)
    version = pause_version(Path(info["Dir"]))
    (folder / VERSION_FILE).write_text(version + "\n")
    for name, source in recipe.c_programs.items():
        report(Progress(recipe.name, comp.version, name, "building", log=log))
        start, tmp = time.monotonic(), bindir / f".{name}.tmp"
        flags = [*recipe.cflags(comp), f"-DVERSION=v{version}"]
        _run([gcc, *flags, "-o", str(tmp), str(Path(info["Dir"]) / source)], folder, log, env, what)
        tmp.replace(bindir / name)
        report(Progress(recipe.name, comp.version, name, "built", time.monotonic() - start, log))
    _stamp(folder, recipe, comp)


def built_version(name: str) -> str:
    """The version a C program's recipe recorded at build time (the pause image's tag)."""
    from gridloop.local.build.recipes import recipe_for

    recipe = recipe_for(name)
    folder = recipe_dir(recipe, versions.get(recipe.component))
    try:
        return (folder / VERSION_FILE).read_text().strip()
    except OSError as err:
        raise BuildError(f"{name} is not built yet: run `gridloop local build`") from err


def pause_version(module_dir: Path) -> str:
    """The pause image's version, the `TAG ?=` of the module's build/pause/Makefile."""
    from gridloop.local.build.recipes import PAUSE_MAKEFILE

    text = (module_dir / PAUSE_MAKEFILE).read_text()
    m = re.search(r"^TAG\s*\?=\s*(\S+)", text, re.M)
    if not m:
        raise BuildError(f"{PAUSE_MAKEFILE}: no `TAG ?=` line: update recipes.py for this version")
    return m.group(1)


def _download(
    go: str, comp: Component, cwd: Path, log: Path, env: dict[str, str], what: str
) -> dict[str, str]:
    """`go mod download` of the pinned module: its folder (`Dir`) and go.mod (`GoMod`)."""
    cmd = [go, "mod", "download", "-json", f"{comp.module}@{comp.version}"]
    found: dict[str, str] = json.loads(
        _run(cmd, cwd, log, env, f"{what}: downloading {comp.module}")
    )
    return found


def _copy_module(module_dir: Path, dest: Path) -> Path:
    """A writable copy of a module from Go's cache, left as upstream ships it: the
    patches go in through `-overlay`, which Go refuses for files in its module cache."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(module_dir, dest, copy_function=shutil.copyfile)
    return dest


def _write_overlay(recipe: Recipe, comp: Component, module_dir: Path, folder: Path) -> Path | None:
    """Write the recipe's patched files and the `-overlay` file into the cache (patches.py)."""
    if not recipe.patches:
        return None
    edited = folder / "overlay"
    shutil.rmtree(edited, ignore_errors=True)
    replace: dict[str, str] = {}
    for patch in recipe.patches:
        upstream = module_dir / patch.file
        key = str(upstream)
        before = replace.get(key)
        if before is not None:
            original: str | None = Path(before).read_text()
        else:
            original = upstream.read_text() if upstream.is_file() else None
        try:
            text = apply_patch(patch, original)
        except PatchMismatch as err:
            raise BuildError(
                f"building {comp.name} {comp.version}: {err}; update the patch in "
                "installer/gridloop/local/build/recipes.py for this version"
            ) from err
        copy = edited / patch.file
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(text)
        replace[key] = str(copy)
    doc = folder / "overlay.json"
    doc.write_text(overlay_document(replace))
    return doc


def _shim_source(pkg: str) -> str:
    return (
        "// Generated by gridloop local build: the upstream module ships its\n"
        "// entrypoint as a package, not as a main package.\n"
        "package main\n\n"
        f'import (\n\t"os"\n\n\tentry "{pkg}"\n)\n\n'
        "func main() { entry.Main(os.Args) }\n"
    )


def _unpack_debian(recipe: Recipe, comp: Component, report: Reporter) -> None:
    """`apt-get download` the pinned package and unpack its binaries: no install, no service."""
    folder = recipe_dir(recipe, comp)
    src, bindir, log = folder / "src", folder / "bin", folder / "build.log"
    (folder / STAMP).unlink(missing_ok=True)
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    bindir.mkdir(parents=True, exist_ok=True)
    log.write_text(f"gridloop local build: {comp.name} {comp.version} (Debian {comp.debian})\n")
    what = f"fetching {comp.name} {comp.version}"
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise BuildError(
                f"{tool} not found: {comp.name} comes from Debian's {comp.debian} package"
            )
    report(Progress(comp.name, comp.version, comp.debian, "building", log=log))
    start, env = time.monotonic(), dict(os.environ)
    download = ["apt-get", "download", f"{comp.debian}={comp.version}"]
    try:
        _run(download, src, log, env, what)
    except BuildError:
        if os.geteuid() != 0:
            raise BuildError(
                f"{what} failed: the package lists may be missing; run `sudo apt-get update` "
                f"(log: {log})"
            ) from None
        _run(["apt-get", "update"], src, log, env, f"{what}: apt-get update")
        _run(download, src, log, env, what)
    deb = next(src.glob(f"{comp.debian}_*.deb"))
    _run(["dpkg-deb", "-x", str(deb), str(src / "root")], src, log, env, f"{what}: unpacking")
    for name, inside in recipe.debian_files.items():
        shutil.copy2(src / "root" / inside, bindir / name)
    deb.unlink()
    report(Progress(comp.name, comp.version, comp.debian, "built", time.monotonic() - start, log))
    _stamp(folder, recipe, comp)

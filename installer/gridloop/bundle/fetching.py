"""Getting an upstream component's manifests as the upstream tools render them.

- a Go module (Kueue, KubeRay): its zip from the Go module proxy, checked against the
  go.sum hash versions.yaml pins (modules.py: no Go needed), then `kubectl kustomize`
  on its kustomize base with the user's kubectl (gridloop.toolchain);
- a Go module's release files (agent-sandbox): the same download, then the
  files its release script concatenates, in that order;
- a release file: downloaded from the URL pinned in versions.yaml;
- a release chart (KAITO): downloaded once versions.yaml pins its sha256 and checked
  against it, or its source release read from a mirror folder (`--mirror DIR` holding
  the archive versions.yaml names, checked against its sha256), then `helm template`
  with the user's helm;
- a mirror folder (`--mirror DIR`): `DIR/<component>/*.yaml`, read as they are.

Every failure is one line naming the component and what to do. The release
downloads cannot be exercised on a machine without internet access; the Go
module path goes through the Go module proxy, which such machines may reach.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

from gridloop import toolchain
from gridloop.bundle import caching, modules
from gridloop.bundle.sources import Kind, Source
from gridloop.errors import BuildError, GridloopError, Unfetchable, UsageError
from gridloop.versions import Component

DOWNLOAD_TIMEOUT = 60.0  # seconds; a release asset is a few MB at most
LOG = "render.log"


def label(comp: Component) -> str:
    return f"{comp.name} {comp.version}"


def render(source: Source, comp: Component, archive: Path | None = None) -> str:
    """The upstream rendering of `comp` (not cached here: see caching.py); a release
    chart from `archive` (mirror_archive's, checked) when there is one."""
    work = caching.folder(comp)
    work.mkdir(parents=True, exist_ok=True)
    log = work / LOG
    log.write_text(f"gridloop bundle: rendering {label(comp)} ({source.kind.value})\n")
    if source.kind is Kind.GO_MODULE:
        return _render_go_module(source, comp, work, log)
    if source.kind is Kind.GO_MODULE_FILES:
        return _concatenate_module_files(source, comp, work, log)
    if archive is not None and source.kind is Kind.HELM_CHART:
        return _render_chart(source, comp, _chart_from(comp, archive, work), work, log)
    data = download(comp)
    if source.kind is Kind.YAML:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise BuildError(f"{label(comp)}: {comp.release_url} is not UTF-8 text") from err
    chart = work / "chart.tgz"
    chart.write_bytes(data)
    return _render_chart(source, comp, chart, work, log)


def mirror_files(mirror: Path, component: str) -> list[Path]:
    """`mirror/<component>/*.yaml` (and *.yml), sorted; empty when there are none."""
    folder = mirror / component
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def mirror_archive(mirror: Path, comp: Component) -> Path | None:
    """`mirror/<comp.mirror_name>` when it is there and its sha256 is the pinned one; None
    when it is not there; a changed archive is refused, naming both hashes (never left
    out: a mirror that holds the wrong bytes is not a mirror that lacks them)."""
    if not comp.mirror_name:
        return None
    path = mirror / comp.mirror_name
    if not path.is_file():
        return None
    got = sha256_of(path)
    if got != comp.mirror_sha256:
        raise UsageError(
            f"--mirror {path}: sha256 {got}, but versions.yaml pins {comp.mirror_sha256 or 'none'}"
            f" for {label(comp)}: refused (a changed or damaged archive)"
        )
    return path


def unpack_folder(archive: Path, inside: str, out: Path, what: str) -> Path:
    """`out/<inside>`: only that folder of the archive unpacked into a fresh `out`, with no
    link or path leading out of it (tarfile's data filter)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    try:
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(f"{inside}/")]
            tar.extractall(out, members=members, filter="data")
    except (tarfile.TarError, OSError) as err:
        raise BuildError(f"{what}: cannot read {archive}: {err}") from err
    return out / inside


def _chart_from(comp: Component, archive: Path, work: Path) -> Path:
    """The chart's folder out of the checked source archive (only that folder, no link
    and no path outside it: tarfile's data filter)."""
    inside = comp.mirror_chart_path.strip("/")
    chart = unpack_folder(archive, inside, work / "mirror-chart", label(comp))
    if not (chart / "Chart.yaml").is_file():
        raise BuildError(f"{label(comp)}: {archive} has no chart at {inside}/")
    return chart


def download(comp: Component) -> bytes:
    # Not exercised by the tests: the machines they run on reach no release host.
    url = comp.release_url
    if not url:
        raise BuildError(f"{label(comp)}: versions.yaml gives no `release` URL to download it from")
    if not comp.sha256:
        why = f"versions.yaml pins no sha256 for {url}, so it is not downloaded"
        raise Unfetchable(f"{label(comp)}: {why}; {_instead(comp)}", why)
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as response:
            data = bytes(response.read())
    except (urllib.error.URLError, OSError, ValueError) as err:
        why = f"cannot download {url} ({getattr(err, 'reason', None) or err})"
        raise Unfetchable(f"{label(comp)}: {why}; {_instead(comp)}", why) from err
    got = hashlib.sha256(data).hexdigest()
    if got != comp.sha256:
        raise BuildError(
            f"{label(comp)}: {url} has sha256 {got}, but versions.yaml pins {comp.sha256}: refused"
        )
    return data


def _instead(comp: Component) -> str:
    held = f"its release archive {comp.mirror_name} or " if comp.mirror_name else ""
    return (
        f"pass --mirror DIR with {held}its manifests in DIR/{comp.name}/*.yaml, "
        f"or leave it out with --skip {comp.name}"
    )


def _run(cmd: list[str], cwd: Path, log: Path, env: dict[str, str] | None, what: str) -> str:
    with log.open("a") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.run(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=fh, text=True, check=False
        )
    if proc.returncode != 0:
        raise BuildError(f"{what} failed (exit {proc.returncode}): {_last_line(log)} (log: {log})")
    return proc.stdout


def _last_line(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def _tool(name: str, comp: Component) -> str:
    try:
        return str(toolchain.helm() if name == "helm" else toolchain.kubectl())
    except GridloopError as err:
        raise BuildError(f"{label(comp)}: rendering it needs {name}: {err}") from err


def _module_dir(comp: Component, work: Path, log: Path) -> Path:
    """The pinned module's files, from the module proxy (cached by version)."""
    with log.open("a") as fh:
        fh.write(f"\nmodule {comp.module}@{comp.version} ({comp.sum}) in {modules.folder(comp)}\n")
    return modules.module_dir(comp)


def _concatenate_module_files(source: Source, comp: Component, work: Path, log: Path) -> str:
    module_dir = _module_dir(comp, work, log)
    parts = []
    for name in source.module_files:
        try:
            text = (module_dir / name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise BuildError(f"{label(comp)}: no readable {name} in {comp.module}: {err}") from err
        # a `---` before each file keeps its first document apart from the last one before
        parts.append(f"---\n# Source: {name}\n{text.rstrip()}\n")
    return "".join(parts)


def _render_go_module(source: Source, comp: Component, work: Path, log: Path) -> str:
    kubectl = _tool("kubectl", comp)
    module_dir = _module_dir(comp, work, log)
    base = module_dir / source.kustomize
    if not (base / "kustomization.yaml").is_file():
        raise BuildError(f"{label(comp)}: no kustomize base at {source.kustomize} in {comp.module}")
    return _run(
        [kubectl, "kustomize", str(base)],
        work,
        log,
        None,
        f"{label(comp)}: kubectl kustomize {source.kustomize}",
    )


def _render_chart(source: Source, comp: Component, chart: Path, work: Path, log: Path) -> str:
    """`helm template` of a chart archive or folder (a mirror's: the tests render KAITO's)."""
    helm = _tool("helm", comp)
    home = work / "helm-home"
    shutil.rmtree(home, ignore_errors=True)
    env = {
        "PATH": "/usr/bin:/bin",
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    cmd = [helm, "template", source.chart_release, str(chart), "--include-crds"]
    cmd += ["--namespace", source.chart_namespace]
    for setting, _why in source.chart_values:
        cmd += ["--set", setting]
    return _run(cmd, work, log, env, f"{label(comp)}: helm template")

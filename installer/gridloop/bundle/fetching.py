"""Getting an upstream component's manifests as the upstream tools render them.

- a Go module (Kueue, KubeRay): its zip from the Go module proxy, checked against the
  go.sum hash versions.yaml pins (modules.py: no Go needed), then `kubectl kustomize`
  on its kustomize base with the user's kubectl (gridloop.toolchain);
- a Go module's release files (agent-sandbox): the same download, then the
  files its release script concatenates, in that order;
- a release file: downloaded from the URL pinned in versions.yaml;
- a release chart (KAITO): downloaded, then `helm template` with the user's helm;
- a mirror folder (`--mirror DIR`): `DIR/<component>/*.yaml`, read as they are.

Every failure is one line naming the component and what to do. The release
downloads cannot be exercised on a machine without internet access; the Go
module path goes through the Go module proxy, which such machines may reach.
"""

from __future__ import annotations

import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from gridloop import toolchain
from gridloop.bundle import caching, modules
from gridloop.bundle.sources import Kind, Source
from gridloop.errors import BuildError, GridloopError, Unfetchable
from gridloop.versions import Component

DOWNLOAD_TIMEOUT = 60.0  # seconds; a release asset is a few MB at most
LOG = "render.log"


def label(comp: Component) -> str:
    return f"{comp.name} {comp.version}"


def render(source: Source, comp: Component) -> str:
    """The upstream rendering of `comp` (not cached here: see caching.py)."""
    work = caching.folder(comp)
    work.mkdir(parents=True, exist_ok=True)
    log = work / LOG
    log.write_text(f"gridloop bundle: rendering {label(comp)} ({source.kind.value})\n")
    if source.kind is Kind.GO_MODULE:
        return _render_go_module(source, comp, work, log)
    if source.kind is Kind.GO_MODULE_FILES:
        return _concatenate_module_files(source, comp, work, log)
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


def download(comp: Component) -> bytes:
    # Not exercised by the tests: the machines they run on reach no release host.
    url = comp.release_url
    if not url:
        raise BuildError(f"{label(comp)}: versions.yaml gives no `release` URL to download it from")
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as response:
            return bytes(response.read())
    except (urllib.error.URLError, OSError, ValueError) as err:
        why = f"cannot download {url} ({getattr(err, 'reason', None) or err})"
        raise Unfetchable(
            f"{label(comp)}: {why}; put its manifests in DIR/{comp.name}/*.yaml and pass "
            f"--mirror DIR, or leave it out with --skip {comp.name}",
            why,
        ) from err


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
    # Not exercised by the tests: the chart comes from a download (see download()).
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
    return _run(cmd, work, log, env, f"{label(comp)}: helm template")

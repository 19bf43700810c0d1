"""KAITO in the bundle from a mirror of its release: the source archive (KAITO v0.12.0,
github.com/kaito-project/kaito) read from a folder, checked against the sha256
versions.yaml pins, its chart `helm template`d; a changed archive is refused naming both
hashes, and a download without a pinned hash is refused naming the ways around it.

The archive is the project's mirror (../shared/upstream/, or $GRIDLOOP_UPSTREAM_MIRROR);
without it these tests fail, never skip. helm is the one `gridloop local build` makes.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

import upstream_mirror
from gridloop import versions
from gridloop.local.build import building

pytestmark = pytest.mark.needs_binaries("helm")
ROOT = Path(__file__).resolve().parents[2]
OTHERS = [flag for c in ("kueue", "kuberay", "agent-sandbox") for flag in ("--skip", c)]


def env(tmp_path: Path) -> dict[str, str]:
    """A private rendering cache, and the built helm first on PATH (as a user's own)."""
    helm = building.binary("helm").parent
    return dict(
        os.environ, GRIDLOOP_CACHE=str(tmp_path / "cache"), PATH=f"{helm}:{os.environ['PATH']}"
    )


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def test_the_mirrors_archive_is_checked_and_kaitos_chart_is_bundled(tmp_path, gridloop):
    kaito = versions.get("kaito")
    out = tmp_path / "dist"

    done = gridloop(
        "bundle", "--mirror", str(upstream_mirror.folder()), "--out", str(out), *OTHERS,
        env=env(tmp_path),
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert f"kaito {kaito.version}                mirror (" in done.stdout
    crds = [d for d in yaml.safe_load_all((out / "gridloop/crds/kaito.yaml").read_text()) if d]
    assert "workspaces.kaito.sh" in {d["metadata"]["name"] for d in crds}
    controller = f"mcr.microsoft.com/aks/kaito/workspace:{kaito.bare}"
    assert (out / "images.txt").read_text().split().count(controller) == 1
    # rendered for nodes the user brings: KAITO provisions none, and the Azure CSI driver,
    # NVIDIA's device plugin and GPU feature discovery upstream's defaults add are not in it
    docs = [
        d for d in yaml.safe_load_all((out / "gridloop/upstream/kaito/kaito.yaml").read_text()) if d
    ]
    kinds = sorted({d["kind"] for d in docs})
    assert "DaemonSet" not in kinds and "CSIDriver" not in kinds, kinds
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == controller
    assert "--node-provisioner=byo" in container["args"]
    # rendered from the mirror, never cached: a bundle without it must not find it there
    assert not list((tmp_path / "cache").rglob("rendered.yaml"))


def test_a_changed_archive_is_refused_naming_both_hashes_and_nothing_is_written(tmp_path, gridloop):
    kaito = versions.get("kaito")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    changed = mirror / kaito.mirror_name
    shutil.copyfile(upstream_mirror.folder() / kaito.mirror_name, changed)
    with changed.open("ab") as fh:
        fh.write(b"\0")
    out = tmp_path / "dist"

    done = gridloop(
        "bundle", "--mirror", str(mirror), "--out", str(out), *OTHERS, env=env(tmp_path)
    )

    assert done.returncode == 2
    line = one_line(done.stderr)
    assert line.startswith(f"error: --mirror {changed}: sha256 ")
    assert line.endswith(
        f"but versions.yaml pins {kaito.mirror_sha256} for kaito {kaito.version}: refused "
        "(a changed or damaged archive)"
    )
    assert not out.exists()


def test_without_the_mirror_kaitos_chart_is_not_downloaded_unchecked(tmp_path, gridloop):
    kaito = versions.get("kaito")
    assert kaito.sha256 == ""  # no machine of the project can read the published chart's

    done = gridloop("bundle", "--out", str(tmp_path / "dist"), *OTHERS, env=env(tmp_path))

    assert done.returncode == 1
    assert one_line(done.stderr) == (
        f"error: kaito {kaito.version}: versions.yaml pins no sha256 for {kaito.release_url}, "
        f"so it is not downloaded; pass --mirror DIR with its release archive "
        f"{kaito.mirror_name} or its manifests in DIR/kaito/*.yaml, or leave it out with "
        "--skip kaito"
    )


def test_render_and_install_assemble_with_the_mirror_when_asked(tmp_path, monkeypatch):
    """`--mirror` on render, install, doctor and upgrade: the bundle they assemble has
    what the mirror holds, in a cache entry of its own (the others' manifests are the
    bundle tests' stand-ins, KAITO's the real archive)."""
    from test_bundle_command import _mirror

    from gridloop.bundle import assembling, charting
    from gridloop.chart import locating

    with_helm = env(tmp_path)["PATH"]  # the built helm, found before the cache moves
    monkeypatch.setenv("GRIDLOOP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", with_helm)
    versions.load.cache_clear()
    kaito = versions.get("kaito")
    mirror = _mirror(tmp_path / "mirror", ("kueue", "kuberay", "agent-sandbox"))
    (mirror / kaito.mirror_name).symlink_to(upstream_mirror.folder() / kaito.mirror_name)

    chart = locating.chart_folder(None, mirror=mirror)

    assert (chart / "upstream" / "kaito" / "kaito.yaml").is_file()
    repo = charting.REPO_CHART
    assert assembling.key(repo, mirror) != assembling.key(repo)  # never taken for the other


def test_mirror_with_a_chart_given_is_refused_in_one_line(tmp_path, gridloop):
    done = gridloop(
        "render", "--chart", str(tmp_path), "--mirror", str(tmp_path), env=env(tmp_path)
    )

    assert done.returncode == 2
    assert one_line(done.stderr) == (
        "error: --mirror and --chart: --mirror is for the bundle gridloop assembles itself; "
        "a chart given is used as it is"
    )

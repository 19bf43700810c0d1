"""The container nodes' builds: the kubelet beside the control plane, the pause program and
its version, and the patch that lets gVisor's shim start without CAP_SYS_RESOURCE.

The tests marked "against the pinned module" read it from Go's module cache, and skip
only when no build has downloaded it yet.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest

from gridloop import versions
from gridloop.errors import BuildError
from gridloop.local.build import building
from gridloop.local.build.overlays import SourcePatch, apply_patch
from gridloop.local.build.recipes import (
    COREDNS_MAIN,
    COREDNS_PLUGINS,
    GVISOR_PATCHES,
    PAUSE_MAKEFILE,
    PAUSE_SOURCE,
    recipe_for,
)
from gridloop.local.container import addons


def module_dir(component: str) -> Path | None:
    comp = versions.get(component)
    root = Path(os.environ.get("GOMODCACHE") or Path.home() / "go" / "pkg" / "mod")
    folder = root / f"{comp.module}@{comp.version}"
    return folder if folder.is_dir() else None


def pinned(component: str) -> Path:
    folder = module_dir(component)
    if folder is None:
        comp = versions.get(component)
        pytest.skip(f"{comp.module}@{comp.version} is not in Go's module cache yet")
    return folder


# --- the kubelet and kube-proxy: the control plane's module, cached apart ---


def test_the_node_binaries_build_like_the_control_plane_in_a_cache_of_their_own() -> None:
    node, control = recipe_for("kubernetes-node"), recipe_for("kubernetes")
    comp = versions.get("kubernetes")

    assert set(node.binaries) == {"kubelet", "kube-proxy"}
    assert node.binaries["kubelet"] == "k8s.io/kubernetes/cmd/kubelet"
    assert (node.tags, node.ldflags(comp)) == (control.tags, control.ldflags(comp))
    assert node.pin(comp, "k8s.io/api") == control.pin(comp, "k8s.io/api")
    assert not set(node.binaries) & set(control.binaries)  # adding them rebuilds nothing


# --- the pause program ---


def test_pause_is_compiled_from_the_kubernetes_module_statically() -> None:
    recipe = recipe_for("pause")
    comp = versions.get("kubernetes")

    assert recipe.component == "kubernetes"
    assert recipe.c_programs == {"pause": PAUSE_SOURCE}
    assert "-static" in recipe.cflags(comp)  # a FROM scratch image has no libc
    assert recipe.binaries == {}


def test_changed_compiler_flags_rebuild_pause() -> None:
    recipe = recipe_for("pause")
    comp = versions.get("kubernetes")
    other = dataclasses.replace(recipe, cflags=lambda comp: ["-O2", "-static"])

    assert other.fingerprint(comp) != recipe.fingerprint(comp)


@pytest.mark.parametrize(
    ("makefile", "version"),
    [
        ("TAG ?= 3.10.1\n", "3.10.1"),
        ("# the image\nREGISTRY ?= registry.k8s.io\nTAG ?= 3.10.1\nREV = $(shell x)\n", "3.10.1"),
        ("TAG?=3.11\n", "3.11"),
    ],
    ids=["alone", "among-other-settings", "no-spaces"],
)
def test_the_pause_version_is_the_tag_of_its_makefile(
    tmp_path: Path, makefile: str, version: str
) -> None:
    (tmp_path / PAUSE_MAKEFILE).parent.mkdir(parents=True)
    (tmp_path / PAUSE_MAKEFILE).write_text(makefile)

    assert building.pause_version(tmp_path) == version


@pytest.mark.parametrize(
    "makefile",
    ["REGISTRY ?= registry.k8s.io\n", "# TAG ?= 3.10.1\n", "OTHER_TAG ?= 3.10.1\n"],
    ids=["no-tag", "commented-out", "another-variable"],
)
def test_a_makefile_without_a_tag_line_is_a_build_error_naming_it(
    tmp_path: Path, makefile: str
) -> None:
    (tmp_path / PAUSE_MAKEFILE).parent.mkdir(parents=True)
    (tmp_path / PAUSE_MAKEFILE).write_text(makefile)

    with pytest.raises(BuildError, match=r"build/pause/Makefile: no `TAG \?=` line"):
        building.pause_version(tmp_path)


def test_the_pinned_kubernetes_gives_pause_its_source_and_version() -> None:
    """Against the pinned module."""
    folder = pinned("kubernetes")

    assert (folder / PAUSE_SOURCE).is_file()
    assert building.pause_version(folder).count(".") >= 1


# --- gVisor ---


def test_gvisor_builds_runsc_and_its_containerd_shim_with_the_patch() -> None:
    recipe = recipe_for("gvisor")

    assert set(recipe.binaries) == {"runsc", "containerd-shim-runsc-v1"}
    assert recipe.patches == GVISOR_PATCHES


def test_the_gvisor_patch_lets_only_a_permission_error_pass() -> None:
    (patch,) = GVISOR_PATCHES

    assert "sys.SetOOMScore" in patch.old
    assert "!os.IsPermission(err)" in patch.new
    assert patch.new.count("return shim.BootstrapParams{}") == 1  # other errors still stop it


@pytest.mark.parametrize("patch", GVISOR_PATCHES, ids=[p.file for p in GVISOR_PATCHES])
def test_each_gvisor_patch_applies_exactly_once_to_the_pinned_module(patch: SourcePatch) -> None:
    """Against the pinned module: apply_patch refuses text found zero or several times."""
    upstream = pinned("gvisor") / patch.file
    original = upstream.read_text() if upstream.is_file() else None

    patched = apply_patch(patch, original)

    assert patched.count("// gridloop") == 1
    assert '\t"os"\n' in patched  # the patch calls os.IsPermission: the file imports os


def test_go_builds_collect_less_often_within_a_memory_limit_unless_the_user_chose(
    monkeypatch, tmp_path
) -> None:
    monkeypatch.delenv("GOGC", raising=False)
    monkeypatch.delenv("GOMEMLIMIT", raising=False)
    env = building._go_env(tmp_path)
    assert env["GOGC"] == "400"
    limit = int(env["GOMEMLIMIT"].removesuffix("MiB")) * 2**20
    assert 0 < limit <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4

    monkeypatch.setenv("GOGC", "50")
    monkeypatch.setenv("GOMEMLIMIT", "1GiB")
    env = building._go_env(tmp_path)
    assert (env["GOGC"], env["GOMEMLIMIT"]) == ("50", "1GiB")


# --- CoreDNS: only the plugins the local Corefile uses ---


def test_coredns_is_built_with_every_plugin_the_local_corefile_uses_and_no_other() -> None:
    corefile = addons.corefile()
    server = corefile.split("{", 1)[1]
    used = {
        line.split()[0]
        for line in server.splitlines()
        if line.startswith("    ") and not line.startswith("        ") and line.strip() != "}"
    }
    assert used == set(COREDNS_PLUGINS)
    recipe = recipe_for("coredns")
    assert recipe.mains == {"coredns": COREDNS_MAIN} and not recipe.binaries
    imported = re.findall(r'_ "github.com/coredns/coredns/plugin/(\w+)"', COREDNS_MAIN)
    assert imported == list(COREDNS_PLUGINS)
    assert "core/plugin" not in COREDNS_MAIN  # upstream's every-plugin list


def test_each_chosen_coredns_plugin_is_a_package_of_the_pinned_module() -> None:
    folder = pinned("coredns")
    for name in COREDNS_PLUGINS:
        assert (folder / "plugin" / name / "setup.go").is_file(), name

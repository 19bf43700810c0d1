"""Kueue's build: the version flags, and the source patches that move its certificate paths."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from gridloop import versions
from gridloop.local.build.gomod import wrapper_for
from gridloop.local.build.overlays import PatchMismatch, SourcePatch, apply_patch, overlay_document
from gridloop.local.build.recipes import (
    KUEUE_METRICS_CERT_ENV,
    KUEUE_PATCHES,
    KUEUE_VISIBILITY_CERT_ENV,
    recipe_for,
)

EDIT = SourcePatch(file="cmd/main.go", old='dir := "/etc/x"', new='dir := pick("/etc/x")', why="x")
ADD = SourcePatch(file="pkg/new.go", old="", new="package pkg\n", why="a helper")


def test_a_patch_replaces_exactly_its_upstream_text() -> None:
    before = 'func main() {\n\tdir := "/etc/x"\n\tuse(dir)\n}\n'

    assert apply_patch(EDIT, before) == 'func main() {\n\tdir := pick("/etc/x")\n\tuse(dir)\n}\n'


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('dir := "/etc/y"\n', "not found"),
        ('dir := "/etc/x"\ndir := "/etc/x"\n', "found 2 times"),
    ],
)
def test_a_patch_whose_text_moved_fails_in_one_line_naming_file_and_purpose(
    text: str, problem: str
) -> None:
    with pytest.raises(PatchMismatch) as err:
        apply_patch(EDIT, text)

    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("cmd/main.go: the text the patch (x) replaces is " + problem)


def test_a_patch_of_a_file_gone_upstream_fails() -> None:
    with pytest.raises(PatchMismatch, match=r"cmd/main\.go is gone upstream"):
        apply_patch(EDIT, None)


def test_an_added_file_must_not_exist_upstream() -> None:
    assert apply_patch(ADD, None) == "package pkg\n"
    with pytest.raises(PatchMismatch, match=r"pkg/new\.go exists upstream"):
        apply_patch(ADD, "package pkg\n")


def test_overlay_document_is_what_go_build_overlay_reads() -> None:
    doc = json.loads(overlay_document({"/m/b.go": "/c/b.go", "/m/a.go": "/c/a.go"}))

    assert doc == {"Replace": {"/m/a.go": "/c/a.go", "/m/b.go": "/c/b.go"}}


def test_kueue_is_built_from_its_command_with_its_release_version() -> None:
    recipe = recipe_for("kueue")
    comp = versions.get("kueue")

    assert recipe.binaries == {"kueue": "sigs.k8s.io/kueue/cmd/kueue"}
    assert recipe.ldflags(comp) == [f"-X sigs.k8s.io/kueue/pkg/version.GitVersion={comp.version}"]


def test_a_changed_patch_changes_the_fingerprint_so_the_cache_is_rebuilt() -> None:
    recipe = recipe_for("kueue")
    comp = versions.get("kueue")
    changed = (dataclasses.replace(KUEUE_PATCHES[0], new="other"), *KUEUE_PATCHES[1:])

    assert dataclasses.replace(recipe, patches=changed).fingerprint(comp) != recipe.fingerprint(
        comp
    )
    assert dataclasses.replace(recipe, patches=()).fingerprint(comp) != recipe.fingerprint(comp)


def test_kueue_patches_read_the_certificate_directories_from_the_environment() -> None:
    edited = "".join(p.new for p in KUEUE_PATCHES)

    assert f'os.Getenv("{KUEUE_METRICS_CERT_ENV}")' in edited
    assert f'os.Getenv("{KUEUE_VISIBILITY_CERT_ENV}")' in edited
    assert '"/etc/kueue/metrics/certs"' in KUEUE_PATCHES[0].new  # upstream's path stays the default


def test_patched_module_is_built_from_a_local_copy_named_in_the_wrapper() -> None:
    rendered = wrapper_for(
        "w", "sigs.k8s.io/kueue", "v0.17.1", "go 1.25.0\n", (), str, local_copy="./upstream"
    ).render()

    assert "replace (\n\tsigs.k8s.io/kueue => ./upstream\n)" in rendered
    assert "require (\n\tsigs.k8s.io/kueue v0.17.1\n)" in rendered


def _module_dir() -> Path | None:
    comp = versions.get("kueue")
    root = Path(os.environ.get("GOMODCACHE") or Path.home() / "go" / "pkg" / "mod")
    folder = root / f"{comp.module}@{comp.version}"
    return folder if folder.is_dir() else None


@pytest.mark.parametrize("patch", KUEUE_PATCHES, ids=[p.file for p in KUEUE_PATCHES])
def test_each_kueue_patch_applies_to_the_pinned_release(patch: SourcePatch) -> None:
    """Against the module in Go's cache, when a build or bundle has downloaded it."""
    folder = _module_dir()
    if folder is None:
        pytest.skip("the pinned Kueue module is not in Go's module cache yet")
    upstream = folder / patch.file
    original = upstream.read_text() if upstream.is_file() else None

    assert apply_patch(patch, original)

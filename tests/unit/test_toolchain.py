"""Which helm a command runs when the user names none: PATH's, else the one `gridloop
local build` made, found through its link in the tools folder (gridloop.paths)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gridloop import paths, toolchain, versions
from gridloop.errors import UsageError
from gridloop.local.build import building, recipes

FAKE_HELM = "#!/bin/sh\necho v4.3.0\n"


@pytest.fixture
def no_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty build cache and a PATH with no helm on it."""
    monkeypatch.setenv("GRIDLOOP_CACHE", str(tmp_path / "cache"))
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    toolchain.configure(None, None)
    yield tmp_path
    toolchain.configure(None, None)


def built_helm() -> Path:
    """A helm where `local build` puts it, linked as the build links it."""
    recipe = recipes.recipe_for("helm")
    comp = versions.get(recipe.component)
    made = building.recipe_dir(recipe, comp) / "bin" / "helm"
    made.parent.mkdir(parents=True)
    made.write_text(FAKE_HELM)
    made.chmod(made.stat().st_mode | stat.S_IXUSR)
    building.link_tools(recipe, comp)
    return made


def test_with_no_helm_on_path_the_built_one_is_found_through_the_tools_folder(no_tools):
    made = built_helm()

    found = toolchain.helm()

    assert found == paths.tools_dir() / "helm" and found.resolve() == made
    assert os.path.islink(found)


def test_a_helm_on_path_wins_over_the_built_one(no_tools, monkeypatch):
    built_helm()
    own = no_tools / "own"
    own.mkdir()
    (own / "helm").write_text(FAKE_HELM)
    (own / "helm").chmod(0o755)
    monkeypatch.setenv("PATH", str(own))
    toolchain.configure(None, None)

    assert toolchain.helm() == own / "helm"


def test_with_none_anywhere_the_refusal_names_the_flag(no_tools):
    with pytest.raises(UsageError, match=r"helm not found on PATH: .* or pass --helm PATH"):
        toolchain.helm()


def test_only_helm_and_kubectl_are_linked(no_tools):
    recipe = recipes.recipe_for("kubernetes")
    comp = versions.get(recipe.component)
    bindir = building.recipe_dir(recipe, comp) / "bin"
    bindir.mkdir(parents=True)
    for name in building.binary_names(recipe):
        (bindir / name).write_text("")

    building.link_tools(recipe, comp)

    assert sorted(p.name for p in paths.tools_dir().iterdir()) == ["kubectl"]

"""`gridloop local build` fetches the modules of the next Go recipes on one thread while
the current one compiles; compiles stay one at a time and in order, and a failed fetch
is reported at its recipe, after the ones before it are built."""

from __future__ import annotations

import threading

import pytest

from gridloop.errors import BuildError
from gridloop.local import building
from gridloop.local.recipes import RECIPES

GO = [r for r in RECIPES if not (r.debian_files or r.c_programs)][:3]
NAMES = [r.name for r in GO]


@pytest.fixture
def uncached(monkeypatch):
    monkeypatch.setattr(building, "_is_cached", lambda recipe, comp: False)
    monkeypatch.setattr(building, "check_go", lambda for_what: "go")


def test_the_next_recipe_is_fetched_while_the_first_compiles(monkeypatch, uncached):
    said: list[str] = []
    second_fetched = threading.Event()

    def prepare(go, recipe, comp):
        said.append(f"fetch {recipe.name}")
        if recipe.name == NAMES[1]:
            second_fetched.set()
        return recipe.name

    def compile_(prepared, report):
        if prepared == NAMES[0]:
            assert second_fetched.wait(5), "the second recipe was not fetched meanwhile"
        said.append(f"compile {prepared}")

    monkeypatch.setattr(building, "_prepare", prepare)
    monkeypatch.setattr(building, "_compile", compile_)
    building.build(NAMES)
    assert [x for x in said if x.startswith("compile")] == [f"compile {n}" for n in NAMES]
    assert said.index(f"fetch {NAMES[1]}") < said.index(f"compile {NAMES[0]}")


def test_a_failed_fetch_is_raised_at_its_recipe_after_the_ones_before_are_built(
    monkeypatch, uncached
):
    compiled: list[str] = []

    def prepare(go, recipe, comp):
        if recipe.name == NAMES[1]:
            raise BuildError(f"building {recipe.name}: resolving modules failed (exit 1)")
        return recipe.name

    monkeypatch.setattr(building, "_prepare", prepare)
    monkeypatch.setattr(building, "_compile", lambda prepared, report: compiled.append(prepared))
    with pytest.raises(BuildError, match=f"building {NAMES[1]}: resolving modules"):
        building.build(NAMES)
    assert compiled == [NAMES[0]]  # the first built; nothing after the failure

"""KAITO's controller is built from its release archive (read from a mirror folder, checked
by the sha256 versions.yaml pins), not from the Go module proxy: `gridloop local build`
builds it only with `--mirror DIR`, and asked for it without one says so in one line."""

from __future__ import annotations

import pytest

from gridloop import versions
from gridloop.errors import BuildError, UsageError
from gridloop.local.build import building
from gridloop.local.build.images import table


@pytest.fixture(autouse=True)
def empty_cache(tmp_path, monkeypatch):
    """A build cache without KAITO's controller in it (the machine's may hold one)."""
    monkeypatch.setenv("GRIDLOOP_CACHE", str(tmp_path / "cache"))


def names(components, mirror: bool) -> list[str]:
    return [r.name for r in building.planned(components, mirror)]


def test_everything_is_built_but_kaito_unless_a_mirror_is_given():
    assert "kaito" not in names(None, mirror=False)
    assert "kueue" in names(None, mirror=False)
    assert "kaito" in names(None, mirror=True)
    assert names(["kaito"], mirror=False) == ["kaito"]


def test_kaito_asked_for_without_a_mirror_or_with_an_empty_one_names_the_flag(tmp_path):
    with pytest.raises(BuildError, match=r"no --mirror given \(pass --mirror DIR"):
        building.build(["kaito"], mirror=None)
    kaito = versions.get("kaito")
    empty = tmp_path / "mirror"
    empty.mkdir()
    with pytest.raises(BuildError, match=f"{empty} has no {kaito.mirror_name}"):
        building.build(["kaito"], mirror=empty)


def test_a_changed_archive_is_refused_naming_both_hashes(tmp_path):
    kaito = versions.get("kaito")
    (tmp_path / kaito.mirror_name).write_bytes(b"not KAITO")
    with pytest.raises(UsageError, match=f"but versions.yaml pins {kaito.mirror_sha256}"):
        building.build(["kaito"], mirror=tmp_path)


def test_the_controller_image_is_upstreams_name_with_the_catalogue_beside_it():
    (image,) = table.on_request()
    assert image.ref == f"mcr.microsoft.com/aks/kaito/workspace:{versions.get('kaito').bare}"
    assert image.entrypoint == ("/manager",)
    assert set(image.files) == {"/manager", "/supported_models.yaml"}
    assert image.user == table.NONROOT

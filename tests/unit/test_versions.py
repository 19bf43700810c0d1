"""versions.yaml is the one place upstream versions live, and a bad file names its field."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gridloop import versions
from gridloop.errors import UsageError
from gridloop.local.build.recipes import RECIPES, Recipe, binary_names, recipe_for

REPO = Path(__file__).parents[2]
SEMVER = re.compile(r"v\d+\.\d+\.\d+")


@pytest.fixture(autouse=True)
def fresh_versions(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`versions.load` is cached; each test reads the file it means to."""
    monkeypatch.delenv("GRIDLOOP_VERSIONS_FILE", raising=False)
    versions.load.cache_clear()
    yield
    versions.load.cache_clear()


def test_the_repo_root_versions_file_is_the_one_read() -> None:
    assert versions.versions_file().resolve() == (REPO / "versions.yaml").resolve()


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.name for r in RECIPES])
def test_every_recipe_names_a_pinned_component_and_where_it_comes_from(recipe: Recipe) -> None:
    component = versions.get(recipe.component)

    # a Go module to build from, a Debian package to unpack, or a release archive read
    # from a mirror and checked by its sha256: exactly one
    sources = (component.module, component.debian, recipe.from_mirror)
    assert sum(map(bool, sources)) == 1, sources
    assert bool(component.debian) == bool(recipe.debian_files)
    if recipe.from_mirror:
        assert len(component.mirror_sha256) == 64 and component.mirror_source_path
    assert binary_names(recipe)


@pytest.mark.parametrize("name", ["kubernetes", "etcd", "kwok", "helm", "kueue"])
def test_each_upstream_is_pinned_to_a_release_version(name: str) -> None:
    assert SEMVER.fullmatch(versions.get(name).version)


def test_vllm_is_pinned_as_the_image_the_chart_runs() -> None:
    vllm = versions.get("vllm")

    # nothing builds, unpacks or downloads it: the chart runs the image at that tag
    assert (vllm.module, vllm.debian, vllm.release) == ("", "", "")
    assert SEMVER.fullmatch(vllm.version)
    assert vllm.image_ref == f"vllm/vllm-openai:{vllm.version}"


def test_an_image_entry_is_read_with_its_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pinned = tmp_path / "versions.yaml"
    pinned.write_text("vllm:\n  version: v0.33.0\n  image: vllm/vllm-openai\n")
    monkeypatch.setenv("GRIDLOOP_VERSIONS_FILE", str(pinned))

    assert versions.get("vllm").image_ref == "vllm/vllm-openai:v0.33.0"
    assert versions.Component("etcd", "v3.6.16", "go.etcd.io/etcd/server/v3").image_ref == ""


def test_etcd_is_3_6_as_current_kube_apiservers_want() -> None:
    assert versions.get("etcd").version.startswith("v3.6.")


@pytest.mark.parametrize("pkg", ["k8s.io/component-base/version", "k8s.io/client-go/pkg/version"])
def test_kubernetes_binaries_report_the_pinned_release(pkg: str) -> None:
    kubernetes = versions.get("kubernetes")
    major, minor = kubernetes.version.lstrip("v").split(".")[:2]

    ldflags = recipe_for("kubernetes").ldflags(kubernetes)

    assert f"-X {pkg}.gitVersion={kubernetes.version}" in ldflags
    assert f"-X {pkg}.gitMajor={major}" in ldflags
    assert f"-X {pkg}.gitMinor={minor}" in ldflags


def test_kubernetes_pins_staging_modules_to_the_v0_release() -> None:
    kubernetes = versions.Component("kubernetes", "v1.35.4", "k8s.io/kubernetes")

    assert recipe_for("kubernetes").pin(kubernetes, "k8s.io/api") == "v0.35.4"
    assert recipe_for("etcd").pin(versions.get("etcd"), "go.etcd.io/etcd/api/v3") == (
        versions.get("etcd").version
    )


def test_component_minor_is_the_second_number() -> None:
    assert versions.Component("kubernetes", "v1.35.4", "k8s.io/kubernetes").minor == "35"


def test_unknown_component_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no component named 'kubelet'"):
        versions.get("kubelet")


def test_each_recipe_has_a_cache_folder_of_its_own() -> None:
    names = [r.name for r in RECIPES]

    assert len(names) == len(set(names))


@pytest.mark.parametrize(
    ("name", "component"),
    [
        ("kubernetes", "kubernetes"),
        ("kubernetes-node", "kubernetes"),
        ("pause", "kubernetes"),
        ("containerd", "containerd"),
        ("gvisor", "gvisor"),
    ],
)
def test_a_recipe_is_found_by_its_cache_folders_name(name: str, component: str) -> None:
    recipe = recipe_for(name)

    assert (recipe.name, recipe.component) == (name, component)


def test_no_binary_is_built_by_two_recipes() -> None:
    names = [n for r in RECIPES for n in binary_names(r)]

    assert len(names) == len(set(names))


def test_unknown_recipe_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        recipe_for("vllm")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "kubernetes:\n  module: k8s.io/kubernetes\n",
            "kubernetes.version: missing or not a string",
        ),
        ("etcd:\n  version: 3.6\n", "etcd.version: missing or not a string"),
        ("kwok: v0.8.0\n", "kwok.version: missing or not a string"),
        ("- kubernetes\n", "expected a mapping of component -> version"),
        ("", "expected a mapping of component -> version"),
    ],
    ids=["version-missing", "version-a-number", "not-a-mapping", "a-list", "empty"],
)
def test_bad_versions_file_names_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str
) -> None:
    bad = tmp_path / "versions.yaml"
    bad.write_text(text)
    monkeypatch.setenv("GRIDLOOP_VERSIONS_FILE", str(bad))

    with pytest.raises(UsageError) as caught:
        versions.load()

    assert str(caught.value) == f"{bad}: {message}"
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(
    "text", [None, "kubernetes: [unclosed\n"], ids=["missing-file", "not-yaml"]
)
def test_unreadable_versions_file_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str | None
) -> None:
    path = tmp_path / "versions.yaml"
    if text is not None:
        path.write_text(text)
    monkeypatch.setenv("GRIDLOOP_VERSIONS_FILE", str(path))

    with pytest.raises(UsageError, match=str(path)):
        versions.load()


def test_override_file_replaces_the_repo_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    override = tmp_path / "versions.yaml"
    override.write_text(yaml.safe_dump({"kubernetes": {"version": "v1.36.0"}}))
    monkeypatch.setenv("GRIDLOOP_VERSIONS_FILE", str(override))

    assert versions.load() == {"kubernetes": versions.Component("kubernetes", "v1.36.0", module="")}

"""Every bundled component is pinned in versions.yaml with a place to get it from."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gridloop import versions
from gridloop.bundle.sources import COMPONENTS, SOURCES, Kind, Source, source_for


@pytest.fixture(autouse=True)
def fresh_versions(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("GRIDLOOP_VERSIONS_FILE", raising=False)
    versions.load.cache_clear()
    yield
    versions.load.cache_clear()


def test_the_bundle_carries_the_four_operators_the_chart_installs() -> None:
    assert COMPONENTS == ("kueue", "kuberay", "kaito", "agent-sandbox")


def test_the_dcgm_exporter_is_the_charts_own_and_pinned_by_version_only() -> None:
    """No release file to download: versions.yaml pins its image tag, nothing else."""
    exporter = versions.get("dcgm-exporter")

    assert "dcgm-exporter" not in COMPONENTS
    assert exporter.version and not exporter.release and not exporter.module


@pytest.mark.parametrize("source", SOURCES, ids=list(COMPONENTS))
def test_each_source_is_pinned_with_a_module_or_a_release_url(source: Source) -> None:
    comp = versions.get(source.component)

    if source.kind is Kind.GO_MODULE:
        assert comp.module and not comp.release
        assert source.kustomize
    elif source.kind is Kind.GO_MODULE_FILES:
        assert comp.module and not comp.release
        assert source.module_files
    else:
        assert comp.release_url.startswith("https://") and not comp.module
        assert comp.version in comp.release_url or comp.version.lstrip("v") in comp.release_url
    if source.pin is not None:  # the release's tag: `v0.19.2`, or KAITO's `0.12.0`
        assert source.pin.for_version(comp.version).endswith((f":{comp.version}", f":{comp.bare}"))


def test_go_module_images_are_the_ones_their_releases_publish() -> None:
    kueue, kuberay = source_for("kueue").pin, source_for("kuberay").pin
    sandbox = source_for("agent-sandbox").pin
    assert kueue is not None and kuberay is not None and sandbox is not None

    assert kueue.for_version("v0.17.1") == "registry.k8s.io/kueue/kueue:v0.17.1"
    assert kuberay.for_version("v1.5.0") == "quay.io/kuberay/operator:v1.5.0"
    assert sandbox.for_version("v0.2.1") == (
        "registry.k8s.io/agent-sandbox/agent-sandbox-controller:v0.2.1"
    )


def test_agent_sandbox_is_read_as_its_release_script_writes_it() -> None:
    """dev/tools/release: manifest.yaml is k8s/**/*.yaml without "extensions" in the
    name, extensions.yaml the others, each sorted; the second is applied after the first."""
    files = source_for("agent-sandbox").module_files
    core = [f for f in files if "extensions" not in f.rsplit("/", 1)[-1]]
    extensions = [f for f in files if "extensions" in f.rsplit("/", 1)[-1]]

    assert list(files) == [*core, *extensions]
    assert core == sorted(core) and extensions == sorted(extensions)
    assert "k8s/extensions.controller.yaml" in extensions


def test_release_templates_get_the_version_with_and_without_its_v(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pinned = tmp_path / "versions.yaml"
    pinned.write_text(
        "kaito:\n  version: v0.10.0\n  release: https://example.test/{version}/workspace-{bare}.tgz\n"
    )
    monkeypatch.setenv("GRIDLOOP_VERSIONS_FILE", str(pinned))

    kaito = versions.get("kaito")

    assert kaito.release_url == "https://example.test/v0.10.0/workspace-0.10.0.tgz"
    assert versions.Component("x", "v1", "m").release_url == ""


def test_a_source_fingerprint_changes_with_the_version() -> None:
    source = source_for("kuberay")
    old = versions.Component("kuberay", "v1.4.0", "github.com/ray-project/kuberay/ray-operator")
    new = versions.Component("kuberay", "v1.5.0", "github.com/ray-project/kuberay/ray-operator")

    assert source.fingerprint(old) != source.fingerprint(new)


def test_an_unknown_source_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        source_for("volcano")

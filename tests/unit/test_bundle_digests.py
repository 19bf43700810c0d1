"""`gridloop bundle --digests-from`: every image pinned by the digest a registry holds.

Here the registry's answers are a table (what `head` would have read); the real call to
the local cluster's registry, and a pod pulled by digest through it, are in
tests/cluster/test_images_by_digest.py, and the chart rendering them in test_chart_bundled.py.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
import yaml
from test_bundle_command import _chart, _mirror, isolated  # noqa: F401 (a fixture)

from gridloop.bundle import bundling, digests
from gridloop.bundle.sources import COMPONENTS
from gridloop.errors import UsageError

LOCAL = "http://127.0.0.1:26413"


def digest_of(name: str) -> str:
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


def registry_holding(*repositories: str) -> tuple[digests.Head, list[str]]:
    """A registry that holds these `<repository>:<tag>` paths, and the URLs it was asked."""
    asked: list[str] = []

    def head(url: str) -> str | None:
        asked.append(url)
        path = url.removeprefix(f"{LOCAL}/v2/")
        repository, _, tag = path.partition("/manifests/")
        return digest_of(path) if f"{repository}:{tag}" in repositories else None

    return head, asked


def test_an_image_is_looked_for_under_its_full_name_then_docker_hubs() -> None:
    where = digests.registry("https://mirror.example:5000/gridloop/")

    assert where.base == "https://mirror.example:5000" and where.prefix == "gridloop"
    assert (
        where.manifest_url("registry.k8s.io/kueue/kueue", "v0.19.2")
        == "https://mirror.example:5000/v2/gridloop/registry.k8s.io/kueue/kueue/manifests/v0.19.2"
    )
    assert digests.split("quay.io/kuberay/operator:v1.6.2") == (
        "quay.io/kuberay/operator",
        "v1.6.2",
    )
    assert digests.split("localhost:5000/tool") == ("localhost:5000/tool", "latest")
    assert digests.split("quay.io/x@sha256:" + "0" * 64) is None  # pinned already
    assert digests.places("quay.io/kuberay/operator") == ["quay.io/kuberay/operator"]
    assert digests.places("vllm/vllm-openai") == ["vllm/vllm-openai", "docker.io/vllm/vllm-openai"]
    assert digests.places("busybox") == ["busybox", "docker.io/library/busybox"]
    assert digests.registry("mirror.example").base == "https://mirror.example"


@pytest.mark.parametrize(
    "given, says",
    [
        ("ftp://mirror.example", "not a registry URL"),
        ("http://", "not a registry URL"),
        ("http://mirror.example/?x=1", "a registry URL has no query or fragment"),
    ],
)
def test_a_registry_that_is_not_a_url_is_refused_before_anything_is_fetched(
    tmp_path: Path, given: str, says: str
) -> None:
    out = tmp_path / "dist"
    request = bundling.Request(out=out, mirror=_mirror(tmp_path / "mirror"), digests_from=given)

    with pytest.raises(UsageError, match=re.escape(f"--digests-from {given}: {says}")):
        bundling.bundle(request)
    assert not out.exists()


def test_every_image_the_registry_holds_is_listed_and_rendered_by_its_digest(
    tmp_path: Path,
) -> None:
    out, lines = tmp_path / "dist", []
    held = [f"mirror/{c}:1" for c in COMPONENTS if c != "kaito"]
    head, asked = registry_holding("ghcr.io/gridloop/health:0.1.0", *held)
    request = bundling.Request(
        out=out,
        chart=_chart(tmp_path),
        mirror=_mirror(tmp_path / "mirror"),
        digests_from=LOCAL,
        head=head,
    )

    result = bundling.bundle(request, lines.append)

    assert (out / "images.txt").read_text().splitlines() == sorted(
        [
            "ghcr.io/gridloop/health:0.1.0@" + digest_of("ghcr.io/gridloop/health/manifests/0.1.0"),
            "mirror/kaito:1",  # not there: by its tag, and said so
            *(f"{image}@{digest_of(image.replace(':', '/manifests/'))}" for image in held),
        ]
    )
    assert f"  ✓ {len(held) + 1} images pinned by digest from {LOCAL}" in lines
    assert f"  ! not in {LOCAL}, pinned by tag only: mirror/kaito:1" in lines
    # an image without a registry host: as listed, then under Docker Hub's name
    assert f"{LOCAL}/v2/mirror/kaito/manifests/1" in asked
    assert f"{LOCAL}/v2/docker.io/mirror/kaito/manifests/1" in asked
    pinned = yaml.safe_load((out / "gridloop" / "upstream" / "digests.yaml").read_text())
    assert pinned["images"] == result.resolved.digests and len(pinned["images"]) == len(held) + 1


def test_a_registry_holding_none_of_the_images_is_refused_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    out = tmp_path / "dist"
    (out / "gridloop").mkdir(parents=True)
    (out / "gridloop" / "mine.txt").write_text("kept")
    head, _ = registry_holding()
    request = bundling.Request(
        out=out, mirror=_mirror(tmp_path / "mirror"), digests_from=LOCAL, head=head
    )

    with pytest.raises(UsageError) as refused:
        bundling.bundle(request)

    assert str(refused.value) == (
        f"--digests-from {LOCAL}: holds none of the bundle's {len(COMPONENTS)} images "
        f"(no {LOCAL}/v2/mirror/agent-sandbox/manifests/1)"
    )
    assert sorted(p.name for p in out.rglob("*")) == ["gridloop", "mine.txt"]


def test_images_pinned_already_are_kept_as_they_are_and_nothing_is_asked() -> None:
    pinned = "quay.io/x/y:1@sha256:" + "1" * 64
    head, asked = registry_holding()

    resolved = digests.resolve([pinned], digests.registry(LOCAL), head)

    assert (resolved.digests, resolved.missing, asked) == ({}, [], [])
    assert resolved.pinned(pinned) == pinned

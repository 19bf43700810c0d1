"""The images the local cluster builds, and the registry that serves them: names as a
cluster pulls them, contents by fingerprint, and a registry on loopback only."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from gridloop import versions
from gridloop.local.build.images import registry, table
from gridloop.local.build.images.table import Image
from gridloop.local.container import configs

PAUSE = "3.10.1"


@pytest.mark.parametrize(
    ("ref", "parts"),
    [
        ("registry.k8s.io/pause:3.10.1", ("registry.k8s.io", "pause", "3.10.1")),
        ("ghcr.io/gridloop/busybox:1.35.0", ("ghcr.io", "gridloop/busybox", "1.35.0")),
        ("docker.io/library/nginx:1.27-alpine", ("docker.io", "library/nginx", "1.27-alpine")),
        ("quay.io/a/b/c:v1", ("quay.io", "a/b/c", "v1")),
    ],
)
def test_an_image_reference_splits_into_registry_repository_and_tag(
    ref: str, parts: tuple[str, str, str]
) -> None:
    image = Image(ref=ref, files={}, entrypoint=())

    assert (image.registry, image.repository, image.tag) == parts
    assert registry.ref_parts(ref) == parts  # how pushes and the registry's reads split it


@pytest.mark.parametrize(
    ("debian", "upstream"),
    [
        ("1:1.35.0-4+deb12u1+b1", "1.35.0"),  # epoch, Debian revision, binNMU
        ("1.35.0-4", "1.35.0"),
        ("2.42.0+ds-5+deb12u1", "2.42.0+ds"),  # a repacked source keeps its +ds
        ("1.2-rc1-3", "1.2-rc1"),  # only the last '-' starts the revision
        ("1.35.0", "1.35.0"),  # a native package has no revision
        ("2:7.4", "7.4"),
    ],
)
def test_upstream_version_drops_the_epoch_and_the_debian_revision(
    debian: str, upstream: str
) -> None:
    assert table.upstream_version(debian) == upstream


def test_the_pause_image_is_named_as_kubernetes_names_it() -> None:
    pause = next(i for i in table.images(PAUSE) if "pause" in i.ref)

    assert pause.ref == table.pause_ref(PAUSE) == "registry.k8s.io/pause:3.10.1"
    assert pause.files == {"/pause": "pause"}
    assert pause.entrypoint == ("/pause",)


def test_busybox_is_tagged_with_debians_upstream_version_and_links_its_applets() -> None:
    busybox = next(i for i in table.images(PAUSE) if "busybox" in i.ref)

    assert busybox.ref == "ghcr.io/gridloop/busybox:1.35.0"
    assert busybox.tag == table.upstream_version(versions.get("busybox").version)
    assert busybox.files == {"/bin/busybox": "busybox"}
    assert busybox.cmd == ("/bin/sh",)
    assert {"/bin/sh", "/bin/sleep", "/bin/nc", "/bin/dmesg"} <= set(busybox.links)
    # each link is relative to /bin, so it resolves inside the image, not on the host
    assert set(busybox.links.values()) == {"busybox"}


def test_every_image_is_pulled_through_a_registry_the_nodes_mirror() -> None:
    assert {i.registry for i in table.images(PAUSE)} <= set(configs.MIRRORED)


def test_no_image_runs_as_root() -> None:
    assert [i.ref for i in table.images(PAUSE) if i.user.split(":")[0] in ("0", "root")] == []


DIGESTS = {"pause": "sha-pause", "busybox": "sha-busybox"}


@pytest.mark.parametrize(
    ("settings", "binaries", "rebuilt"),
    [
        pytest.param({}, {}, False, id="nothing"),
        pytest.param({}, {"busybox": "sha-other"}, True, id="its-binary"),
        pytest.param({}, {"pause": "sha-other"}, False, id="another-image-s-binary"),
        pytest.param({"ref": "ghcr.io/gridloop/busybox:1.36.0"}, {}, True, id="its-tag"),
        pytest.param({"user": "1000:1000"}, {}, True, id="its-user"),
        pytest.param({"cmd": ("/bin/sleep",)}, {}, True, id="its-command"),
        pytest.param({"links": {}}, {}, True, id="its-links"),
        pytest.param({"why": "other words"}, {}, False, id="its-description"),
    ],
)
def test_an_image_is_rebuilt_when_a_binary_or_a_setting_changes(
    settings: dict[str, Any], binaries: dict[str, str], rebuilt: bool
) -> None:
    busybox = next(i for i in table.images(PAUSE) if "busybox" in i.ref)
    before = busybox.fingerprint(DIGESTS.__getitem__)

    after = dataclasses.replace(busybox, **settings).fingerprint((DIGESTS | binaries).__getitem__)

    assert (after != before) is rebuilt


def test_the_registry_listens_on_loopback_and_stores_in_the_given_folder(tmp_path: Path) -> None:
    doc = yaml.safe_load(registry.config(26413, tmp_path / "registry"))

    assert doc["version"] == 0.1
    assert doc["http"]["addr"] == "127.0.0.1:26413"
    assert doc["storage"]["filesystem"] == {"rootdirectory": str(tmp_path / "registry")}


def test_the_registry_is_served_and_checked_on_loopback() -> None:
    assert registry.argv(Path("/c/registry"), Path("/s/registry.yaml")) == [
        "/c/registry",
        "serve",
        "/s/registry.yaml",
    ]
    assert registry.health_url(26413) == "http://127.0.0.1:26413/v2/"


def test_the_upstream_controllers_are_named_as_the_bundle_pins_them() -> None:
    refs = {image.ref for image in table.controllers()}

    assert refs == {
        f"registry.k8s.io/kueue/kueue:{versions.get('kueue').version}",
        f"quay.io/kuberay/operator:{versions.get('kuberay').version}",
        "registry.k8s.io/agent-sandbox/agent-sandbox-controller:"
        + versions.get("agent-sandbox").version,
    }


def test_each_controller_sits_where_upstreams_dockerfile_puts_it_and_runs_as_nonroot() -> None:
    by_ref = {image.ref.split(":")[0]: image for image in table.controllers()}

    assert by_ref["registry.k8s.io/kueue/kueue"].entrypoint == ("/manager",)
    assert by_ref["quay.io/kuberay/operator"].entrypoint == ("/manager",)
    sandbox = by_ref["registry.k8s.io/agent-sandbox/agent-sandbox-controller"]
    assert sandbox.entrypoint == ("/agent-sandbox-controller",)
    assert {image.user for image in by_ref.values()} == {"65532:65532"}
    assert all("nonroot:x:65532:65532" in image.texts["/etc/passwd"] for image in by_ref.values())

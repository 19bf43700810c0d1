"""`gridloop local build all` (what `make test` runs): the heavy images (vLLM CPU, Ray)
build on their own thread, beside the Go builds, once what they need is there."""

from __future__ import annotations

import argparse
import threading

from gridloop.local import commands
from gridloop.local.build import building
from gridloop.local.build.images import gridloop_image, locked_images, pushing


def test_the_heavy_images_build_while_the_go_builds_run(monkeypatch, capsys, tmp_path):
    said: list[str] = []
    go_started, heavy_running = threading.Event(), threading.Event()

    def build(components, report, mirror=None):
        said.append(f"recipes {components}")
        if components is None:  # the Go builds: the images are building meanwhile
            go_started.set()
            assert heavy_running.wait(5), "the heavy images did not start beside the Go builds"

    def heavy_build(image):
        heavy_running.set()
        assert go_started.wait(5)
        said.append(f"image {image.name}")
        return gridloop_image.Built(image.ref(), True, 1.0)

    monkeypatch.setattr(building, "build", build)
    monkeypatch.setattr(building, "binary", lambda name: name)
    monkeypatch.setattr(gridloop_image, "base_image", lambda: said.append("base") or ("b", False))
    monkeypatch.setattr(locked_images.LockedImage, "build", heavy_build)
    monkeypatch.setattr(pushing, "build_all", lambda *_: said.append("images"))
    assert (
        commands.cmd_build(argparse.Namespace(components=["all"], state_dir=tmp_path, mirror=None))
        == 0
    )
    assert said[:2] == [f"recipes {locked_images.needs()}", "base"]  # what they need, first
    assert said.index("image vllm-cpu") > said.index("recipes None")
    assert said.index("image ray") > said.index("image vllm-cpu")
    out = capsys.readouterr().out
    assert f"{locked_images.RAY.ref()}" in out and "built in 1.0s" in out


def test_without_all_the_heavy_images_are_left_out(monkeypatch, tmp_path):
    said: list[str] = []
    monkeypatch.setattr(
        building, "build", lambda components, report, mirror=None: said.append("recipes")
    )
    monkeypatch.setattr(building, "binary", lambda name: name)
    monkeypatch.setattr(pushing, "build_all", lambda *_: said.append("images"))
    monkeypatch.setattr(locked_images.LockedImage, "build", lambda i: said.append(i.name))
    assert (
        commands.cmd_build(argparse.Namespace(components=[], state_dir=tmp_path, mirror=None)) == 0
    )
    assert said == ["recipes", "images"]


def test_naming_one_heavy_image_builds_what_it_needs_then_it_alone(monkeypatch, capsys, tmp_path):
    said: list[object] = []
    monkeypatch.setattr(
        building, "build", lambda components, report, mirror=None: said.append(components)
    )
    monkeypatch.setattr(pushing, "build_all", lambda *_: said.append("images"))

    def heavy_build(image):
        said.append(image.name)
        return gridloop_image.Built(image.ref(), False, 0.1)

    monkeypatch.setattr(locked_images.LockedImage, "build", heavy_build)
    assert (
        commands.cmd_build(argparse.Namespace(components=["ray"], state_dir=tmp_path, mirror=None))
        == 0
    )
    assert said == [locked_images.RAY.needs, "ray"]
    assert "cached" in capsys.readouterr().out

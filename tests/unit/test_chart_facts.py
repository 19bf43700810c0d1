"""The chart's copies of Python facts are generated (gridloop.chart.facts): the committed
templates/_generated.tpl is exactly what the code writes, so the GPU catalog and the
quarantine taint key have one home each (fleet/catalog.py, names.py)."""

from __future__ import annotations

from gridloop import names
from gridloop.chart import facts
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

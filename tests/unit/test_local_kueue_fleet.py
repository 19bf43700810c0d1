"""A fleet asks for Kueue with `kueue: {enabled: true}`; anything else is one line naming it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gridloop.errors import BuildError
from gridloop.fleet import FleetError, KueueOptions, load_fleet, parse_fleet
from gridloop.local.build.building import binary

# the real helm, built by `gridloop local build`
needs_helm = pytest.mark.needs_binaries("helm")

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "gridloop"
DEFAULT_FLEET = REPO / "examples" / "fleets" / "default.yaml"


def fleet_doc(**top: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "gridloop.io/v1alpha1",
        "kind": "Fleet",
        "metadata": {"name": "lab"},
        "sites": [
            {
                "name": "lab",
                "type": "on-prem",
                "region": "on-prem-lab",
                "zones": ["rack-a"],
                "pools": [{"name": "l4", "gpu": "L4", "nodes": 2, "gpusPerNode": 4}],
            }
        ],
    }
    doc.update(top)
    return doc


def test_a_fleet_without_the_field_does_not_ask_for_kueue() -> None:
    assert parse_fleet(fleet_doc()).kueue == KueueOptions(enabled=False)


@pytest.mark.parametrize("enabled", [True, False])
def test_a_fleet_asks_for_kueue_with_enabled(enabled: bool) -> None:
    assert parse_fleet(fleet_doc(kueue={"enabled": enabled})).kueue.enabled is enabled


def test_an_empty_kueue_mapping_leaves_it_off() -> None:
    assert parse_fleet(fleet_doc(kueue={})).kueue.enabled is False


@pytest.mark.parametrize(
    ("kueue", "message"),
    [
        ({"enabled": "yes"}, "f.yaml: kueue.enabled: must be true or false, got 'yes'"),
        ({"enabled": 1}, "f.yaml: kueue.enabled: must be true or false, got 1"),
        ({"enabled": None}, "f.yaml: kueue.enabled: must be true or false, got null"),
        ({"enable": True}, "f.yaml: kueue: unknown field 'enable' (allowed: enabled)"),
        (True, "f.yaml: kueue: must be a mapping, got true"),
        (None, "f.yaml: kueue: must be a mapping, got null"),
    ],
)
def test_bad_kueue_values_are_one_line_naming_the_field(kueue: object, message: str) -> None:
    with pytest.raises(FleetError) as err:
        parse_fleet(fleet_doc(kueue=kueue), "f.yaml")

    assert str(err.value) == message


def test_the_default_fleet_runs_kueue_as_the_charts_pod_not_beside_the_control_plane() -> None:
    fleet = load_fleet(DEFAULT_FLEET)

    assert fleet.container_nodes is not None
    assert fleet.kueue.enabled is False


def test_kueue_beside_the_control_plane_is_refused_with_container_nodes() -> None:
    doc = fleet_doc(kueue={"enabled": True})
    doc["containerNodes"] = {"nodes": 1}

    with pytest.raises(FleetError) as err:
        parse_fleet(doc, "f.yaml")

    assert str(err.value) == (
        "f.yaml: kueue.enabled: must be false with containerNodes: Kueue then runs as the "
        "chart's own pod (gridloop install --profile local), not beside the control plane"
    )


def _helm_template(tmp_path: Path, fleet: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    try:
        helm = binary("helm")
    except BuildError as err:
        pytest.fail(f"{err}: the chart's schema is checked by the real helm", pytrace=False)
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"fleet": fleet}))
    home = tmp_path / "helm-home"
    env = {
        **os.environ,
        "KUBECONFIG": os.devnull,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    args = ["template", "t", str(CHART), "-f", str(CHART / "profiles" / "minimal.yaml")]
    return subprocess.run(
        [str(helm), *args, "-f", str(values)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@needs_helm
def test_the_chart_accepts_a_fleet_file_that_asks_for_kueue(tmp_path: Path) -> None:
    fleet = yaml.safe_load(DEFAULT_FLEET.read_text())

    result = _helm_template(tmp_path, fleet)

    assert result.returncode == 0, result.stderr


@needs_helm
def test_the_chart_refuses_a_bad_kueue_field_in_the_fleet(tmp_path: Path) -> None:
    result = _helm_template(tmp_path, fleet_doc(kueue={"enabled": "yes"}))

    assert result.returncode != 0
    assert "at '/fleet/kueue/enabled': got string, want boolean" in result.stderr

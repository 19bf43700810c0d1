"""Injected faults: validated with one line naming the flag, merged per GPU, saved as JSON."""

from __future__ import annotations

import math
from typing import Any

import pytest

from gridloop.errors import UsageError
from gridloop.sim.faults import THERMAL_US_PER_S, Fault, FaultSet, Ramp
from gridloop.sim.injections import Injection

NODE = "us-east-h100-000"
OTHER = "us-east-h100-001"
SMALL = "lab-l4-000"
GPUS = {NODE: 8, OTHER: 8, SMALL: 4}
NOW = 1_700_000_000.0


def inject(faults: FaultSet, now: float = NOW, **kwargs: Any) -> FaultSet:
    kwargs.setdefault("node", NODE)
    return faults.inject(GPUS, Injection(**kwargs), now)


@pytest.mark.parametrize(
    ("injection", "message"),
    [
        pytest.param(
            {"node": "nope", "xid": 79},
            "--node nope: no such node in the fleet (e.g. us-east-h100-000)",
            id="unknown-node",
        ),
        pytest.param(
            {"gpu": 9, "xid": 79}, "--gpu 9: node us-east-h100-000 has GPUs 0-7", id="gpu-past-end"
        ),
        pytest.param(
            {"node": SMALL, "gpu": 4, "xid": 79},
            "--gpu 4: node lab-l4-000 has GPUs 0-3",
            id="gpu-past-end-of-a-smaller-node",
        ),
        pytest.param({"gpu": -1, "vanish": True}, "--gpu -1: node", id="negative-gpu"),
        pytest.param({"xid": 0}, "--xid 0: must be an XID code from 1 to 999", id="xid-zero"),
        pytest.param({"xid": 1000}, "--xid 1000: must be an XID code", id="xid-too-big"),
        pytest.param({"temp": -5.0}, "--temp -5: must be a temperature", id="negative-temp"),
        pytest.param({"temp": math.inf}, "--temp inf: must be a temperature", id="infinite-temp"),
        pytest.param(
            {"nvlink_errors_per_s": -1.0},
            "--nvlink-errors -1: must be a non-negative rate",
            id="negative-nvlink-rate",
        ),
        pytest.param(
            {"pcie_replays_per_s": math.nan}, "--pcie-replays nan: must be", id="nan-pcie-rate"
        ),
        pytest.param(
            {}, "--node us-east-h100-000: nothing to inject; give one of --xid", id="empty"
        ),
        pytest.param(
            {"gpu": 2, "exporter_down": True},
            "--exporter-down: takes down the whole node's exporter; drop --gpu 2",
            id="exporter-down-on-one-gpu",
        ),
    ],
)
def test_bad_injection_is_one_line_naming_its_flag(injection: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError) as caught:
        inject(FaultSet(), **injection)

    text = str(caught.value)
    assert text.startswith(message)
    assert "\n" not in text
    assert caught.value.exit_code == 2


def test_clearing_a_gpu_without_a_node_names_the_gpu_flag() -> None:
    with pytest.raises(UsageError, match=r"^--gpu 3: needs --node"):
        FaultSet().clear(gpu=3)


def test_injecting_returns_a_new_set_and_leaves_the_old_one_alone() -> None:
    before = FaultSet()

    after = inject(before, gpu=3, xid=79)

    assert len(before) == 0
    assert after[(NODE, 3)].xid == 79


def test_later_injections_add_to_a_gpu_and_the_latest_xid_wins() -> None:
    faults = inject(FaultSet(), gpu=3, xid=79, ecc_dbe=True)
    faults = inject(faults, gpu=3, xid=48, ecc_dbe=True, row_remap_pending=True)

    fault = faults[(NODE, 3)]
    assert (fault.xid, fault.ecc_dbe_count, fault.row_remap_pending) == (48, 2, True)
    assert fault.summary() == {"xid": 48, "ecc-dbe": 2, "row-remap-pending": True}
    assert fault.describe() == "xid 48, ecc-dbe 2, row-remap-pending"


def test_a_rate_fault_counts_from_its_injection_not_from_before() -> None:
    faults = inject(FaultSet(), gpu=3, thermal_violation=True, nvlink_errors_per_s=2.0)

    at_injection = faults.effect(NODE, 3, NOW)
    later = faults.effect(NODE, 3, NOW + 10)

    assert at_injection is not None and later is not None
    assert (at_injection.thermal_us, at_injection.nvlink_errors) == (0.0, 0.0)
    assert later.thermal_us == 10 * THERMAL_US_PER_S
    assert later.nvlink_errors == 20.0


def test_changing_a_rate_keeps_what_the_counter_has_counted() -> None:
    faults = inject(FaultSet(), gpu=3, pcie_replays_per_s=5.0)
    faults = inject(faults, now=NOW + 10, gpu=3, pcie_replays_per_s=1.0)

    counts = [faults.effect(NODE, 3, NOW + t) for t in (10, 20)]

    assert [c.pcie_replays for c in counts if c] == [50.0, 60.0]


def test_node_wide_and_per_gpu_faults_merge_with_the_gpu_specific_value_winning() -> None:
    faults = inject(FaultSet(), xid=13, temp=80.0, ecc_dbe=True)
    faults = inject(faults, gpu=3, xid=79, ecc_dbe=True)

    gpu3 = faults.effect(NODE, 3, NOW)
    gpu5 = faults.effect(NODE, 5, NOW)

    assert gpu3 is not None and gpu5 is not None
    assert (gpu3.xid, gpu3.temp, gpu3.ecc_dbe) == (79, 80.0, 2)
    assert (gpu5.xid, gpu5.temp, gpu5.ecc_dbe) == (13, 80.0, 1)
    assert faults.effect(OTHER, 3, NOW) is None


@pytest.mark.parametrize(
    ("node", "gpu", "left"),
    [
        pytest.param(None, None, set(), id="everything"),
        pytest.param(NODE, None, {(OTHER, 1)}, id="one-node-all-of-it"),
        pytest.param(NODE, 3, {(NODE, None), (OTHER, 1)}, id="one-gpu-keeps-node-wide"),
    ],
)
def test_clear_removes_exactly_what_it_names(
    node: str | None, gpu: int | None, left: set[tuple[str, int | None]]
) -> None:
    faults = inject(FaultSet(), gpu=3, xid=79)
    faults = inject(faults, exporter_down=True)
    faults = inject(faults, node=OTHER, gpu=1, vanish=True)

    assert set(faults.clear(node, gpu)) == left


def test_only_node_wide_exporter_down_takes_the_exporter_down() -> None:
    faults = inject(FaultSet(), exporter_down=True)

    assert faults.exporter_down(NODE)
    assert not faults.exporter_down(OTHER)


def test_faults_survive_a_json_round_trip() -> None:
    faults = inject(FaultSet(), gpu=3, xid=79, ecc_dbe=True, temp=95.5, thermal_violation=True)
    faults = inject(faults, node=OTHER, exporter_down=True, vanish=True, retired_pending=True)
    faults = inject(faults, node=SMALL, gpu=0, row_remap_failure=True, pcie_replays_per_s=3.0)

    again = FaultSet.from_json(faults.to_json())

    assert again == faults
    assert list(again) == [(SMALL, 0), (NODE, 3), (OTHER, None)]  # node, then GPU order
    assert again[(NODE, 3)].thermal == Ramp(0.0, THERMAL_US_PER_S, NOW)


def test_the_json_holds_only_what_differs_from_a_healthy_gpu() -> None:
    text = inject(FaultSet(), gpu=3, xid=79).to_json()

    assert FaultSet.from_json(text)[(NODE, 3)] == Fault(node=NODE, gpu=3, xid=79)
    assert "vanish" not in text and "thermal" not in text


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("{not json", id="not-json"),
        pytest.param("[]", id="not-an-object"),
        pytest.param('{"version": 2, "faults": []}', id="future-version"),
        pytest.param('{"version": 1, "faults": [{"gpu": 1}]}', id="fault-without-node"),
        pytest.param('{"version": 1, "faults": [{"node": "n", "xid": "79"}]}', id="xid-as-text"),
        pytest.param('{"version": 1, "faults": [{"node": "n", "gpu": true}]}', id="gpu-as-bool"),
        pytest.param('{"version": 1, "faults": [{"node": "n", "colour": 1}]}', id="unknown-field"),
        pytest.param(
            '{"version": 1, "faults": [{"node": "n", "pcie": {"speed": 1}}]}', id="bad-ramp"
        ),
    ],
)
def test_a_bad_faults_file_is_one_line_naming_the_file(text: str) -> None:
    with pytest.raises(UsageError) as caught:
        FaultSet.from_json(text, source="/state/sim/faults.json")

    assert str(caught.value).startswith("/state/sim/faults.json: not a gridloop faults file")
    assert "\n" not in str(caught.value)


def test_injection_describes_each_change_in_flag_order() -> None:
    injection = Injection(
        node=NODE, gpu=3, xid=79, temp=95.0, thermal_violation=True, nvlink_errors_per_s=2.5
    )

    assert injection.changes() == ["xid 79", "temp 95", "thermal-violation", "nvlink-errors 2.5/s"]
    assert injection.target() == f"{NODE} GPU 3"

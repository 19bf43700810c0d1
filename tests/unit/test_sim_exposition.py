"""Simulated GPUs read like dcgm-exporter's, and a fault moves only the metrics it names."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gridloop import dcgm
from gridloop.fleet import PlannedNode, generate_fleet, parse_fleet, planned_nodes
from gridloop.sim import metrics as m
from gridloop.sim.exposition import METRICS, render_node
from gridloop.sim.faults import FaultSet
from gridloop.sim.injections import Injection

STARTED = 1_700_000_000.0
NOW = STARTED + 3600
Series = tuple[str, frozenset[tuple[str, str]]]

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\} (\S+)$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)')


def parse(text: str) -> tuple[dict[str, tuple[str, str]], dict[Series, float]]:
    """A strict little reader of the text format: (name -> (type, help), series -> value).

    It refuses HELP/TYPE after a metric's samples, a repeated HELP or series, and any line
    it does not understand, so malformed output fails the test rather than being skipped.
    """
    meta: dict[str, dict[str, str]] = {}
    samples: dict[Series, float] = {}
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            kind, name, rest = line[2:].split(" ", 2)
            assert kind.lower() not in meta.get(name, {}), f"repeated {kind} for {name}"
            assert not any(s[0] == name for s in samples), f"{kind} after samples of {name}"
            meta.setdefault(name, {})[kind.lower()] = rest
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, raw_labels, value = match.groups()
        labels = _LABEL.findall(raw_labels)
        assert ",".join(f'{k}="{v}"' for k, v in labels) == raw_labels, raw_labels
        series = (name, frozenset(labels))
        assert series not in samples, f"repeated series {series}"
        assert name in meta, f"sample of {name} before its HELP/TYPE"
        samples[series] = float(value)
    return {name: (d["type"], d["help"]) for name, d in meta.items()}, samples


def fleet_nodes(pools: list[tuple[str, str, int, int]]) -> list[PlannedNode]:
    """Nodes of one site; pools are (name, gpu model, nodes, gpus per node)."""
    doc: dict[str, Any] = {
        "apiVersion": "gridloop.io/v1alpha1",
        "kind": "Fleet",
        "metadata": {"name": "test"},
        "sites": [
            {
                "name": "us-east",
                "type": "cloud",
                "region": "us-east-1",
                "zones": ["us-east-1a"],
                "pools": [
                    {"name": n, "gpu": g, "nodes": c, "gpusPerNode": p} for n, g, c, p in pools
                ],
            }
        ],
    }
    return planned_nodes(parse_fleet(doc))


H100 = fleet_nodes([("h100", "H100-80GB", 1, 8)])[0]
GPUS = {H100.name: 8}
HEALTHY = FaultSet()


def by_gpu(samples: dict[Series, float]) -> dict[tuple[str, str], float]:
    """(metric, gpu index) -> value."""
    return {(name, dict(labels)["gpu"]): value for (name, labels), value in samples.items()}


def render(faults: FaultSet = HEALTHY, now: float = NOW, node: PlannedNode = H100) -> Any:
    return by_gpu(parse(render_node(node, faults, now, STARTED))[1])


def with_fault(now: float = STARTED, **kwargs: Any) -> FaultSet:
    return FaultSet().inject(GPUS, Injection(node=H100.name, **kwargs), now)


def test_every_gpu_has_every_metric_with_dcgm_exporter_labels() -> None:
    meta, samples = parse(render_node(H100, FaultSet(), NOW, STARTED))

    assert meta == dict(METRICS)
    assert len(samples) == 8 * len(METRICS)
    for (_, labels), _value in samples.items():
        label = dict(labels)
        i = int(label["gpu"])
        assert set(label) == set(dcgm.LABEL_NAMES)
        assert label["UUID"] == m.gpu_uuid(H100.name, i)
        assert re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", label["UUID"])
        assert re.fullmatch(r"00000000:[0-9A-F]{2}:00\.0", label["pci_bus_id"])
        assert label["device"] == f"nvidia{i}"
        assert label["modelName"] == "NVIDIA H100 80GB HBM3"
        assert label["Hostname"] == H100.name
        assert label["DCGM_FI_DRIVER_VERSION"] == m.DRIVER_VERSION


def test_samples_carry_labels_in_dcgm_exporter_order() -> None:
    first = render_node(H100, FaultSet(), NOW, STARTED).splitlines()[2]

    assert re.findall(r'(\w+)="', first) == list(dcgm.LABEL_NAMES)


@pytest.mark.parametrize(
    ("product", "model"),
    [
        ("NVIDIA-H100-80GB-HBM3", "NVIDIA H100 80GB HBM3"),
        ("NVIDIA-H200", "NVIDIA H200"),
        ("NVIDIA-A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"),
        ("NVIDIA-L40S", "NVIDIA L40S"),
    ],
)
def test_model_name_is_what_nvidia_smi_reports_for_the_product_label(
    product: str, model: str
) -> None:
    assert m.model_name(product) == model


def test_gpu_identity_is_stable_and_unique_across_the_fleet() -> None:
    nodes = fleet_nodes([("h100", "H100-80GB", 3, 8), ("l4", "L4", 2, 16)])
    uuids = [m.gpu_uuid(n.name, i) for n in nodes for i in range(n.gpus)]
    buses = {n.name: {m.pci_bus_id(i) for i in range(n.gpus)} for n in nodes}

    assert len(set(uuids)) == len(uuids) == 56
    assert all(len(b) == n.gpus for n, b in zip(nodes, buses.values(), strict=True))
    assert m.gpu_uuid(H100.name, 3) == m.gpu_uuid(H100.name, 3)


def test_the_same_instant_renders_the_same_text() -> None:
    assert render_node(H100, FaultSet(), NOW, STARTED) == render_node(
        H100, FaultSet(), NOW, STARTED
    )


def test_healthy_values_are_plausible() -> None:
    values = render()

    for i in map(str, range(8)):
        assert 0 <= values[(dcgm.GPU_UTIL, i)] <= 100
        assert 25 <= values[(dcgm.GPU_TEMP, i)] <= 80
        assert 70 <= values[(dcgm.POWER_USAGE, i)] <= 700
        assert values[(dcgm.FB_FREE, i)] + values[(dcgm.FB_USED, i)] == H100.gpu_memory_mib
        for name in (
            dcgm.XID_ERRORS,
            dcgm.ECC_DBE_VOL,
            dcgm.ROW_REMAP_FAILURE,
            dcgm.NVLINK_CRC_FLIT,
        ):
            assert values[(name, i)] == 0


@pytest.mark.parametrize(
    ("fault", "injection"),
    [
        ("xid", {"xid": 79}),
        ("ecc-dbe", {"ecc_dbe": True}),
        ("row-remap-failure", {"row_remap_failure": True}),
        ("row-remap-pending", {"row_remap_pending": True}),
        ("retired-pending", {"retired_pending": True}),
        ("temp", {"temp": 97.0}),
        ("thermal-violation", {"thermal_violation": True}),
        ("nvlink-errors", {"nvlink_errors_per_s": 3.0}),
        ("pcie-replays", {"pcie_replays_per_s": 20.0}),
    ],
)
def test_a_fault_on_gpu_3_changes_only_its_own_metrics_of_gpu_3(
    fault: str, injection: dict[str, Any]
) -> None:
    healthy = render()
    faulty = render(with_fault(gpu=3, **injection))

    changed = {key for key in healthy if healthy[key] != faulty[key]}

    assert changed == {(name, "3") for name in m.FAULT_METRICS[fault]}


def test_xid_79_on_gpu_3_reads_79_there_only() -> None:
    values = render(with_fault(gpu=3, xid=79))

    assert values[(dcgm.XID_ERRORS, "3")] == 79
    assert [values[(dcgm.XID_ERRORS, str(i))] for i in range(8) if i != 3] == [0] * 7


def test_a_vanished_gpu_loses_every_series_and_the_others_keep_theirs() -> None:
    healthy = render()
    values = render(with_fault(gpu=5, vanish=True))

    assert {gpu for _, gpu in values} == {"0", "1", "2", "3", "4", "6", "7"}
    assert values == {k: v for k, v in healthy.items() if k[1] != "5"}


def test_a_node_whose_gpus_all_vanished_renders_an_empty_body() -> None:
    assert render_node(H100, with_fault(vanish=True), NOW, STARTED) == ""


def test_counters_never_decrease_as_time_passes() -> None:
    faults = with_fault(gpu=2, thermal_violation=True, nvlink_errors_per_s=0.3)
    faults = faults.inject(GPUS, Injection(node=H100.name, pcie_replays_per_s=7.5), STARTED + 50)
    counters = [name for name, (kind, _) in METRICS.items() if kind == dcgm.COUNTER]
    times = [STARTED + t for t in (0, 1, 7, 60, 61, 300, 3600, 86400)]

    readings = [render(faults, now=t) for t in times]

    for key in readings[0]:
        if key[0] in counters:
            series = [r[key] for r in readings]
            assert series == sorted(series), key


def test_energy_grows_with_uptime() -> None:
    early, late = render(now=STARTED + 10), render(now=STARTED + 20)

    assert late[(dcgm.TOTAL_ENERGY, "0")] > early[(dcgm.TOTAL_ENERGY, "0")]


def test_thermal_violation_counts_one_second_per_second_from_injection() -> None:
    faults = with_fault(now=NOW, gpu=1, thermal_violation=True)

    at = [render(faults, now=NOW + t)[(dcgm.THERMAL_VIOLATION, "1")] for t in (0, 30, 90)]

    assert at == [0, 30_000_000, 90_000_000]


def test_a_large_fleet_renders_every_gpu_of_every_node() -> None:
    nodes = planned_nodes(parse_fleet(generate_fleet(200)))
    faults = FaultSet().inject({nodes[7].name: 8}, Injection(node=nodes[7].name, gpu=0, xid=94), 0)

    texts = [render_node(node, faults, NOW, STARTED) for node in nodes]

    assert len(nodes) == 200
    for node, text in zip(nodes, texts, strict=True):
        values = by_gpu(parse(text)[1])
        assert len(values) == node.gpus * len(METRICS)
        assert values[(dcgm.XID_ERRORS, "0")] == (94 if node is nodes[7] else 0)

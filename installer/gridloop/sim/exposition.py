"""One simulated node's GPUs as dcgm-exporter would expose them to Prometheus.

``render_node`` writes the Prometheus text format exactly as dcgm-exporter does: ``# HELP``
and ``# TYPE`` once per metric, then one sample per GPU with dcgm-exporter's labels. A
healthy GPU reads like a busy one in a training fleet: utilisation, power and temperature
drift smoothly with ``now`` around a level seeded from the node name and GPU index, so the
same instant always renders the same text. Counters integrate from ``started`` (the
exporter's start) and never fall as ``now`` grows. Injected faults move only the metrics
``metrics.FAULT_METRICS`` names for them. Which host and XID labels a sample carries is
the ``label_shapes.LabelShape`` the caller asks for (the default is the simulator's old
shape, ``Hostname`` the node's name).

A 5,000-node fleet is scraped every few seconds, so everything that does not depend on
``now`` (label strings, seeded levels) is built once per node and cached.

Pure: the clock and the faults are arguments; this module must never do I/O.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import lru_cache

from gridloop import dcgm
from gridloop.dcgm import METRICS
from gridloop.fleet import PlannedNode
from gridloop.sim import metrics as m
from gridloop.sim.faults import FaultSet, GpuEffect
from gridloop.sim.label_shapes import DEFAULT_SHAPE, LabelShape, host_label, xid_labels
from gridloop.sim.metrics import GpuProfile

__all__ = ["METRICS", "LabelShape", "render_node"]

_WAVE_PERIOD_S = 600.0 / (2 * math.pi)  # utilisation drifts over ~10 minutes
_WAVE = 0.06  # +-6 points of utilisation around the GPU's level
_HEADERS: tuple[tuple[str, str], ...] = tuple(
    (name, f"# HELP {name} {help_}\n# TYPE {name} {type_}\n")
    for name, (type_, help_) in METRICS.items()
)
_XID_COLUMN = list(METRICS).index(dcgm.XID_ERRORS)


@dataclass(frozen=True)
class _Gpu:
    """What never changes about one simulated GPU."""

    index: int
    labels: str  # '{gpu="0",UUID="GPU-...",...}'
    level: float  # mean utilisation, 0..1
    phase: float
    sm_clock: int
    fb_used_mib: int
    sbe_agg: int  # lifetime single-bit errors: a few GPUs have some, as in a real fleet
    correctable_rows: int
    energy_base_mj: int  # energy used before the exporter started


@dataclass(frozen=True)
class _Node:
    gpus: tuple[_Gpu, ...]
    profile: GpuProfile
    memory_mib: int


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _pairs(labels: tuple[tuple[str, str], ...]) -> str:
    return ",".join(f'{k}="{_escape(v)}"' for k, v in labels)


def _labels(node: PlannedNode, index: int, shape: LabelShape) -> str:
    host, host_value = host_label(shape, node.name)
    names = tuple(host if name == dcgm.HOST_LABEL else name for name in dcgm.LABEL_NAMES)
    values = (
        str(index),
        m.gpu_uuid(node.name, index),
        m.pci_bus_id(index),
        f"nvidia{index}",
        m.model_name(node.product),
        host_value,
        m.DRIVER_VERSION,
    )
    return "{" + _pairs(tuple(zip(names, values, strict=True))) + "}"


@lru_cache(maxsize=1024)
def _xid_suffix(shape: LabelShape, code: str) -> str:
    """What an XID sample of ``code`` adds inside its braces: ``,err_code="79",...``."""
    extra = xid_labels(shape, int(code))
    return "," + _pairs(extra) if extra else ""


@lru_cache(maxsize=8192)
def _node(node: PlannedNode, shape: LabelShape) -> _Node:
    prof = m.profile(node.gpu)
    gpus = []
    for i in range(node.gpus):
        # A stable hash (not hash(), which changes per process) seeds each GPU's levels.
        d = hashlib.blake2b(f"{node.name}/{i}".encode(), digest_size=8).digest()
        gpus.append(
            _Gpu(
                index=i,
                labels=_labels(node, i, shape),
                level=0.55 + 0.37 * d[0] / 255,
                phase=2 * math.pi * d[1] / 256,
                sm_clock=prof.sm_clock - 15 * (d[2] % 4),
                fb_used_mib=int(node.gpu_memory_mib * (0.35 + 0.55 * d[3] / 255)),
                sbe_agg=1 + d[5] % 3 if d[4] % 4 == 0 else 0,
                correctable_rows=1 if d[6] % 8 == 0 else 0,
                energy_base_mj=int.from_bytes(d[4:8], "big") % 1000 * 100_000_000,
            )
        )
    return _Node(tuple(gpus), prof, node.gpu_memory_mib)


def _watts(prof: GpuProfile, util: float) -> float:
    return prof.idle_watts + (prof.max_watts - prof.idle_watts) * 0.92 * util


def _values(n: _Node, g: _Gpu, now: float, started: float, fx: GpuEffect | None) -> list[str]:
    """One GPU's samples, in METRICS order."""
    prof = n.profile
    util = min(1.0, max(0.0, g.level + _WAVE * math.sin(now / _WAVE_PERIOD_S + g.phase)))
    gpu_temp = round(32 + 40 * util)
    uptime = max(0.0, now - started)
    # Energy integrates the GPU's mean power, so it rises steadily whatever the wave does.
    energy = g.energy_base_mj + int(_watts(prof, g.level) * uptime * 1000)
    v: dict[str, int | str] = {
        dcgm.SM_CLOCK: g.sm_clock,
        dcgm.MEM_CLOCK: prof.mem_clock,
        dcgm.MEMORY_TEMP: gpu_temp + 5,
        dcgm.GPU_TEMP: gpu_temp,
        dcgm.POWER_USAGE: f"{_watts(prof, util):.3f}",
        dcgm.TOTAL_ENERGY: energy,
        dcgm.PCIE_REPLAY: 0,
        dcgm.GPU_UTIL: round(100 * util),
        dcgm.MEM_COPY_UTIL: round(45 * util),
        dcgm.XID_ERRORS: 0,
        dcgm.POWER_VIOLATION: 0,
        dcgm.THERMAL_VIOLATION: 0,
        dcgm.FB_FREE: n.memory_mib - g.fb_used_mib,
        dcgm.FB_USED: g.fb_used_mib,
        dcgm.ECC_SBE_VOL: 0,
        dcgm.ECC_DBE_VOL: 0,
        dcgm.ECC_SBE_AGG: g.sbe_agg,
        dcgm.ECC_DBE_AGG: 0,
        dcgm.RETIRED_SBE: 0,
        dcgm.RETIRED_DBE: 0,
        dcgm.RETIRED_PENDING: 0,
        dcgm.NVLINK_CRC_FLIT: 0,
        dcgm.NVLINK_CRC_DATA: 0,
        dcgm.NVLINK_REPLAY: 0,
        dcgm.NVLINK_RECOVERY: 0,
        dcgm.UNCORRECTABLE_REMAPPED_ROWS: 0,
        dcgm.CORRECTABLE_REMAPPED_ROWS: g.correctable_rows,
        dcgm.ROW_REMAP_FAILURE: 0,
        dcgm.ROW_REMAP_PENDING: 0,
    }
    if fx is not None:
        _apply(v, fx)
    return [str(v[name]) for name, _ in _HEADERS]


def _apply(v: dict[str, int | str], fx: GpuEffect) -> None:
    """Overwrite exactly the metrics each fault names (see ``metrics.FAULT_METRICS``)."""
    if fx.xid:
        v[dcgm.XID_ERRORS] = fx.xid
    if fx.ecc_dbe:
        v[dcgm.ECC_DBE_VOL] = fx.ecc_dbe
        v[dcgm.ECC_DBE_AGG] = fx.ecc_dbe
    if fx.row_remap_failure:
        v[dcgm.ROW_REMAP_FAILURE] = 1
    if fx.row_remap_pending:
        v[dcgm.ROW_REMAP_PENDING] = 1
    if fx.retired_pending:
        v[dcgm.RETIRED_PENDING] = 1
    if fx.temp is not None:
        v[dcgm.GPU_TEMP] = round(fx.temp)  # DCGM reports whole degrees
    if fx.thermal_us:
        v[dcgm.THERMAL_VIOLATION] = int(fx.thermal_us)
    if fx.nvlink_errors:
        v[dcgm.NVLINK_CRC_FLIT] = int(fx.nvlink_errors)
    if fx.pcie_replays:
        v[dcgm.PCIE_REPLAY] = int(fx.pcie_replays)


def render_node(
    node: PlannedNode,
    faults: FaultSet,
    now: float,
    started: float,
    shape: LabelShape = DEFAULT_SHAPE,
) -> str:
    """The body of ``GET /metrics`` of this node's dcgm-exporter at ``now``, its samples
    labelled in ``shape``.

    Vanished GPUs have no samples; a metric with no samples left has no HELP/TYPE either,
    and a node whose every GPU vanished renders as an empty (still valid) body.
    """
    tpl = _node(node, shape)
    rows: list[tuple[str, list[str]]] = []
    for g in tpl.gpus:
        fx = faults.effect(node.name, g.index, now)
        if fx is not None and fx.vanish:
            continue
        rows.append((g.labels, _values(tpl, g, now, started, fx)))
    if not rows:
        return ""
    out: list[str] = []
    for k, (name, header) in enumerate(_HEADERS):
        out.append(header)
        if k == _XID_COLUMN and shape.xid_labels:
            # each XID code is a series of its own, as dcgm-exporter 4.x labels them
            out.extend(
                f"{name}{labels[:-1]}{_xid_suffix(shape, values[k])}}} {values[k]}\n"
                for labels, values in rows
            )
            continue
        out.extend([f"{name}{labels} {values[k]}\n" for labels, values in rows])
    return "".join(out)

"""What the simulated GPUs read: the faults it can inject, each GPU model's figures, and
the labels that identify each GPU.

The metric names, types, help texts and label names are dcgm-exporter's own, from
gridloop.dcgm (the one list the health service, dashboards and tests also read), so
recording rules, alerts and dashboards written against the simulator work unchanged on
real GPU nodes. ``FAULT_METRICS`` says which metrics each injectable fault moves, so a
test or a reader can check that a fault changes those and nothing else.

GPU identity (UUID, PCI bus id, device, model name) is derived deterministically from the
node name and GPU index: a restarted simulator serves the same series, and the health
service sees the same GPU UUIDs across restarts, as it would on real hardware.

Pure data and pure functions: this module must never read files or the clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gridloop import dcgm
from gridloop.fleet.catalog import GPU_MODELS

# The data-centre driver branch current when this was written (R570).
DRIVER_VERSION = "570.124.06"

# Fault (as named by its `gridloop sim inject` flag) -> the metrics it changes. A double-bit
# error counts in both the volatile and the persistent total, as on a real GPU; NVLink
# errors show up as flow-control CRC errors, the usual symptom of a bad link. `vanish`
# removes every series of the GPU and `exporter-down` fails the whole scrape.
FAULT_METRICS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "xid": (dcgm.XID_ERRORS,),
        "ecc-dbe": (dcgm.ECC_DBE_VOL, dcgm.ECC_DBE_AGG),
        "row-remap-failure": (dcgm.ROW_REMAP_FAILURE,),
        "row-remap-pending": (dcgm.ROW_REMAP_PENDING,),
        "retired-pending": (dcgm.RETIRED_PENDING,),
        "temp": (dcgm.GPU_TEMP,),
        "thermal-violation": (dcgm.THERMAL_VIOLATION,),
        "nvlink-errors": (dcgm.NVLINK_CRC_FLIT,),
        "pcie-replays": (dcgm.PCIE_REPLAY,),
        "vanish": tuple(dcgm.METRICS),
        "exporter-down": tuple(dcgm.METRICS),
    }
)


@dataclass(frozen=True)
class GpuProfile:
    """What a busy GPU of one model reads: clocks in MHz, power in W."""

    sm_clock: int
    mem_clock: int
    idle_watts: float
    max_watts: float


# Keyed by the fleet catalog's model names, from the catalog's figures (the boost clocks
# and TDPs of the parts it lists).
GPU_PROFILES: Mapping[str, GpuProfile] = MappingProxyType(
    {
        m.name: GpuProfile(m.sm_clock_mhz, m.mem_clock_mhz, m.idle_watts, m.max_watts)
        for m in GPU_MODELS.values()
    }
)
DEFAULT_PROFILE = GpuProfile(1500, 1500, 50.0, 400.0)

# nvidia-smi names that keep a '-' which GPU Feature Discovery's product label cannot show
# (GFD turns every space into '-'): the reverse mapping is ambiguous only for these.
_MODEL_NAME_EXCEPTIONS: Mapping[str, str] = MappingProxyType(
    {
        "NVIDIA-A100-SXM4-80GB": "NVIDIA A100-SXM4-80GB",
        "NVIDIA-A100-SXM4-40GB": "NVIDIA A100-SXM4-40GB",
    }
)

# PCI buses of the eight GPUs of a DGX H100; larger nodes continue the pattern.
_DGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
_UUID_NAMESPACE = uuid.UUID("5c0f1d9e-6a3b-4c1e-9b1f-67726964706c")  # fixed: UUIDs stay stable


def model_name(product: str) -> str:
    """The ``modelName`` dcgm-exporter reports for a GFD product label value."""
    return _MODEL_NAME_EXCEPTIONS.get(product) or product.replace("-", " ")


def gpu_uuid(node: str, index: int) -> str:
    """A GPU UUID in NVIDIA's format, the same for the same node and index every time."""
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{node}/{index}')}"


def pci_bus_id(index: int) -> str:
    """The PCI bus id of GPU ``index`` of a node, in dcgm-exporter's 8-digit-domain format."""
    bus = _DGX_BUSES[index] if index < len(_DGX_BUSES) else 0x0C + 0x10 * index
    return f"00000000:{bus % 0x100:02X}:00.0"


def profile(gpu_model: str) -> GpuProfile:
    """The profile for a catalog model name; unknown models get plausible generic figures."""
    return GPU_PROFILES.get(gpu_model, DEFAULT_PROFILE)

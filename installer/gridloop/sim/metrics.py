"""The dcgm-exporter metrics the simulator serves, and the labels that identify each GPU.

Names, types and help texts are dcgm-exporter's own (its ``etc/default-counters.csv``), so
recording rules, alerts and dashboards written against the simulator work unchanged on
real GPU nodes. ``METRICS`` is the one list of metric names: the exposition renders it in
this order, and the health service, dashboards and tests import it rather than retyping
names. ``FAULT_METRICS`` says which metrics each injectable fault moves, so a test or a
reader can check that a fault changes those and nothing else.

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

# The data-centre driver branch current when this was written (R570).
DRIVER_VERSION = "570.124.06"

GAUGE = "gauge"
COUNTER = "counter"

SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"
MEM_CLOCK = "DCGM_FI_DEV_MEM_CLOCK"
GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
MEMORY_TEMP = "DCGM_FI_DEV_MEMORY_TEMP"
POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"
TOTAL_ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
MEM_COPY_UTIL = "DCGM_FI_DEV_MEM_COPY_UTIL"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
FB_USED = "DCGM_FI_DEV_FB_USED"
XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"
ECC_SBE_VOL = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"
ECC_DBE_VOL = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
ECC_SBE_AGG = "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"
ECC_DBE_AGG = "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"
RETIRED_SBE = "DCGM_FI_DEV_RETIRED_SBE"
RETIRED_DBE = "DCGM_FI_DEV_RETIRED_DBE"
RETIRED_PENDING = "DCGM_FI_DEV_RETIRED_PENDING"
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
ROW_REMAP_PENDING = "DCGM_FI_DEV_ROW_REMAP_PENDING"
UNCORRECTABLE_REMAPPED_ROWS = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
CORRECTABLE_REMAPPED_ROWS = "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"
THERMAL_VIOLATION = "DCGM_FI_DEV_THERMAL_VIOLATION"
POWER_VIOLATION = "DCGM_FI_DEV_POWER_VIOLATION"
NVLINK_CRC_FLIT = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
NVLINK_CRC_DATA = "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL"
NVLINK_REPLAY = "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"
NVLINK_RECOVERY = "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"
PCIE_REPLAY = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"

# name -> (type, help), in the order dcgm-exporter's counter file lists them. Retired-page
# counts are counters there too, although a pending count can fall once pages retire.
METRICS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        SM_CLOCK: (GAUGE, "SM clock frequency (in MHz)."),
        MEM_CLOCK: (GAUGE, "Memory clock frequency (in MHz)."),
        MEMORY_TEMP: (GAUGE, "Memory temperature (in C)."),
        GPU_TEMP: (GAUGE, "GPU temperature (in C)."),
        POWER_USAGE: (GAUGE, "Power draw (in W)."),
        TOTAL_ENERGY: (COUNTER, "Total energy consumption since boot (in mJ)."),
        PCIE_REPLAY: (COUNTER, "Total number of PCIe retries."),
        GPU_UTIL: (GAUGE, "GPU utilization (in %)."),
        MEM_COPY_UTIL: (GAUGE, "Memory utilization (in %)."),
        XID_ERRORS: (GAUGE, "Value of the last XID error encountered."),
        POWER_VIOLATION: (COUNTER, "Throttling duration due to power constraints (in us)."),
        THERMAL_VIOLATION: (COUNTER, "Throttling duration due to thermal constraints (in us)."),
        FB_FREE: (GAUGE, "Framebuffer memory free (in MiB)."),
        FB_USED: (GAUGE, "Framebuffer memory used (in MiB)."),
        ECC_SBE_VOL: (COUNTER, "Total number of single-bit volatile ECC errors."),
        ECC_DBE_VOL: (COUNTER, "Total number of double-bit volatile ECC errors."),
        ECC_SBE_AGG: (COUNTER, "Total number of single-bit persistent ECC errors."),
        ECC_DBE_AGG: (COUNTER, "Total number of double-bit persistent ECC errors."),
        RETIRED_SBE: (COUNTER, "Total number of retired pages due to single-bit errors."),
        RETIRED_DBE: (COUNTER, "Total number of retired pages due to double-bit errors."),
        RETIRED_PENDING: (COUNTER, "Total number of pages pending retirement."),
        NVLINK_CRC_FLIT: (COUNTER, "Total number of NVLink flow-control CRC errors."),
        NVLINK_CRC_DATA: (COUNTER, "Total number of NVLink data CRC errors."),
        NVLINK_REPLAY: (COUNTER, "Total number of NVLink retries."),
        NVLINK_RECOVERY: (COUNTER, "Total number of NVLink recovery errors."),
        UNCORRECTABLE_REMAPPED_ROWS: (
            COUNTER,
            "Number of remapped rows for uncorrectable errors",
        ),
        CORRECTABLE_REMAPPED_ROWS: (COUNTER, "Number of remapped rows for correctable errors"),
        ROW_REMAP_FAILURE: (GAUGE, "Whether remapping of rows has failed"),
        ROW_REMAP_PENDING: (GAUGE, "Whether remapping of rows is pending"),
    }
)

# Fault (as named by its `gridloop sim inject` flag) -> the metrics it changes. A double-bit
# error counts in both the volatile and the persistent total, as on a real GPU; NVLink
# errors show up as flow-control CRC errors, the usual symptom of a bad link. `vanish`
# removes every series of the GPU and `exporter-down` fails the whole scrape.
FAULT_METRICS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "xid": (XID_ERRORS,),
        "ecc-dbe": (ECC_DBE_VOL, ECC_DBE_AGG),
        "row-remap-failure": (ROW_REMAP_FAILURE,),
        "row-remap-pending": (ROW_REMAP_PENDING,),
        "retired-pending": (RETIRED_PENDING,),
        "temp": (GPU_TEMP,),
        "thermal-violation": (THERMAL_VIOLATION,),
        "nvlink-errors": (NVLINK_CRC_FLIT,),
        "pcie-replays": (PCIE_REPLAY,),
        "vanish": tuple(METRICS),
        "exporter-down": tuple(METRICS),
    }
)

# The labels dcgm-exporter puts on every sample, in its order. HOST_LABEL is its own host
# label: how it is spelled and what it says depends on the label shape (label_shapes.py).
HOST_LABEL = "Hostname"
LABEL_NAMES: tuple[str, ...] = (
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    HOST_LABEL,
    "DCGM_FI_DRIVER_VERSION",
)


@dataclass(frozen=True)
class GpuProfile:
    """What a busy GPU of one model reads: clocks in MHz, power in W."""

    sm_clock: int
    mem_clock: int
    idle_watts: float
    max_watts: float


# Keyed by the fleet catalog's model names; figures are the boost clocks and TDPs of the
# SXM (or PCIe) parts the catalog lists.
GPU_PROFILES: Mapping[str, GpuProfile] = MappingProxyType(
    {
        "H100-80GB": GpuProfile(1980, 2619, 70.0, 700.0),
        "H200-141GB": GpuProfile(1980, 3201, 75.0, 700.0),
        "B200": GpuProfile(1965, 3996, 120.0, 1000.0),
        "A100-80GB": GpuProfile(1410, 1593, 55.0, 400.0),
        "A100-40GB": GpuProfile(1410, 1215, 52.0, 400.0),
        "L40S": GpuProfile(2520, 9001, 35.0, 350.0),
        "L4": GpuProfile(2040, 6251, 16.0, 72.0),
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

"""DCGM as dcgm-exporter shows it to Prometheus: the field names, their types and help
texts (dcgm-exporter's own `etc/default-counters.csv`), and the labels it puts on every
sample, host label spellings among them. The simulator serves these, the health service
queries them, the dashboards and alerts draw them: each name is spelled here only (the
ground floor: pure data, importable with the health service's dependencies alone)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

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

# The labels dcgm-exporter puts on every sample, in its order. HOST_LABEL is its own host
# label: how it is spelled and what it says depends on the exporter's version and settings
# (the simulator's label_shapes.py serves each).
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
# Every spelling of the host label the exporter's versions use (`Hostname`, older
# `hostname`): the pod's name unless the DaemonSet sets NODE_NAME.
HOST_LABELS = (HOST_LABEL, HOST_LABEL.lower())

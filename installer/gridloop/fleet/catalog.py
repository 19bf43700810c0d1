"""The GPU models a fleet file may name, and what a node of each looks like.

A fleet file says ``gpu: H100-80GB``; everything derived from it (node labels, Kueue
resource flavors, the DCGM simulator, dashboards) needs the facts behind that name: the
``nvidia.com/gpu.product`` and ``nvidia.com/gpu.memory`` values that NVIDIA GPU Feature
Discovery would put on a real node, and the instance shape a node of that model usually has.
Keeping them in one frozen table means a simulated node carries exactly the labels a real
one would, so selectors written against the simulator keep working on real hardware.

This module is pure data: it must never read files, the cluster or the environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class GpuModel:
    """One GPU model and the shape of an 8-GPU node built from it.

    ``cpu_cores`` and ``memory_gi`` describe a whole 8-GPU node (the cloud instance type);
    nodes with fewer or more GPUs scale them proportionally.
    """

    name: str
    product: str
    memory_mib: int
    cloud_instance_type: str
    on_prem_instance_type: str
    cpu_cores: int
    memory_gi: int
    # what a busy GPU of the model reads, for the DCGM simulator: the boost SM and memory
    # clocks (MHz), idle and maximum board power (W, the TDP) of the part
    sm_clock_mhz: int
    mem_clock_mhz: int
    idle_watts: float
    max_watts: float

    def instance_type(self, site_type: str) -> str:
        """The instance type a pool gets when the fleet file does not name one."""
        return self.on_prem_instance_type if site_type == "on-prem" else self.cloud_instance_type


def _table(*models: GpuModel) -> Mapping[str, GpuModel]:
    return MappingProxyType({model.name: model for model in models})


# Product strings and memory sizes are what GPU Feature Discovery / nvidia-smi report on
# the SXM (or PCIe for L40S and L4) parts; instance shapes are the AWS 8-GPU instances and
# the NVIDIA DGX / OVX systems a data centre would buy.
GPU_MODELS: Mapping[str, GpuModel] = _table(
    GpuModel(
        name="H100-80GB",
        product="NVIDIA-H100-80GB-HBM3",
        memory_mib=81559,
        cloud_instance_type="p5.48xlarge",
        on_prem_instance_type="dgx-h100",
        cpu_cores=192,
        memory_gi=2048,
        sm_clock_mhz=1980,
        mem_clock_mhz=2619,
        idle_watts=70.0,
        max_watts=700.0,
    ),
    GpuModel(
        name="H200-141GB",
        product="NVIDIA-H200",
        memory_mib=143771,
        cloud_instance_type="p5en.48xlarge",
        on_prem_instance_type="dgx-h200",
        cpu_cores=192,
        memory_gi=2048,
        sm_clock_mhz=1980,
        mem_clock_mhz=3201,
        idle_watts=75.0,
        max_watts=700.0,
    ),
    GpuModel(
        name="B200",
        product="NVIDIA-B200",
        memory_mib=183359,
        cloud_instance_type="p6-b200.48xlarge",
        on_prem_instance_type="dgx-b200",
        cpu_cores=192,
        memory_gi=2048,
        sm_clock_mhz=1965,
        mem_clock_mhz=3996,
        idle_watts=120.0,
        max_watts=1000.0,
    ),
    GpuModel(
        name="A100-80GB",
        product="NVIDIA-A100-SXM4-80GB",
        memory_mib=81920,
        cloud_instance_type="p4de.24xlarge",
        on_prem_instance_type="dgx-a100",
        cpu_cores=96,
        memory_gi=1152,
        sm_clock_mhz=1410,
        mem_clock_mhz=1593,
        idle_watts=55.0,
        max_watts=400.0,
    ),
    GpuModel(
        name="A100-40GB",
        product="NVIDIA-A100-SXM4-40GB",
        memory_mib=40960,
        cloud_instance_type="p4d.24xlarge",
        on_prem_instance_type="dgx-a100-320g",
        cpu_cores=96,
        memory_gi=1152,
        sm_clock_mhz=1410,
        mem_clock_mhz=1215,
        idle_watts=52.0,
        max_watts=400.0,
    ),
    GpuModel(
        name="L40S",
        product="NVIDIA-L40S",
        memory_mib=46068,
        cloud_instance_type="g6e.48xlarge",
        on_prem_instance_type="ovx-l40s",
        cpu_cores=192,
        memory_gi=1536,
        sm_clock_mhz=2520,
        mem_clock_mhz=9001,
        idle_watts=35.0,
        max_watts=350.0,
    ),
    GpuModel(
        name="L4",
        product="NVIDIA-L4",
        memory_mib=23034,
        cloud_instance_type="g6.48xlarge",
        on_prem_instance_type="pcie-l4-8x",
        cpu_cores=192,
        memory_gi=768,
        sm_clock_mhz=2040,
        mem_clock_mhz=6251,
        idle_watts=16.0,
        max_watts=72.0,
    ),
)

KNOWN_GPU_MODELS: tuple[str, ...] = tuple(sorted(GPU_MODELS))


def gpu_model(name: str) -> GpuModel:
    """The catalog entry for ``name``; KeyError if the model is unknown."""
    return GPU_MODELS[name]

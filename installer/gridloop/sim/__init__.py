"""A dcgm-exporter simulator for the local cluster's kwok-simulated GPU fleet.

The local cluster has no GPUs, yet the GPU health service, its alerts and the dashboards
read NVIDIA dcgm-exporter metrics through a real Prometheus. This package serves those
metrics, with dcgm-exporter's real names and labels, for every GPU of every node in the
fleet file, and lets a person inject faults (`gridloop sim inject --node N --xid 79`) to
watch the health service react.

- ``metrics``: the metric names, types and help texts, and GPU identity labels;
- ``injections``, ``faults``: what may be injected and the fault set in force (pure);
- ``exposition``: one node's GPUs rendered in the Prometheus text format (pure);
- ``label_shapes``: which host and XID labels a series carries, per real exporter (pure);
- ``storing``: the faults file, replaced atomically (I/O);
- ``server``, ``commands``: the HTTP shell and the `gridloop sim` command line;
- ``pod_discovery``: the server's HTTP service discovery for the local Prometheus.

Only the discovery reads the cluster (pods, by label, through the server's client);
nothing here writes to it.
"""

from gridloop.dcgm import METRICS
from gridloop.sim.exposition import render_node
from gridloop.sim.faults import Fault, FaultSet, GpuEffect, Ramp
from gridloop.sim.injections import Injection
from gridloop.sim.metrics import FAULT_METRICS, gpu_uuid, model_name, pci_bus_id
from gridloop.sim.storing import read_faults, update_faults, write_faults

__all__ = [
    "FAULT_METRICS",
    "METRICS",
    "Fault",
    "FaultSet",
    "GpuEffect",
    "Injection",
    "Ramp",
    "gpu_uuid",
    "model_name",
    "pci_bus_id",
    "read_faults",
    "render_node",
    "update_faults",
    "write_faults",
]

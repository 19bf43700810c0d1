"""Which host and XID labels a simulated GPU series carries: the shapes real exporters emit.

A real dcgm-exporter's series do not all look alike, and the health service must read
each shape (``gridloop.health.reading.resolve``). The simulator emits one, chosen with
``--label-shape`` (``SHAPES`` says what each is):

- ``legacy``, the default and what the simulator always emitted: ``Hostname`` is the
  node's name and the XID series has no error labels;
- ``nodename``: dcgm-exporter 4.x run with ``NODE_NAME`` from ``spec.nodeName``;
- ``lowercase``: the same, with the host label spelled ``hostname``;
- ``podname``: dcgm-exporter 4.x without ``NODE_NAME``, so ``Hostname`` is the pod's name.
  NVIDIA's own DaemonSet (``dcgm-exporter.yaml`` of the release) sets no ``NODE_NAME``.

What upstream does, as read in NVIDIA/dcgm-exporter's main branch (the bundle pins 4.8.3):

- ``internal/pkg/hostname/hostname.go``: ``getLocalHostname`` returns ``NODE_NAME`` when
  set, else ``os.Hostname()``, which in a pod is the pod's name;
- ``internal/pkg/rendermetrics/render_metrics.go``: a GPU sample's labels are ``gpu``,
  ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, then ``Hostname`` (only when not
  empty), then the label fields (``DCGM_FI_DRIVER_VERSION``), then the attributes in
  name order; its NVLink samples spell the host label ``hostname``;
- ``internal/pkg/collector/gpu_collector.go`` (``toMetric``): every
  ``DCGM_FI_DEV_XID_ERRORS`` sample, 0 included, gets the attributes
  ``err_code`` (the value) and ``err_msg`` (``xidErrCodeToText[code]``, or
  ``"Unknown Error"`` past the table), so each code is a series of its own;
- ``internal/pkg/collector/xid_errors.go``: ``xidErrCodeToText``, from NVIDIA's XID
  catalogue. The labels came with pull request #309 (April 2024), first released in
  3.3.6-3.4.2 (issue #308), and are in every 4.x.

In ``podname`` only the scrape knows the node: the chart's ServiceMonitor relabels
``__meta_kubernetes_pod_node_name`` into ``node``, and the local Prometheus attaches
``node`` to each simulated exporter's target the same way
(``gridloop.local.prometheus_config.prometheus_config``). So the simulator never writes ``node``: no
exporter does, and Prometheus would keep the target's and rename the exporter's
``exported_node``.

Pure: this module must never do I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType

from gridloop.errors import UsageError

FLAG = "--label-shape"


class LabelShape(Enum):
    LEGACY = "legacy"
    NODENAME = "nodename"
    LOWERCASE = "lowercase"
    PODNAME = "podname"

    @property
    def host_label(self) -> str:
        return "hostname" if self is LabelShape.LOWERCASE else "Hostname"

    @property
    def xid_labels(self) -> bool:
        """Whether the XID series carries ``err_code`` and ``err_msg``."""
        return self is not LabelShape.LEGACY


DEFAULT_SHAPE = LabelShape.LEGACY

SHAPES: Mapping[LabelShape, str] = MappingProxyType(
    {
        LabelShape.LEGACY: "Hostname is the node's name; XID without err_code/err_msg",
        LabelShape.NODENAME: "dcgm-exporter 3.3.6 to 4.8.2 with NODE_NAME: Hostname is the "
        "node's name",
        LabelShape.LOWERCASE: "dcgm-exporter 4.8.3 on (the pinned 4.6.0-4.8.3) with NODE_NAME: "
        "hostname is the node's name",
        LabelShape.PODNAME: "dcgm-exporter 4.x without NODE_NAME: Hostname is the pod's name, "
        "the node only in the scrape's node label",
    }
)

# err_msg for the codes gridloop's health policy names (quarantine and count classes, and
# 63), as dcgm-exporter's xid_errors.go spells them. Any other code reads "Unknown Error",
# which upstream writes only past its table: the health service reads err_code's series,
# never the message.
XID_MESSAGES: Mapping[int, str] = MappingProxyType(
    {
        0: "No Error",
        13: "Graphics Engine Exception",
        31: "GPU memory page fault",
        43: "GPU stopped processing",
        45: "Preemptive cleanup, due to previous errors -- Most likely to see when running "
        "multiple cuda",
        48: "Double Bit ECC Error",
        54: "Auxiliary power is not connected to the GPU board",
        56: "Display Engine error",
        57: "Error programming video memory interface",
        62: "Internal micro-controller halt",
        63: "ECC page retirement or row remapping recording event",
        64: "ECC page retirement or row remapper recording failure",
        68: "NVDEC0 Exception",
        69: "Graphics Engine class error",
        74: "NVLINK Error",
        79: "GPU has fallen off the bus",
        92: "High single-bit ECC error rate",
        94: "Contained ECC error",
        95: "Uncontained ECC error",
        119: "GSP RPC Timeout",
        120: "GSP Error",
        122: "SPI PMU RPC Read Failure",
        123: "SPI PMU RPC Write Failure",
        140: "Unrecovered ECC Error",
    }
)
UNKNOWN_XID = "Unknown Error"

_DAEMONSET = "dcgm-exporter"  # the DaemonSet of NVIDIA's release manifest
_POD_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' generated-name alphabet


def parse_shape(raw: str | None) -> LabelShape:
    """The shape a person named; None is the default. UsageError naming the flag else."""
    if raw is None:
        return DEFAULT_SHAPE
    try:
        return LabelShape(raw)
    except ValueError:
        names = ", ".join(s.value for s in LabelShape)
        raise UsageError(f"{FLAG} {raw}: must be one of {names}") from None


def shapes_help() -> str:
    """The flag's help text: one clause per shape."""
    shapes = "; ".join(f"{shape.value}: {text}" for shape, text in SHAPES.items())
    return f"which real exporter's host and XID labels (default {DEFAULT_SHAPE.value}): {shapes}"


def pod_name(node: str) -> str:
    """The node's exporter pod, named as a DaemonSet names it, the same every time."""
    digest = hashlib.blake2b(node.encode(), digest_size=5).digest()
    return _DAEMONSET + "-" + "".join(_POD_SUFFIX[b % len(_POD_SUFFIX)] for b in digest)


def host_label(shape: LabelShape, node: str) -> tuple[str, str]:
    """(name, value) of the exporter's own host label on the node's series."""
    return shape.host_label, pod_name(node) if shape is LabelShape.PODNAME else node


def xid_labels(shape: LabelShape, code: int) -> tuple[tuple[str, str], ...]:
    """The labels an XID sample of ``code`` adds after the GPU's own, in upstream's order."""
    if not shape.xid_labels:
        return ()
    return (("err_code", str(code)), ("err_msg", XID_MESSAGES.get(code, UNKNOWN_XID)))

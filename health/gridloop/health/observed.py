"""What one cycle sees, as plain data: GPU readings from Prometheus, nodes from the API.

Built by the reading and listing shell (one Prometheus query per signal family
for the whole fleet, one node list) and handed to `plan()`. Nothing here does
I/O; the record of what gridloop did to a node lives in that node's
annotations, so a restarted service reads its own past from `NodeView`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gridloop import names

# what gridloop writes on a node it quarantines (the record `plan()` reads back)
ANNOTATION_PREFIX = names.HEALTH_ANNOTATION_PREFIX
QUARANTINED_AT = ANNOTATION_PREFIX + "quarantined-at"
REASON = ANNOTATION_PREFIX + "reason"
GPUS = ANNOTATION_PREFIX + "gpus"
FAULTS = ANNOTATION_PREFIX + "faults"
HEALTHY_SINCE = ANNOTATION_PREFIX + "healthy-since"
ACKNOWLEDGED = ANNOTATION_PREFIX + "acknowledged-faults"
QUARANTINED_BY = ANNOTATION_PREFIX + "quarantined-by"
STATE_LABEL = names.HEALTH_STATE_LABEL
TAINT_KEY = names.QUARANTINE_TAINT_KEY
MANAGER = "gridloop-health"


@dataclass(frozen=True)
class GpuReading:
    """One GPU's signals this cycle (missing series read as healthy values)."""

    uuid: str
    index: str = ""
    xid: int = 0  # the last XID code the GPU reported; 0 means none
    xid_repeats: int = 0  # application-class XIDs seen within the repeat window
    ecc_dbe_increase: float = 0.0  # double-bit volatile errors added within the window
    row_remap_failure: bool = False
    row_remap_pending: bool = False
    retired_pages_pending: bool = False
    thermal_violation: float = 0.0  # fraction of the window spent throttled
    power_violation: float = 0.0
    nvlink_error_rate: float = 0.0  # errors per second over the window
    pcie_replay_rate: float = 0.0


# why a DCGM-named series is not read as any node's (reading.place, reading.others)
OTHER_SCRAPE = "other-scrape"  # another scrape job's, or the exporter job's in another namespace
NO_NODE = "no-node"  # the exporter's, without the `node` its scrape attaches
HOST_MISMATCH = "host-mismatch"  # its own host label names a node its target is not on
IGNORED_REASONS = (OTHER_SCRAPE, NO_NODE, HOST_MISMATCH)


@dataclass(frozen=True)
class Ignored:
    """Series the service ignores, of one source: why, which source, how many."""

    reason: str  # one of IGNORED_REASONS
    source: str  # "job vllm, namespace team-default"; "Hostname=gpu-1 on node gpu-2"
    series: int

    def __str__(self) -> str:
        return f"{self.series} from {self.source} ({self.reason})"


@dataclass(frozen=True)
class Record:
    """gridloop's own record on a node, read back from its annotations."""

    quarantined_at: float
    faults: frozenset[str]
    healthy_since: float | None = None


@dataclass(frozen=True)
class NodeView:
    name: str
    pool: str  # "<site>/<pool>": the breaker's per-pool scope
    gpus_expected: int
    unschedulable: bool = False
    opted_out: bool = False
    record: Record | None = None  # set when gridloop quarantined this node
    acknowledged: frozenset[str] = frozenset()  # faults a human overrode by uncordoning
    ready: bool = True  # the Ready condition is True
    # the node's labels: which Kueue ResourceFlavors its GPUs count for (capacity.py)
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Observed:
    nodes: dict[str, NodeView]
    gpus: dict[str, dict[str, GpuReading]] = field(default_factory=dict)  # node -> uuid -> reading
    exporter_up: dict[str, bool] = field(default_factory=dict)
    newest_sample_age_s: float | None = None  # None: Prometheus returned nothing at all
    prometheus_error: str | None = None
    # the `node` labels of the exporter's GPU series that name no known node
    unmatched: tuple[str, ...] = ()
    # DCGM-named series read as no node's: another scrape's, or the exporter's own without
    # a node or on another node than their host label says (reading.place)
    ignored: tuple[Ignored, ...] = ()
    # this cycle's own read of the fault events (XID, ECC DBE), alone: the GPUs it names,
    # with only those fields set, and how old the newest exporter scrape was when it was
    # read (None: not known). With a late baseline these still decide quarantines.
    fault_gpus: dict[str, dict[str, GpuReading]] = field(default_factory=dict)
    faults_read_age_s: float | None = None
    # why the last background read failed, while its answers age (None: it did not)
    baseline_error: str | None = None


@dataclass(frozen=True)
class Breaker:
    """The circuit breaker's state (kept in the status ConfigMap)."""

    tripped: bool = False
    reason: str = ""
    # (time, node, pool) of every quarantine inside the sliding window
    recent: tuple[tuple[float, str, str], ...] = ()

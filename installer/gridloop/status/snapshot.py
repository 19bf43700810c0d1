"""What `gridloop status` saw, as plain data: one immutable Snapshot per refresh.

Built by collecting.py from the API server and Prometheus; views.py, printing.py
and the UI only read it. A source that could not be read leaves its last good data
in place and a line in `problems`, so a view can show stale data and say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# a node's verdict, worst first (sorting by verdict puts trouble on top)
QUARANTINED = "quarantined"
NOT_READY = "not-ready"
EXPORTER_DOWN = "exporter-down"
GPUS_MISSING = "gpus-missing"
CORDONED = "cordoned"
OPTED_OUT = "opted-out"
HEALTHY = "healthy"
VERDICTS = (QUARANTINED, NOT_READY, EXPORTER_DOWN, GPUS_MISSING, CORDONED, OPTED_OUT, HEALTHY)


@dataclass(frozen=True)
class Node:
    name: str
    site: str
    pool: str
    region: str
    product: str
    gpus: int  # allocatable nvidia.com/gpu
    allocated: int = 0  # requested by pods bound to the node and not finished
    reporting: int | None = None  # GPUs with DCGM samples; None: Prometheus not read
    exporter_up: bool | None = None  # None: Prometheus not read
    ready: bool = True
    unschedulable: bool = False
    quarantined_by: str = ""  # the manager that quarantined it (gridloop-health), or ""
    reason: str = ""  # gridloop's recorded reason
    faulty: tuple[str, ...] = ()  # the GPU UUIDs gridloop's record names
    quarantined_at: str = ""
    opted_out: bool = False
    taints: tuple[str, ...] = ()  # "key=value:Effect"
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def healthy(self) -> int | None:
        """GPUs that report and are not named in a quarantine record."""
        if self.reporting is None:
            return None
        return max(0, min(self.reporting, self.gpus) - len(self.faulty))


@dataclass(frozen=True)
class FlavorQuota:
    flavor: str
    nominal: int  # GPUs
    usage: int  # GPUs admitted workloads hold, borrowed ones included
    borrowed: int = 0
    configured: int | None = None  # the quota before the health service lowered it


@dataclass(frozen=True)
class QueuedJob:
    """One Kueue Workload, named for the job it stands for (a RayJob, a batch Job, ...)."""

    namespace: str
    kind: str  # the job's kind
    name: str  # the job's name
    local_queue: str
    state: str  # pending | reserved | admitted | evicted | finished
    flavors: tuple[str, ...] = ()  # the flavors it was admitted in
    why: str = ""  # Kueue's own words: why it waits, why it was evicted, how it ended
    created: str = ""  # the Workload's creationTimestamp


@dataclass(frozen=True)
class Queue:
    name: str
    cohort: str
    flavors: tuple[FlavorQuota, ...]
    pending: int = 0
    admitted: int = 0
    reserving: int = 0
    active: bool = True
    manual: str = ""  # quota.gridloop.io/manual, as written
    local_queues: tuple[str, ...] = ()  # "namespace/name"
    jobs: tuple[QueuedJob, ...] = ()  # its Workloads, oldest first


@dataclass(frozen=True)
class Model:
    namespace: str
    name: str
    kind: str  # Deployment or Workspace
    replicas: int
    ready: int
    endpoint: str
    load_format: str
    revision: str  # the revision the Deployment runs or rolls to
    gpus: int = 0
    serving: tuple[str, ...] = ()  # revisions with ready pods, newest first
    stuck: str = ""  # why the new revision is not ready and will not be (models/rollouts.py)
    # a Workspace's conditions in KAITO's words: "InferenceReady=True", or
    # "InferenceReady=False (Reason): message" when not True
    conditions: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()  # the nodes its pods run on (a Workspace's)


@dataclass(frozen=True)
class Sandbox:
    namespace: str
    template: str
    runtime_class: str
    warm_pool: int | None = None  # desired warm sandboxes; None: no warm pool
    warm_ready: int | None = None
    claims: int = 0


# a sandbox pod's state: in a warm pool, bound to a SandboxClaim, or neither
WARM = "warm"
CLAIMED = "claimed"
OTHER = "other"


@dataclass(frozen=True)
class SandboxPod:
    """One of agent-sandbox's pods (labelled agents.x-k8s.io/sandbox-template-ref-hash)."""

    namespace: str
    name: str
    template: str  # its SandboxTemplate; "" when none in the namespace matches its labels
    state: str  # WARM, CLAIMED or OTHER
    claim: str = ""  # the SandboxClaim that holds it, when found
    status: str = ""  # as kubectl's STATUS column: Running, Pending, ContainerCreating, ...
    ready: bool = False  # the pod's Ready condition
    ready_containers: int = 0
    containers: int = 0
    node: str = ""  # "": not scheduled yet
    runtime_class: str = ""  # "": the node's default runtime (runc), no gVisor
    created: str = ""  # ISO 8601, UTC


@dataclass(frozen=True)
class Event:
    time: str  # ISO 8601, UTC
    type: str  # Normal or Warning
    reason: str
    object: str  # "Node/us-east-h100-002"
    message: str
    count: int = 1


@dataclass(frozen=True)
class Breaker:
    tripped: bool = False
    reason: str = ""
    found: bool = False  # the health service's status ConfigMap exists
    # the DCGM-named series its last cycle read as no node's ("3 from job vllm, ...")
    ignored: tuple[str, ...] = ()


@dataclass(frozen=True)
class Snapshot:
    taken_at: float  # wall clock, seconds
    context: str = ""
    nodes: tuple[Node, ...] = ()
    queues: tuple[Queue, ...] = ()
    models: tuple[Model, ...] = ()
    sandboxes: tuple[Sandbox, ...] = ()
    sandbox_pods: tuple[SandboxPod, ...] = ()
    events: tuple[Event, ...] = ()
    breaker: Breaker = field(default_factory=Breaker)
    # source ("api", "prometheus", "kueue", "sandboxes", ...) -> why it is stale or absent
    problems: tuple[tuple[str, str], ...] = ()
    # sources that are not installed on this cluster (not an error: the view says so)
    absent: tuple[str, ...] = ()

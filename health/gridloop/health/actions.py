"""What the health service decided, as plain data (the executor carries it out)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Quarantine:
    """Taint, cordon, label and annotate the node; drain its GPU pods if asked."""

    node: str
    faults: frozenset[str]  # "<GPU UUID or node>:<fault>", e.g. "GPU-1a2b:xid-79"
    gpus: tuple[str, ...]  # UUIDs of the failing GPUs
    reason: str  # one line for the Event and the annotation
    no_execute: bool = False
    drain: bool = False


@dataclass(frozen=True)
class MarkHealthy:
    """A node gridloop quarantined looks healthy: start its hold-down."""

    node: str
    since: float


@dataclass(frozen=True)
class ClearHealthy:
    """A fault came back during the hold-down: the node stays out, the clock restarts."""

    node: str


@dataclass(frozen=True)
class Release:
    """Healthy for the whole hold-down: untaint, uncordon, remove gridloop's record."""

    node: str


@dataclass(frozen=True)
class Acknowledge:
    """A person uncordoned a node gridloop quarantined: stand down for these faults."""

    node: str
    faults: frozenset[str]


@dataclass(frozen=True)
class TripBreaker:
    """Too many quarantines in the window: no new ones until an explicit reset."""

    reason: str


@dataclass(frozen=True)
class Hold:
    """Unsure this cycle (Prometheus down, stale or empty): no quarantines, no releases.

    `fault_events_only`: what is read once per scrape interval (which GPUs report, the
    windowed and state families) is late or missing, but this cycle's own read of the fault
    events is fresh: those still quarantine; nothing else is decided."""

    reason: str
    fault_events_only: bool = False


@dataclass(frozen=True)
class Warn:
    """Something to say loudly about one node without acting on it."""

    node: str
    message: str


@dataclass(frozen=True)
class Skip:
    """A fault was found but the node is left alone, and why."""

    node: str
    reason: str


Action = (
    Quarantine
    | MarkHealthy
    | ClearHealthy
    | Release
    | Acknowledge
    | TripBreaker
    | Hold
    | Warn
    | Skip
)

"""The health policy as data: what counts as a fault, what to do, and the limits.

Built once from `policies/health.yaml` (see policy_loading.py) and passed to
the pure core; nothing here reads files or talks to anything. Defaults are
the safe ones: quarantine without NoExecute, no drain, a circuit breaker on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from gridloop import names


class XidAction(StrEnum):
    """What one XID code means for the GPU that reported it."""

    QUARANTINE = "quarantine"  # reset/reboot class: take the node out now
    COUNT = "count"  # application class: only a repeat within the window counts
    IGNORE = "ignore"


# NVIDIA's XID catalogue: reset/reboot-class codes take the node out; the
# application-class ones (13 graphics engine exception, 31 MMU fault, 43 stopped
# channel, 45 preemptive cleanup, 68 video processor exception) are usually the
# job's fault and count only when they repeat.
DEFAULT_XID_QUARANTINE = (48, 64, 74, 79, 92, 94, 95, 119, 120, 140, 54, 56, 57, 62, 69, 122, 123)
DEFAULT_XID_COUNT = (13, 31, 43, 45, 68)
# 63 (row remap pending) quarantines only together with a pending remap.
XID_ROW_REMAP_EVENT = 63


@dataclass(frozen=True)
class Threshold:
    """A rate or level that must hold over `window_s` seconds to count."""

    value: float
    window_s: float


@dataclass(frozen=True)
class Signals:
    ecc_dbe_volatile: bool = True  # any increase of the double-bit volatile counter
    row_remap_failure: bool = True
    retired_pages_pending: bool = True
    vanished_gpu: bool = True  # the GPU's series are gone while its exporter is up
    # sustained violations: fraction of the window spent throttled (0..1)
    thermal_violation: Threshold | None = Threshold(0.5, 300)
    power_violation: Threshold | None = None
    # error counters: increase per second over the window
    nvlink_errors: Threshold | None = Threshold(1.0, 300)
    pcie_replays: Threshold | None = Threshold(10.0, 300)


@dataclass(frozen=True)
class Limits:
    """What the service may take out, per pool and fleet (the lower of count and
    percentage wins): at most that many nodes quarantined within the window (one more
    trips the circuit breaker), and at most that many out at once (one more waits for a
    release); with `count_cordoned`, nodes cordoned by someone else count as out."""

    fleet_max_nodes: int = 10
    fleet_max_percent: float = 10.0
    pool_max_nodes: int = 4
    pool_max_percent: float = 25.0
    window_s: float = 3600.0
    count_cordoned: bool = False


@dataclass(frozen=True)
class QuotaLimits:
    """How much Kueue GPU quota the rebalancer may take away within a sliding window.

    The lower of the count and the percentage (of all configured GPU quota) wins; giving
    quota back is never limited.
    """

    max_removed_gpus: int = 64
    max_removed_percent: float = 25.0
    window_s: float = 3600.0


@dataclass(frozen=True)
class Policy:
    xid: dict[int, XidAction] = field(
        default_factory=lambda: {
            **{code: XidAction.QUARANTINE for code in DEFAULT_XID_QUARANTINE},
            **{code: XidAction.COUNT for code in DEFAULT_XID_COUNT},
        }
    )
    xid_repeat_count: int = 3
    xid_repeat_window_s: float = 600.0
    signals: Signals = Signals()
    hold_down_s: float = 600.0
    taint_no_execute: bool = False
    drain: bool = False
    opt_out_label: str = names.OPT_OUT_LABEL
    limits: Limits = Limits()
    scrape_interval_s: float = 15.0
    dry_run: bool = False
    # keep each Kueue flavor's GPU quota equal to the healthy GPUs behind it (quotas.py)
    rebalance_quotas: bool = True
    quota_limits: QuotaLimits = QuotaLimits()

    @property
    def stale_after_s(self) -> float:
        """Answers older than two scrape intervals are stale: act on nothing."""
        return 2 * self.scrape_interval_s

    def xid_action(self, code: int) -> XidAction:
        return self.xid.get(code, XidAction.IGNORE)

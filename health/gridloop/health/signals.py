"""The PromQL the health service sends: one query per signal family, whole fleet.

Never one query per node: a cycle over 5,000 nodes costs the same dozen
queries as a cycle over 5. Series are mapped to nodes by the exporter's host
label (`Hostname` in dcgm-exporter up to 3.x, `hostname` later) and to GPUs
by `UUID`.

Only what can matter comes back: the fault families are filtered to non-zero
values in PromQL (a missing series reads as 0, so the answer means the same),
and the one full-fleet answer, which GPUs are present, keeps only the labels
that identify a GPU. At 40,000 GPUs that is the difference between parsing
about 400,000 labelled samples per cycle and parsing about 40,000 small ones.
"""

from __future__ import annotations

from gridloop.health.policy import Policy

HOST_LABELS = ("Hostname", "hostname")
# Families measured over windows of minutes: a reading one scrape interval old says the
# same, so they are asked once per scrape interval, not every cycle. They are also the
# expensive ones (every sample of every GPU in the window), and a cycle every second
# that re-asks them keeps a Prometheus with 16,000 GPUs busy on two cores.
SLOW_FAMILIES = frozenset({"xid_repeats", "thermal", "power", "nvlink", "pcie"})
GPU_KEYS = ("UUID", "gpu", *HOST_LABELS)  # what identifies one GPU's series
PRESENCE = "DCGM_FI_DEV_GPU_TEMP"  # a gauge every exporter reports for every GPU


def _window(seconds: float) -> str:
    return f"{max(int(seconds), 1)}s"


def queries(policy: Policy, exporter_job: str) -> dict[str, str]:
    """Family name -> PromQL. Families with a threshold switched off are not queried."""
    s, repeat = policy.signals, _window(policy.xid_repeat_window_s)
    q = {
        "up": f'up{{job="{exporter_job}"}}',
        "newest": f"time() - max(timestamp({PRESENCE}))",
        "present": f"group by ({', '.join(GPU_KEYS)}) ({PRESENCE})",
        "xid": "DCGM_FI_DEV_XID_ERRORS != 0",
        # the XID gauge holds the last code: each change in the window counts as an event
        # (a new code, or a return to 0 after a reset; the same code twice in a row is
        # invisible in this gauge, as it is in dcgm-exporter's)
        "xid_repeats": f"changes(DCGM_FI_DEV_XID_ERRORS[{repeat}]) > 0",
        "row_remap_pending": "DCGM_FI_DEV_ROW_REMAP_PENDING != 0",
    }
    if s.ecc_dbe_volatile:
        # a fresh increase, seen over the last few scrapes; the quarantine itself lasts
        # until the GPU has been clean for the hold-down
        recent = _window(4 * policy.scrape_interval_s)
        q["ecc_dbe"] = f"increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[{recent}]) > 0"
    if s.row_remap_failure:
        q["row_remap_failure"] = "DCGM_FI_DEV_ROW_REMAP_FAILURE != 0"
    if s.retired_pages_pending:
        q["retired_pending"] = "DCGM_FI_DEV_RETIRED_PENDING != 0"
    if s.thermal_violation:
        w = _window(s.thermal_violation.window_s)
        # the violation counters count microseconds throttled: rate / 1e6 = fraction of time
        q["thermal"] = f"rate(DCGM_FI_DEV_THERMAL_VIOLATION[{w}]) / 1e6 > 0"
    if s.power_violation:
        q["power"] = (
            f"rate(DCGM_FI_DEV_POWER_VIOLATION[{_window(s.power_violation.window_s)}]) / 1e6 > 0"
        )
    if s.nvlink_errors:
        w, by = _window(s.nvlink_errors.window_s), ", ".join(GPU_KEYS)
        # Prometheus 2 refuses rate() over several metric names at once (the names are
        # dropped, the label sets collide), so each counter is summed per GPU and a
        # missing counter counts as zero against the presence gauge.
        zero = f"(0 * sum by ({by}) ({PRESENCE}))"
        terms = [
            f"(sum by ({by}) (rate(DCGM_FI_DEV_NVLINK_{name}_ERROR_COUNT_TOTAL[{w}])) or {zero})"
            for name in ("CRC_FLIT", "CRC_DATA", "REPLAY", "RECOVERY")
        ]
        q["nvlink"] = f"({' + '.join(terms)}) > 0"
    if s.pcie_replays:
        q["pcie"] = f"rate(DCGM_FI_DEV_PCIE_REPLAY_COUNTER[{_window(s.pcie_replays.window_s)}]) > 0"
    return q

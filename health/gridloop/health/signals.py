"""The PromQL the health service sends: one query per signal family, whole fleet.

Never one query per node: a cycle over 5,000 nodes costs the same dozen
queries as a cycle over 5. Every series read is the exporter's scrape job's own (and, on a
cluster, its namespace's). Series are mapped to nodes by `node` alone, the label the
scrape attaches from the exporter pod's node (the chart's ServiceMonitor relabels it),
never by a label the series itself carries; a series whose own host label (`Hostname`, or
`hostname`) names another node than its target's is ignored (reading.place). GPUs are
keyed by `UUID`. What is ignored is counted: the DCGM series other scrapes serve
(`OTHERS`), and the exporter's own that name no node or another node.

Only what can matter comes back: the fault families are filtered to non-zero
values in PromQL (a missing series reads as 0, so the answer means the same),
and the one full-fleet answer, which GPUs are present, keeps only the labels
that identify a GPU. At 40,000 GPUs that is the difference between parsing
about 400,000 labelled samples per cycle and parsing about 40,000 small ones.
"""

from __future__ import annotations

from gridloop import dcgm
from gridloop.health.policy import Policy

NODE_LABEL = "node"  # attached by the scrape (relabeled from the pod's node)
HOST_LABELS = dcgm.HOST_LABELS  # dcgm-exporter's own: the pod's name without NODE_NAME
HOST_KEYS = (NODE_LABEL, *HOST_LABELS)  # what a series may say its node is, in that order
# Asked every cycle, at the moment of asking: the fault events, a new XID code and a fresh
# ECC double-bit increase, filtered to non-zero, so each answer is small. A fault's latency
# is one of these reads. Each query costs Prometheus a pass over every GPU's series (about
# 0.15 s of its CPU at 16,000 GPUs on the benchmark machine), so a cycle asks no more
# than these.
# Asked in the background once per scrape interval (refreshing.py), all at one evaluation
# time:
# - the families measured over windows of minutes: a reading one interval old says the
#   same, and they are the most expensive queries;
# - the states a GPU keeps until it is reset (row remap failed or pending, retired pages
#   pending): they change at most once per scrape, and hold until someone acts;
# - which GPUs report and whether each exporter is up: they change only when a scrape
#   does, and a GPU counts as fallen off the bus only when presence and `up` come from
#   the same moment.
NVLINK_METRICS = {
    "CRC_FLIT": dcgm.NVLINK_CRC_FLIT,
    "CRC_DATA": dcgm.NVLINK_CRC_DATA,
    "REPLAY": dcgm.NVLINK_REPLAY,
    "RECOVERY": dcgm.NVLINK_RECOVERY,
}
NVLINK_COUNTERS = tuple(NVLINK_METRICS)
NVLINK_FAMILIES = frozenset(f"nvlink_{name.lower()}" for name in NVLINK_COUNTERS)
SLOW_FAMILIES = frozenset({"xid_repeats", "thermal", "power", "pcie", *NVLINK_FAMILIES})
STATE_FAMILIES = frozenset({"row_remap_pending", "row_remap_failure", "retired_pending"})
# which GPUs report and whether each exporter is up: one query, so Prometheus answers
# both from one view of its data (a scrape commits its samples, or their staleness
# markers, together with its `up`). Two queries at the same evaluation time are not
# enough: a scrape that started before that time and failed between the two makes its
# GPUs vanish from one answer while the other still says its exporter is up (seen at
# 5,000 nodes with 20 s scrapes: healthy nodes quarantined as "gpu-vanished").
PRESENCE_AND_UP = "presence"
PRESENCE_FAMILIES = frozenset({PRESENCE_AND_UP})
# The XID events and the exporters whose last scrape failed: one query, for the same
# reason. A failed scrape leaves staleness markers, so its node's XID series are gone from
# the answer until the next scrape succeeds, while the background read, up to an interval
# old, still says its exporter is up: read alone, the XID answer makes a failing node look
# healthy and starts its hold-down (test_health_service.py). With `down` from the same
# view, such a node is an exporter down: nothing is decided from what is missing. (Series
# missing while `up` stays 1, as seen around a Prometheus reload, are not covered: only
# reading every GPU's XID series, not just the non-zero ones, could tell; docs/health.md.)
EVENTS_AND_DOWN = "events"
DOWN = "down"  # `up == 0`: exporters whose last scrape failed (normally none: a small answer)
TAGGED = {PRESENCE_AND_UP: ("up", "present"), EVENTS_AND_DOWN: ("xid", DOWN)}
FAMILY_LABEL = "gridloop_family"  # which family of a combined answer a series is
# Asked in the background: how many series named like those the service reads come from
# another scrape (another job, or the exporter's job in another namespace), by job and
# namespace: what a tenant's pod that Prometheus scrapes could serve (normally none).
OTHERS = "others"
BACKGROUND_FAMILIES = SLOW_FAMILIES | STATE_FAMILIES | PRESENCE_FAMILIES | {OTHERS}
GPU_KEYS = ("UUID", "gpu", *HOST_KEYS)  # what identifies one GPU's series
PRESENCE = dcgm.GPU_TEMP  # a gauge every exporter reports for every GPU
# Asked with the fault events, at the same moment: when Prometheus last scraped any
# exporter. One value over one series per exporter (not per GPU), so a cycle can tell its
# fault read is fresh while the background read is late.
FRESHNESS = "fresh"
# every metric the service reads: what a forger would serve
READ_METRICS = (
    PRESENCE,
    dcgm.XID_ERRORS,
    dcgm.ECC_DBE_VOL,
    dcgm.ROW_REMAP_PENDING,
    dcgm.ROW_REMAP_FAILURE,
    dcgm.RETIRED_PENDING,
    dcgm.THERMAL_VIOLATION,
    dcgm.POWER_VIOLATION,
    *NVLINK_METRICS.values(),
    dcgm.PCIE_REPLAY,
)


def _tagged(promql: str, family: str) -> str:
    return f'label_replace({promql}, "{FAMILY_LABEL}", "{family}", "", "")'


def _window(seconds: float) -> str:
    return f"{max(int(seconds), 1)}s"


def selector(exporter_job: str, exporter_namespace: str = "") -> str:
    """The label matchers of the exporter's own series: its job, and with
    `exporter_namespace` the namespace its scrape targets are in (an in-cluster
    Prometheus's `namespace` target label; the local one scrapes no namespace)."""
    namespace = f', namespace="{exporter_namespace}"' if exporter_namespace else ""
    return f'{{job="{exporter_job}"{namespace}}}'


def others(exporter_job: str, exporter_namespace: str = "") -> str:
    """The count of the series named like READ_METRICS that are not the exporter's, by job
    and namespace."""
    names = "|".join(READ_METRICS)

    def count(matchers: str) -> str:
        return f'count by (job, namespace) ({{__name__=~"{names}", {matchers}}})'

    other_jobs = count(f'job!="{exporter_job}"')
    if not exporter_namespace:
        return other_jobs
    elsewhere = count(f'job="{exporter_job}", namespace!="{exporter_namespace}"')
    return f"{other_jobs} or {elsewhere}"


def queries(policy: Policy, exporter_job: str, exporter_namespace: str = "") -> dict[str, str]:
    """Family name -> PromQL. Families with a threshold switched off are not queried.

    Every series is the exporter job's own (`exporter_job`, and on a cluster its
    `exporter_namespace`): a DCGM-named series from any other scrape (a tenant's pod that
    Prometheus also scrapes can serve any text) is never read, so it can neither fake a
    fault nor hide one; OTHERS counts them."""
    s, repeat = policy.signals, _window(policy.xid_repeat_window_s)
    job = selector(exporter_job, exporter_namespace)

    def ours(metric: str) -> str:
        return metric + job

    scrape = _window(policy.scrape_interval_s)
    # which GPUs report, and when each was last scraped (the answer's own evaluation
    # time minus the newest of these is how stale Prometheus is); and each exporter's up
    present = f"max by ({', '.join(GPU_KEYS)}) (timestamp({ours(PRESENCE)}))"
    up = ours("up")
    q = {
        PRESENCE_AND_UP: f"{_tagged(up, 'up')} or {_tagged(present, 'present')}",
        EVENTS_AND_DOWN: (
            f"{_tagged(f'{ours(dcgm.XID_ERRORS)} != 0', 'xid')} or {_tagged(f'{up} == 0', DOWN)}"
        ),
        FRESHNESS: f"max(timestamp({up}))",
        # the XID gauge holds the last code: each change in the window counts as an event
        # (a new code, or a return to 0 after a reset; the same code twice in a row is
        # invisible in this gauge, as it is in dcgm-exporter's). dcgm-exporter 3.3.6 and
        # later label each XID sample with its code (err_code, err_msg), which makes each
        # code a series of its own that never changes: the changes are counted on each
        # GPU's one series with those labels dropped, sampled once per scrape interval
        "xid_repeats": (
            f"changes((max without (err_code, err_msg) ({ours(dcgm.XID_ERRORS)}))"
            f"[{repeat}:{scrape}]) > 0"
        ),
        "row_remap_pending": f"{ours(dcgm.ROW_REMAP_PENDING)} != 0",
        OTHERS: others(exporter_job, exporter_namespace),
    }
    if s.ecc_dbe_volatile:
        # a fresh increase, seen over the last few scrapes; the quarantine itself lasts
        # until the GPU has been clean for the hold-down
        recent = _window(4 * policy.scrape_interval_s)
        q["ecc_dbe"] = f"increase({ours(dcgm.ECC_DBE_VOL)}[{recent}]) > 0"
    if s.row_remap_failure:
        q["row_remap_failure"] = f"{ours(dcgm.ROW_REMAP_FAILURE)} != 0"
    if s.retired_pages_pending:
        q["retired_pending"] = f"{ours(dcgm.RETIRED_PENDING)} != 0"
    if s.thermal_violation:
        w = _window(s.thermal_violation.window_s)
        # the violation counters count microseconds throttled: rate / 1e6 = fraction of time
        q["thermal"] = f"rate({ours(dcgm.THERMAL_VIOLATION)}[{w}]) / 1e6 > 0"
    if s.power_violation:
        q["power"] = (
            f"rate({ours(dcgm.POWER_VIOLATION)}[{_window(s.power_violation.window_s)}]) / 1e6 > 0"
        )
    if s.nvlink_errors:
        w, by = _window(s.nvlink_errors.window_s), ", ".join(GPU_KEYS)
        # one query per counter, summed per GPU here: Prometheus 2 refuses rate() over
        # several metric names at once, and padding each term with zeros to add them in
        # PromQL costs an aggregation over every GPU per term
        for name, metric in NVLINK_METRICS.items():
            q[f"nvlink_{name.lower()}"] = f"sum by ({by}) (rate({ours(metric)}[{w}])) > 0"
    if s.pcie_replays:
        q["pcie"] = f"rate({ours(dcgm.PCIE_REPLAY)}[{_window(s.pcie_replays.window_s)}]) > 0"
    return q

"""Turn Prometheus answers into an `Observed` (pure), and ask Prometheus (shell).

`baseline` digests what is read once per scrape interval; `with_faults` lays a
cycle's fault samples over it for the NodeViews from the API server. Neither
raises on odd data (a series without a host label is ignored, a non-numeric
value reads as 0). A series is about the node its scrape target ran on (`place`):
the `node` label Prometheus attaches, never one the series brings. The exporter's
series that name no known node are counted in `Observed.unmatched`, those without a
`node` or whose own host label names another node in `Observed.ignored` (with the
DCGM-named series of other scrapes, which no query reads), and plan() holds while
they could make healthy nodes look as if their GPUs had vanished. `read` is the only
function here that talks to Prometheus: any failure becomes
`prometheus_error`, which plan() turns into a Hold.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Container, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from prometheus_api_client import PrometheusConnect
from urllib3.util.retry import Retry

from gridloop.errors import one_line
from gridloop.health import prometheus_access
from gridloop.health.observed import (
    HOST_MISMATCH,
    NO_NODE,
    OTHER_SCRAPE,
    GpuReading,
    Ignored,
    NodeView,
    Observed,
)
from gridloop.health.prometheus_access import Access
from gridloop.health.signals import (
    DOWN,
    FAMILY_LABEL,
    FRESHNESS,
    HOST_KEYS,
    NVLINK_FAMILIES,
    OTHERS,
    TAGGED,
)

Sample = dict[str, Any]  # {"metric": {labels}, "value": [timestamp, "value"]}

_FIELDS = {
    "xid": ("xid", int),
    "xid_repeats": ("xid_repeats", int),
    "ecc_dbe": ("ecc_dbe_increase", float),
    "row_remap_failure": ("row_remap_failure", bool),
    "row_remap_pending": ("row_remap_pending", bool),
    "retired_pending": ("retired_pages_pending", bool),
    "thermal": ("thermal_violation", float),
    "power": ("power_violation", float),
    "pcie": ("pcie_replay_rate", float),
}
UP_NODE_LABELS = (*HOST_KEYS, "instance")
HostKey = tuple[str, ...]  # a series' node, Hostname and hostname labels ("" if absent)
K = TypeVar("K", HostKey, str)  # what GPUs are keyed by: a HostKey, or a node once resolved


def _value(sample: Sample) -> float:
    try:
        v = float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return 0.0
    return 0.0 if math.isnan(v) else v


def host_of(labels: dict[str, str], keys: tuple[str, ...] = HOST_KEYS) -> str | None:
    """The first of `keys` the series has: its node as far as the labels alone say."""
    return next((labels[k] for k in keys if labels.get(k)), None)


def host_key(labels: dict[str, str]) -> HostKey | None:
    key = tuple(labels.get(k) or "" for k in HOST_KEYS)
    return key if any(key) else None


def ignored_because(key: HostKey, known: Container[str]) -> str | None:
    """Why the exporter's series with these host labels is no node's, or None: it has no
    `node` (the scrape attached none: a scrape config without the chart's relabelling), or
    its own `Hostname`/`hostname` names a known node other than the one its target ran on
    (an exporter that says it is elsewhere). A host label that names no node (the pod's
    name, from an exporter without NODE_NAME) says nothing against the target."""
    node, *hosts = key
    if not node:
        return NO_NODE
    if any(h and h != node and h in known for h in hosts):
        return HOST_MISMATCH
    return None


def resolve(key: HostKey, known: Container[str]) -> str | None:
    """The node a series is about: the `node` its scrape attached (from the exporter
    pod's node), when that is a known node and nothing in the series disagrees."""
    node = key[0]
    if node not in known or ignored_because(key, known):
        return None
    return node


def describe(key: HostKey) -> str:
    """A series' host labels, for a line: "Hostname=gpu-1 on node gpu-2", "Hostname=gpu-1
    without a node label"."""
    node, *hosts = key
    said = ",".join(f"{k}={v}" for k, v in zip(HOST_KEYS[1:], hosts, strict=True) if v)
    return f"{said or 'no host label'} on node {node}" if node else f"{said} without a node label"


def others(answer: list[Sample]) -> tuple[Ignored, ...]:
    """The OTHERS answer (series counts by job and namespace) as what is ignored."""
    out = []
    for sample in answer:
        labels = sample.get("metric", {})
        job, namespace = labels.get("job", ""), labels.get("namespace", "")
        source = f"job {job or '(none)'}" + (f", namespace {namespace}" if namespace else "")
        out.append(Ignored(OTHER_SCRAPE, source, int(_value(sample))))
    return tuple(sorted(out, key=lambda i: i.source))


@dataclass(frozen=True)
class Baseline:
    """What the answers read once per scrape interval say, for every host: the GPUs that
    report, with their slow and state families applied; whether each exporter is up; the
    newest presence sample. Built once per background read (in its thread), so a cycle
    only lays its own few fault samples over it."""

    gpus: dict[HostKey, dict[str, GpuReading]] = field(default_factory=dict)
    exporter_up: dict[str, bool] = field(default_factory=dict)
    newest: dict[HostKey, float] = field(default_factory=dict)  # newest sample's time
    evaluated_at: float | None = None  # when Prometheus evaluated the presence query
    others: tuple[Ignored, ...] = ()  # DCGM-named series other scrapes serve


def split_tagged(results: dict[str, list[Sample]]) -> dict[str, list[Sample]]:
    """Each answer that holds several families (asked in one query, so from one view of
    Prometheus: signals.TAGGED) as those families, by their tag (pure)."""
    if not results.keys() & TAGGED.keys():
        return results
    out = {k: v for k, v in results.items() if k not in TAGGED}
    for combined, families in TAGGED.items():
        for sample in results.get(combined, []):
            labels = dict(sample.get("metric", {}))
            family = labels.pop(FAMILY_LABEL, None)
            if family in families:
                out.setdefault(family, []).append({**sample, "metric": labels})
    return out


def baseline(results: dict[str, list[Sample]]) -> Baseline:
    results = split_tagged(results)
    gpus: dict[HostKey, dict[str, GpuReading]] = {}
    newest: dict[HostKey, float] = {}
    evaluated_at = None
    for sample in results.get("present", []):
        labels = sample.get("metric", {})
        host, uuid = host_key(labels), labels.get("UUID")
        if host and uuid:
            gpus.setdefault(host, {})[uuid] = GpuReading(uuid=uuid, index=labels.get("gpu", ""))
            try:
                at, ts = float(sample["value"][0]), float(sample["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
            evaluated_at, newest[host] = at, max(ts, newest.get(host, -math.inf))
    _apply(gpus, results, host_key)
    exporter_up: dict[str, bool] = {}
    for sample in results.get("up", []):
        target = host_of(sample.get("metric", {}), UP_NODE_LABELS)
        if target:
            exporter_up[target] = exporter_up.get(target, False) or _value(sample) == 1.0
    return Baseline(gpus, exporter_up, newest, evaluated_at, others(results.get(OTHERS, [])))


def _apply(
    gpus: dict[K, dict[str, GpuReading]],
    results: dict[str, list[Sample]],
    key_of: Callable[[dict[str, str]], K | None],
) -> None:
    """Each family's values onto the GPUs they name (known GPUs only), in place; a
    sample's labels give its key in `gpus` through `key_of`."""
    for family, (field_name, kind) in _FIELDS.items():
        for host, uuid, reading, value in _readings(results.get(family, []), gpus, key_of):
            gpus[host][uuid] = replace(reading, **{field_name: kind(value)})
    for family in sorted(NVLINK_FAMILIES):  # one answer per counter: their rates add up
        for host, uuid, reading, value in _readings(results.get(family, []), gpus, key_of):
            rate = reading.nvlink_error_rate + value
            gpus[host][uuid] = replace(reading, nvlink_error_rate=rate)


def with_faults(
    base: Baseline,
    results: dict[str, list[Sample]],
    nodes: dict[str, NodeView],
    now: float | None = None,
) -> Observed:
    """The baseline for the listed nodes, with this cycle's fault samples laid over it.

    `now`: the wall-clock time the newest sample's age is counted to (the baseline may be
    older than this cycle); by default, the baseline's own evaluation time. An exporter
    this cycle's read finds down (its last scrape failed) is down, whatever the baseline
    says: the fault series of a failed scrape are gone from the read, not healthy.
    """
    results = split_tagged(results)
    down = {
        host
        for sample in results.get(DOWN, [])
        if (host := host_of(sample.get("metric", {}), UP_NODE_LABELS))
    }
    gpus: dict[str, dict[str, GpuReading]] = {}
    unmatched: list[str] = []
    ignored: list[Ignored] = []
    newest = None
    for key, readings in base.gpus.items():
        reason = ignored_because(key, nodes)
        if reason:
            ignored.append(Ignored(reason, describe(key), len(readings)))
            continue
        node = resolve(key, nodes)
        if node is None:
            unmatched.append(key[0])
            continue
        # two keys for one node (a label added on a rollout): one set of GPUs
        gpus[node] = {**gpus[node], **readings} if node in gpus else readings
        stamp = base.newest.get(key)
        if stamp is not None:
            newest = stamp if newest is None else max(newest, stamp)

    def node_of(labels: dict[str, str]) -> str | None:
        key = host_key(labels)
        return None if key is None else resolve(key, nodes)

    touched = {
        n for answer in results.values() for s in answer if (n := node_of(s.get("metric", {})))
    }
    for node in touched & gpus.keys():  # the baseline is shared: copy what changes
        gpus[node] = dict(gpus[node])
    _apply(gpus, results, node_of)
    at = base.evaluated_at if now is None else now
    return Observed(
        nodes=nodes,
        gpus=gpus,
        exporter_up={
            host: up and host not in down for host, up in base.exporter_up.items() if host in nodes
        },
        newest_sample_age_s=None if newest is None or at is None else max(0.0, at - newest),
        unmatched=tuple(sorted(set(unmatched))),
        ignored=base.others + tuple(sorted(ignored, key=lambda i: i.source)),
        fault_gpus=fault_gpus(results, node_of),
        faults_read_age_s=_freshness(results.get(FRESHNESS, []), now),
    )


def fault_gpus(
    results: dict[str, list[Sample]], node_of: Callable[[dict[str, str]], str | None]
) -> dict[str, dict[str, GpuReading]]:
    """The GPUs this cycle's own read names, with only what that read says: a GPU that
    reports a fault event exists, whatever the background read knows of it."""
    out: dict[str, dict[str, GpuReading]] = {}
    for family, (field_name, kind) in _FIELDS.items():
        for sample in results.get(family, []):
            labels = sample.get("metric", {})
            node, uuid = node_of(labels), labels.get("UUID")
            if node is None or not uuid:
                continue
            gpus = out.setdefault(node, {})
            reading = gpus.get(uuid) or GpuReading(uuid=uuid, index=labels.get("gpu", ""))
            gpus[uuid] = replace(reading, **{field_name: kind(_value(sample))})
    return out


def _freshness(answer: list[Sample], now: float | None) -> float | None:
    """How old the newest exporter scrape was: the FRESHNESS answer's value (a timestamp)
    counted to `now`, or to the answer's own evaluation time."""
    try:
        at, newest = float(answer[0]["value"][0]), float(answer[0]["value"][1])
    except (IndexError, KeyError, TypeError, ValueError):
        return None
    if math.isnan(newest):
        return None
    return max(0.0, (at if now is None else now) - newest)


def _readings(
    samples: list[Sample],
    gpus: dict[K, dict[str, GpuReading]],
    key_of: Callable[[dict[str, str]], K | None],
) -> Iterator[tuple[K, str, GpuReading, float]]:
    """(key, uuid, the GPU's reading so far, the sample's value) for each known GPU."""
    for sample in samples:
        labels = sample.get("metric", {})
        host, uuid = key_of(labels), labels.get("UUID")
        if host is None or not uuid:
            continue
        reading = gpus.get(host, {}).get(uuid)
        if reading is not None:
            yield host, uuid, reading, _value(sample)


_QUERY_STRING = re.compile(r"\?query=\S*")
# urllib3's wording around the cause: the retries (none here) and each object's address,
# which would make every cycle's line a new one
_NOISE = re.compile(
    r"Max retries exceeded with url: /api/v1/query |<[\w.]+ object at 0x[0-9a-f]+>: "
)


def connect(url: str, access: Access | None = None) -> PrometheusConnect:
    """A Prometheus client that does not retry: the next cycle is the retry. With
    `access`, over TLS checked against its CA, with its client certificate and its bearer
    token (prometheus_access.py).

    prometheus-api-client's default (`retry=None`) retries a refused connection three
    times with backoff, so one read of an unreachable Prometheus took 6 s per query.
    """
    if access is None:
        return PrometheusConnect(url=url, retry=Retry(total=0))
    return PrometheusConnect(
        url=url,
        retry=Retry(total=0),
        session=prometheus_access.session(access),
        auth=prometheus_access.auth(access),  # any requests auth, not only a tuple
    )


QUERIES_AT_ONCE = 4  # a dozen queries; Prometheus answers several at once on its own cores
# How long one query may take, Prometheus's evaluation (its `timeout` parameter) and the
# answer's way back: past it the read fails and says so, and the cycle holds instead of
# hanging on a stalled Prometheus. A cycle's own fault read gets FAULT_READ_TIMEOUT_S; the
# background read, which asks for windows over every GPU, the policy's staleness limit.
FAULT_READ_TIMEOUT_S = 10.0


# How far behind now a read of presence and `up` looks. Prometheus commits a scrape's
# samples (or, when it fails, their staleness markers) before that scrape's `up`: a read
# between the two would see a down exporter's GPUs gone while its `up` still says 1.
EVAL_LAG_S = 1.0


def read(
    prom: Any,
    queries: dict[str, str],
    lag_s: float = EVAL_LAG_S,
    at_once: int = QUERIES_AT_ONCE,
    timeout_s: float = FAULT_READ_TIMEOUT_S,
    took: dict[str, float] | None = None,
) -> dict[str, list[Sample]] | str:
    """Every family's instant vector, or one line saying why Prometheus failed us.

    All of one read's queries are evaluated at the same moment, `lag_s` before now: the
    queries run side by side, and an exporter going down or first scraped between two of
    them must not read as GPUs gone from a node whose exporter is up. Fault families alone
    can be read at now (`lag_s=0`): a scrape's samples land in one commit. `took`, when
    given, gets how long each family's query took (seconds, answer or failure).
    """
    at = {"time": f"{time.time() - lag_s:.3f}", "timeout": f"{timeout_s:g}s"}

    def ask(family: str) -> list[Sample] | Exception:
        started = time.monotonic()
        try:
            # the client's own bound, a little past Prometheus's: its answer says why
            answer: list[Sample] = prom.custom_query(
                query=queries[family], params=at, timeout=timeout_s + 2
            )
            return answer
        except Exception as err:  # connection, HTTP and parse errors alike mean "unsure"
            return err
        finally:
            if took is not None:
                took[family] = time.monotonic() - started

    with ThreadPoolExecutor(at_once, thread_name_prefix="health-read") as pool:
        answers = dict(zip(queries, pool.map(ask, queries), strict=True))
    out: dict[str, list[Sample]] = {}
    for family, answer in answers.items():
        if isinstance(answer, Exception):
            # the URL's query string (the PromQL and the evaluation time) would make every
            # cycle's reason a new one, and a lasting outage is logged when it starts
            # (the cause of a refused TLS handshake comes last: kept)
            text = _NOISE.sub("", _QUERY_STRING.sub("", one_line(answer, 600)))[:240]
            return f"query {family!r} failed: {text}"
        out[family] = answer
    return out


def slowest(took: dict[str, float]) -> str:
    """`took`'s slowest query, for a log line: "xid 4.90s" ("" when there is none)."""
    if not took:
        return ""
    family = max(took, key=lambda f: took[f])
    return f"{family} {took[family]:.2f}s"

"""Each view of `gridloop status` as columns and rows of text: the one place that
decides what a node's verdict is, what a queue's row says, and how filtering and
sorting work. The UI, `--once --output table` and `--output json` all use it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gridloop.status.snapshot import (
    CORDONED,
    EXPORTER_DOWN,
    GPUS_MISSING,
    HEALTHY,
    NOT_READY,
    OPTED_OUT,
    QUARANTINED,
    VERDICTS,
    Event,
    Node,
    Queue,
    Snapshot,
)

VIEWS = ("fleet", "queues", "inference", "sandboxes", "events")


@dataclass(frozen=True)
class Column:
    title: str
    numeric: bool = False  # right-aligned, sorted as a number


@dataclass(frozen=True)
class Row:
    key: str  # what Enter drills into: a node or ClusterQueue name
    cells: tuple[str, ...]
    sort_keys: tuple[object, ...]  # one per column: numbers as numbers
    alert: bool = False  # the row needs attention (shown in red)


@dataclass(frozen=True)
class Table:
    view: str
    columns: tuple[Column, ...]
    rows: tuple[Row, ...]
    empty: str  # what to say when there are no rows


def verdict(node: Node) -> tuple[str, str]:
    """The node's verdict and why, worst reason first."""
    if node.quarantined_by:
        return QUARANTINED, node.reason or f"quarantined by {node.quarantined_by}"
    if not node.ready:
        return NOT_READY, "the node's Ready condition is not True"
    if node.exporter_up is False:
        return EXPORTER_DOWN, "no DCGM metrics from this node: its GPU faults go unseen"
    if node.reporting is not None and node.reporting < node.gpus:
        return GPUS_MISSING, f"{node.gpus - node.reporting} of {node.gpus} GPUs report no metrics"
    if node.unschedulable:
        return CORDONED, "cordoned by someone else: gridloop leaves it alone"
    if node.opted_out:
        return OPTED_OUT, "opted out of GPU health automation"
    return HEALTHY, ""


def _count(value: int | None) -> str:
    return "?" if value is None else str(value)


def _cordon(node: Node) -> str:
    if not node.unschedulable:
        return "-"
    return node.quarantined_by or "other"


FLEET_EMPTY = "no GPU nodes (label nvidia.com/gpu.present=true)"


def fleet_row(n: Node) -> Row:
    state, why = verdict(n)
    healthy = n.healthy
    cordon = _cordon(n)
    return Row(
        key=n.name,
        cells=(
            n.name,
            n.site,
            n.pool,
            n.product,
            str(n.gpus),
            str(n.allocated),
            _count(healthy),
            state,
            cordon,
            why,
        ),
        sort_keys=(
            n.name,
            n.site,
            n.pool,
            n.product,
            n.gpus,
            n.allocated,
            -1 if healthy is None else healthy,
            VERDICTS.index(state),
            cordon,
            why,
        ),
        alert=state != HEALTHY,
    )


def fleet(snapshot: Snapshot, row: Callable[[Node], Row] = fleet_row) -> Table:
    """The fleet view; `row` may be a cached `fleet_row` (the UI keeps one per node)."""
    columns = (
        Column("NODE"),
        Column("SITE"),
        Column("POOL"),
        Column("GPU"),
        Column("GPUS", True),
        Column("ALLOC", True),
        Column("HEALTHY", True),
        Column("VERDICT"),
        Column("CORDONED BY"),
        Column("REASON"),
    )
    rows = tuple(row(n) for n in snapshot.nodes)
    return Table("fleet", columns, rows, FLEET_EMPTY)


def _quota_cell(q: Queue, attr: str) -> str:
    return " ".join(f"{f.flavor}={getattr(f, attr)}" for f in q.flavors) or "-"


def lowered(q: Queue) -> list[str]:
    """The flavors whose quota the health service lowered, as `flavor configured→nominal`."""
    return [
        f"{f.flavor} {f.configured}→{f.nominal}"
        for f in q.flavors
        if f.configured is not None and f.nominal < f.configured
    ]


def queues(snapshot: Snapshot) -> Table:
    columns = (
        Column("CLUSTERQUEUE"),
        Column("COHORT"),
        Column("QUOTA GPUS", True),
        Column("USED", True),
        Column("BORROWED", True),
        Column("PENDING", True),
        Column("ADMITTED", True),
        Column("PER FLAVOR (nominal)"),
        Column("LOWERED BY HEALTH"),
        Column("LAST REBALANCE"),
    )
    last = _last_quota_events(snapshot)
    rows = []
    for q in snapshot.queues:
        nominal = sum(f.nominal for f in q.flavors)
        used = sum(f.usage for f in q.flavors)
        borrowed = sum(f.borrowed for f in q.flavors)
        down = ", ".join(lowered(q)) or "-"
        if q.manual:
            down = f"manual {q.manual}" if down == "-" else f"{down}; manual {q.manual}"
        cells = (
            q.name,
            q.cohort or "-",
            str(nominal),
            str(used),
            str(borrowed),
            str(q.pending),
            str(q.admitted),
            _quota_cell(q, "nominal"),
            down,
        )
        event = last.get(q.name)
        change = f"{_age(event.time, snapshot.taken_at)} ago: {event.message}" if event else "-"
        when = _negated_time(event.time) if event else 0.0
        row_cells = (*cells, change)
        keys = (q.name, q.cohort, nominal, used, borrowed, q.pending, q.admitted, cells[7], down)
        row_keys = (*keys, when)
        starving = q.pending > 0 and nominal == 0
        rows.append(Row(q.name, row_cells, row_keys, alert=starving or not q.active))
    return Table("queues", columns, tuple(rows), "no ClusterQueues (is Kueue installed?)")


def _last_quota_events(snapshot: Snapshot) -> dict[str, Event]:
    """The newest quota event the health service wrote about each ClusterQueue."""
    newest: dict[str, Event] = {}
    for e in snapshot.events:
        kind, _, name = e.object.partition("/")
        quota = kind == "ClusterQueue" and e.reason.startswith("GPUQuota")
        if quota and (name not in newest or e.time > newest[name].time):
            newest[name] = e
    return newest


def inference(snapshot: Snapshot) -> Table:
    columns = (
        Column("NAMESPACE"),
        Column("MODEL"),
        Column("KIND"),
        Column("READY"),
        Column("GPUS", True),
        Column("ENDPOINT"),
        Column("LOAD FORMAT"),
        Column("REVISION"),
    )
    rows = []
    for m in snapshot.models:
        ready = f"{m.ready}/{m.replicas}"
        cells = (
            m.namespace,
            m.name,
            m.kind,
            ready,
            str(m.gpus),
            m.endpoint,
            m.load_format,
            m.revision or "-",
        )
        keys = (m.namespace, m.name, m.kind, (m.ready, m.replicas), m.gpus, *cells[5:])
        rows.append(Row(f"{m.namespace}/{m.name}", cells, keys, alert=m.ready < m.replicas))
    return Table("inference", columns, tuple(rows), "no models (values: inference.models)")


def sandboxes(snapshot: Snapshot) -> Table:
    columns = (
        Column("NAMESPACE"),
        Column("TEMPLATE"),
        Column("RUNTIME CLASS"),
        Column("WARM POOL"),
        Column("CLAIMS", True),
    )
    rows = []
    for s in snapshot.sandboxes:
        pool = "-" if s.warm_pool is None else f"{_count(s.warm_ready)}/{s.warm_pool}"
        cells = (s.namespace, s.template, s.runtime_class or "-", pool, str(s.claims))
        keys = (s.namespace, s.template, s.runtime_class, s.warm_pool or 0, s.claims)
        short = s.warm_pool is not None and (s.warm_ready or 0) < s.warm_pool
        rows.append(Row(f"{s.namespace}/{s.template}", cells, keys, alert=short))
    empty = "no sandbox templates"
    if "sandboxes" in snapshot.absent:
        empty = "agent-sandbox is not installed (no SandboxTemplate CRD)"
    return Table("sandboxes", columns, tuple(rows), empty)


def events(snapshot: Snapshot) -> Table:
    columns = (
        Column("LAST SEEN"),
        Column("TYPE"),
        Column("REASON"),
        Column("OBJECT"),
        Column("COUNT", True),
        Column("MESSAGE"),
    )
    rows = []
    ordered = sorted(snapshot.events, key=lambda e: e.time, reverse=True)
    for i, e in enumerate(ordered):
        age = _age(e.time, snapshot.taken_at)
        cells = (age, e.type, e.reason, e.object, str(e.count), e.message)
        # sorting LAST SEEN by the negated age keeps "newest first" the ascending order
        keys = (_negated_time(e.time), e.type, e.reason, e.object, e.count, e.message)
        # an object has many events: the key (unique per table) carries the position
        rows.append(Row(f"{e.object}#{i}", cells, keys, alert=e.type == "Warning"))
    return Table("events", columns, tuple(rows), "no events from the GPU health service")


BUILDERS: dict[str, Callable[[Snapshot], Table]] = {
    "fleet": fleet,
    "queues": queues,
    "inference": inference,
    "sandboxes": sandboxes,
    "events": events,
}


def table(snapshot: Snapshot, view: str) -> Table:
    return BUILDERS[view](snapshot)


def columns(view: str) -> tuple[Column, ...]:
    return BUILDERS[view](Snapshot(taken_at=0.0)).columns


def filtered(rows: Sequence[Row], text: str) -> tuple[Row, ...]:
    """Rows with every word of `text` in some cell (case-insensitive), as k9s's `/`;
    a word starting with `!` excludes rows that contain the rest."""
    words = text.lower().split()
    if not words:
        return tuple(rows)
    kept = []
    for row in rows:
        line = " ".join(row.cells).lower()
        if all(
            (w[1:] not in line) if w.startswith("!") and len(w) > 1 else (w in line) for w in words
        ):
            kept.append(row)
    return tuple(kept)


def sorted_rows(rows: Sequence[Row], column: int, reverse: bool = False) -> tuple[Row, ...]:
    return tuple(sorted(rows, key=lambda r: (r.sort_keys[column], r.key), reverse=reverse))


def summary(snapshot: Snapshot) -> str:
    """One line: the fleet at a glance, as the UI's header and the table output's first line."""
    nodes = snapshot.nodes
    gpus = sum(n.gpus for n in nodes)
    allocated = sum(n.allocated for n in nodes)
    healthy = [n.healthy for n in nodes]
    states = [verdict(n)[0] for n in nodes]
    quarantined = states.count(QUARANTINED)
    trouble = len(states) - states.count(HEALTHY)
    known = [h for h in healthy if h is not None]
    unknown = len(healthy) - len(known)
    healthy_gpus = f"{sum(known)} healthy" if known or not nodes else "? healthy"
    if known and unknown:
        healthy_gpus += f", {unknown} node{'s' if unknown > 1 else ''} not reporting"
    breaker = "TRIPPED" if snapshot.breaker.tripped else "ok"
    if not snapshot.breaker.found:
        breaker = "unknown (no health service status)"
    pending = sum(q.pending for q in snapshot.queues)
    return (
        f"{len(nodes)} GPU nodes, {gpus} GPUs ({allocated} allocated, {healthy_gpus}); "
        f"{quarantined} quarantined, {trouble} need attention; breaker {breaker}; "
        f"{len(snapshot.queues)} ClusterQueues, {pending} workloads pending"
    )


def stale(snapshot: Snapshot) -> str:
    """What is stale or unreachable, one line; empty when everything was read."""
    return "; ".join(f"{source}: {why}" for source, why in snapshot.problems)


def node_detail(snapshot: Snapshot, name: str) -> list[tuple[str, str]]:
    """Everything the fleet view knows about one node, as (field, value) lines."""
    node = next((n for n in snapshot.nodes if n.name == name), None)
    if node is None:
        return [("node", f"{name}: gone")]
    state, why = verdict(node)
    lines = [
        ("node", node.name),
        ("site / pool", f"{node.site} / {node.pool} ({node.region})"),
        ("GPU", f"{node.product} x{node.gpus}"),
        ("allocated", str(node.allocated)),
        ("reporting", _count(node.reporting)),
        ("healthy", _count(node.healthy)),
        ("exporter", {None: "?", True: "up", False: "DOWN"}[node.exporter_up]),
        ("ready", "yes" if node.ready else "NO"),
        ("verdict", f"{state}: {why}" if why else state),
        ("cordoned", _cordon(node)),
    ]
    if node.quarantined_by:
        lines += [
            ("quarantined by", node.quarantined_by),
            ("quarantined at", node.quarantined_at or "?"),
            ("faulty GPUs", ", ".join(node.faulty) or "-"),
        ]
    lines += [("taint", t) for t in node.taints]
    lines += [("label", f"{k}={v}") for k, v in node.labels]
    lines += [
        ("event", f"{_age(e.time, snapshot.taken_at)} {e.reason}: {e.message}")
        for e in sorted(snapshot.events, key=lambda e: e.time, reverse=True)
        if e.object == f"Node/{name}"
    ]
    return lines


def queue_detail(snapshot: Snapshot, name: str) -> list[tuple[str, str]]:
    queue = next((q for q in snapshot.queues if q.name == name), None)
    if queue is None:
        return [("clusterqueue", f"{name}: gone")]
    lines = [
        ("clusterqueue", queue.name),
        ("cohort", queue.cohort or "-"),
        ("active", "yes" if queue.active else "NO"),
        ("pending", str(queue.pending)),
        ("admitted", str(queue.admitted)),
        ("local queues", ", ".join(queue.local_queues) or "-"),
    ]
    for f in queue.flavors:
        configured = "" if f.configured is None else f", configured {f.configured}"
        lines.append(
            (
                f"flavor {f.flavor}",
                f"nominal {f.nominal}{configured}, used {f.usage}, borrowed {f.borrowed}",
            )
        )
    if queue.manual:
        lines.append(("manual quota", queue.manual))
    lines += [
        ("event", f"{_age(e.time, snapshot.taken_at)} {e.reason}: {e.message}")
        for e in sorted(snapshot.events, key=lambda e: e.time, reverse=True)
        if e.object == f"ClusterQueue/{name}"
    ]
    return lines


def detail(snapshot: Snapshot, view: str, key: str) -> list[tuple[str, str]]:
    if view == "fleet":
        return node_detail(snapshot, key)
    if view == "queues":
        return queue_detail(snapshot, key)
    table_ = table(snapshot, view)
    row = next((r for r in table_.rows if r.key == key), None)
    if row is None:
        return [(view, f"{key}: gone")]
    return [(c.title.lower(), v) for c, v in zip(table_.columns, row.cells, strict=True)]


def _seconds(iso: str) -> float | None:
    try:
        return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _negated_time(iso: str) -> float:
    t = _seconds(iso)
    return 0.0 if t is None else -t


def _age(iso: str, now: float) -> str:
    t = _seconds(iso)
    if t is None:
        return "?"
    s = max(0, int(now - t))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h"
    return f"{s // 86400}d"

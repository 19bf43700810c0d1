"""Each view of `gridloop status` as columns and rows of text: the one place that
decides what a node's verdict is, what a queue's row says, and how filtering and
sorting work. The UI, `--once --output table` and `--output json` all use it.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gridloop.status.snapshot import (
    CLAIMED,
    CORDONED,
    EXPORTER_DOWN,
    GPUS_MISSING,
    HEALTHY,
    NOT_READY,
    OPTED_OUT,
    QUARANTINED,
    VERDICTS,
    WARM,
    Event,
    Model,
    Node,
    Queue,
    QueuedJob,
    Sandbox,
    SandboxPod,
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
        Column("SERVING"),
        Column("WHY"),
    )
    rows = []
    quarantined = {n.name for n in snapshot.nodes if n.quarantined_by}
    for m in snapshot.models:
        ready = f"{m.ready}/{m.replicas}"
        rolling = m.serving and m.serving != (m.revision,)
        why = m.stuck and f"{m.revision} stuck: {m.stuck}"
        if m.kind == "Workspace":
            why = workspace_why(m, quarantined)
        cells = (
            m.namespace,
            m.name,
            m.kind,
            ready,
            str(m.gpus),
            m.endpoint,
            m.load_format,
            m.revision or "-",
            ",".join(m.serving) or "-",
            why or (f"rolling to {m.revision}" if rolling else ""),
        )
        keys = (m.namespace, m.name, m.kind, (m.ready, m.replicas), m.gpus, *cells[5:])
        alert = m.ready < m.replicas or bool(m.stuck) or bool(why)
        rows.append(Row(f"{m.namespace}/{m.name}", cells, keys, alert=alert))
    return Table("inference", columns, tuple(rows), "no models (values: inference.models)")


def workspace_why(m: Model, quarantined: set[str]) -> str:
    """What keeps a KAITO Workspace from serving: a node of its quarantined by the health
    service, then the first of KAITO's conditions that is not True, in KAITO's words."""
    out = [f"node {n} quarantined" for n in m.nodes if n in quarantined]
    out += [c for c in m.conditions if not c.endswith("=True")][:1]
    return "; ".join(out)


NO_RUNTIME_CLASS = "runc (none)"  # no runtimeClassName: the node's default runtime, no gVisor
# what a pod says while it is on its way up (or down), not in trouble
_STARTING = ("Running", "Pending", "ContainerCreating", "PodInitializing", "Terminating")
_INIT_STEP = re.compile(r"Init:\d+/\d+")


def sandbox_key(s: Sandbox) -> str:
    return f"{s.namespace}/{s.template}"


def pod_key(p: SandboxPod) -> str:
    return f"{p.namespace}/{p.template or '?'}/{p.name}"


def pods_summary(s: Sandbox, pods: Sequence[SandboxPod]) -> str:
    """A template's pods in a few words: `warm 1/2 ready, 2 claimed` (ready warm pods of
    the pool's desired size), and the claims that hold no pod yet."""
    warm = [p for p in pods if p.state == WARM]
    claimed = sum(1 for p in pods if p.state == CLAIMED)
    ready = sum(1 for p in warm if p.ready)
    parts = ["no warm pool" if s.warm_pool is None else f"warm {ready}/{s.warm_pool} ready"]
    if s.warm_pool is None and warm:
        parts.append(f"{len(warm)} warm")
    parts.append(f"{claimed} claimed")
    if s.claims > claimed:
        waiting = s.claims - claimed
        parts.append(f"{waiting} claim{'s' if waiting > 1 else ''} without a pod")
    others = len(pods) - len(warm) - claimed
    if others:
        parts.append(f"{others} other")
    return ", ".join(parts)


def _runtime(runtime_class: str) -> str:
    return runtime_class or NO_RUNTIME_CLASS


def _pod_row(p: SandboxPod, now: float) -> Row:
    state = f"{CLAIMED} by {p.claim}" if p.state == CLAIMED and p.claim else p.state
    created = _seconds(p.created)
    age = "?" if created is None else kubectl_age(now - created)
    cells = (
        p.namespace,
        p.template or "?",
        p.name,
        state,
        f"{p.ready_containers}/{p.containers}",
        p.status or "?",
        p.node or "-",
        _runtime(p.runtime_class),
        age,
    )
    keys = (
        p.namespace,
        p.template,
        p.name,
        state,
        (p.ready_containers, p.containers),
        p.status,
        p.node,
        cells[7],
        -created if created is not None else 0.0,  # ascending: the youngest first
    )
    trouble = p.status not in _STARTING and not _INIT_STEP.fullmatch(p.status)
    return Row(pod_key(p), cells, keys, alert=not p.runtime_class or trouble)


def sandboxes(snapshot: Snapshot) -> Table:
    """Each SandboxTemplate (POD `-`, STATE its pods in a few words) followed by its
    pods: warm, or claimed and by which claim, with their status, node and runtime
    class (a pod without one runs on plain runc, and is shown in red)."""
    columns = (
        Column("NAMESPACE"),
        Column("TEMPLATE"),
        Column("POD"),
        Column("STATE"),
        Column("READY"),
        Column("STATUS"),
        Column("NODE"),
        Column("RUNTIME CLASS"),
        Column("AGE"),
    )
    by_template: dict[tuple[str, str], list[SandboxPod]] = {}
    for p in snapshot.sandbox_pods:
        by_template.setdefault((p.namespace, p.template), []).append(p)
    groups: dict[tuple[str, str], list[Row]] = {}
    for s in snapshot.sandboxes:
        pods = by_template.get((s.namespace, s.template), [])
        pool_short = (
            s.warm_pool is not None
            and sum(1 for p in pods if p.state == WARM and p.ready) < s.warm_pool
        )
        cells = (
            s.namespace,
            s.template,
            "-",
            pods_summary(s, pods),
            "-",
            "-",
            "-",
            _runtime(s.runtime_class),
            "-",
        )
        keys = (s.namespace, s.template, "", cells[3], (-1, -1), "", "", cells[7], 0.0)
        row = Row(sandbox_key(s), cells, keys, alert=pool_short or not s.runtime_class)
        groups[(s.namespace, s.template)] = [row]
    for group, pods in by_template.items():  # pods of a template not listed go on their own
        groups.setdefault(group, []).extend(_pod_row(p, snapshot.taken_at) for p in pods)
    rows = tuple(r for _, group_rows in sorted(groups.items()) for r in group_rows)
    empty = "no sandbox templates"
    if "sandboxes" in snapshot.absent:
        empty = "agent-sandbox is not installed (no SandboxTemplate CRD)"
    return Table("sandboxes", columns, rows, empty)


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


def ignored(snapshot: Snapshot) -> str:
    """The DCGM-named series the health service reads as no node's (a scrape other than
    the exporter's serving them, or the exporter's own placed nowhere), one line; empty
    when there are none."""
    if not snapshot.breaker.ignored:
        return ""
    return "DCGM series the health service reads as no node's: " + "; ".join(
        snapshot.breaker.ignored
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


def job_age(job: QueuedJob, now: float) -> str:
    return _age(job.created, now)


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
    for job in queue.jobs:
        where = f" in {', '.join(job.flavors)}" if job.flavors else ""
        why = f": {job.why}" if job.why else ""
        age = job_age(job, snapshot.taken_at)
        lines.append(
            (f"{job.kind} {job.namespace}/{job.name}", f"{job.state}{where}, {age} old{why}")
        )
    lines += [
        ("event", f"{_age(e.time, snapshot.taken_at)} {e.reason}: {e.message}")
        for e in sorted(snapshot.events, key=lambda e: e.time, reverse=True)
        if e.object == f"ClusterQueue/{name}"
    ]
    return lines


def sandbox_detail(snapshot: Snapshot, key: str) -> list[tuple[str, str]]:
    """A template's warm pool and claims as their objects report them, and its pods; a
    pod's row, with its claim and when it was created."""
    template = next((s for s in snapshot.sandboxes if sandbox_key(s) == key), None)
    if template is None:
        pod = next((p for p in snapshot.sandbox_pods if pod_key(p) == key), None)
        if pod is None:
            return [("sandboxes", f"{key}: gone")]
        row = _pod_row(pod, snapshot.taken_at)
        lines = [(c.title.lower(), v) for c, v in zip(columns("sandboxes"), row.cells, strict=True)]
        return [*lines, ("claim", pod.claim or "-"), ("created", pod.created or "?")]
    s = template
    pool = "none" if s.warm_pool is None else f"{_count(s.warm_ready)}/{s.warm_pool} ready"
    lines = [
        ("template", f"{s.namespace}/{s.template}"),
        ("runtime class", _runtime(s.runtime_class)),
        ("warm pool", f"{pool} (the SandboxWarmPool's status)"),
        ("claims", str(s.claims)),
    ]
    for p in snapshot.sandbox_pods:
        if (p.namespace, p.template) == (s.namespace, s.template):
            row = _pod_row(p, snapshot.taken_at)
            state, ready, status, node, runtime, age = row.cells[3:]
            lines.append(("pod", f"{p.name}  {state}  {ready} {status}  {node}  {runtime}  {age}"))
    return lines


def detail(snapshot: Snapshot, view: str, key: str) -> list[tuple[str, str]]:
    if view == "fleet":
        return node_detail(snapshot, key)
    if view == "queues":
        return queue_detail(snapshot, key)
    if view == "sandboxes":
        return sandbox_detail(snapshot, key)
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


def kubectl_age(seconds: float) -> str:
    """An age as kubectl's AGE column writes it (apimachinery's HumanDuration): 45s,
    5m30s, 42m, 3h12m, 20h, 2d5h, 30d, 1y20d."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        years, days = hours // 24 // 365, hours // 24 % 365
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{hours // 24 // 365}y"

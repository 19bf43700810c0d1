"""One health cycle, and the loop that repeats it: read, plan, act, record.

    nodes (API, watched) + DCGM series (Prometheus) -> Observed -> plan() -> actions
      -> Executor (patches, Events) -> Rebalancer (Kueue GPU quota, rebalancing.py)
      -> breaker, quota window and status ConfigMap -> metrics

The cycle is level-triggered: it reads the whole world each time and never
remembers anything the cluster does not (the record is in node annotations and
the status ConfigMap), so a restart or a failover repeats no action. The one thing
carried from a cycle to the next is a Prometheus read: a cycle that quarantines starts the
next cycle's read while it acts, and in a storm the next cycle follows as soon as that
read is back. Between cycles the fault events alone are read on a shorter pace, and one
that shows something new starts the next cycle at once (fault_news.py): a fault waits for
a light read, not for the interval. The fault reads stay paced all the same, storm or not:
one starts no sooner than `--fault-read-interval` after the last one started. Each read
costs Prometheus a pass over every GPU's series, and reads back to back in a storm were
most of Prometheus's load just when the machine was busiest (docs/benchmarks.md), which
slowed the reads themselves.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from gridloop import names
from gridloop.errors import one_line
from gridloop.health import breaker as breakers
from gridloop.health import fault_news
from gridloop.health import status_configmap as status
from gridloop.health.acting import WORKERS, EventSender, Executor, Outcome, record_event
from gridloop.health.actions import Hold, Quarantine, TripBreaker, Warn
from gridloop.health.leadership import Lease
from gridloop.health.listing import list_views
from gridloop.health.metrics import Metrics
from gridloop.health.observed import MANAGER, Observed
from gridloop.health.plan import plan
from gridloop.health.policy import Policy
from gridloop.health.reading import Sample, baseline, read, slowest, with_faults
from gridloop.health.rebalancing import Rebalancer
from gridloop.health.refreshing import Refresher
from gridloop.health.signals import BACKGROUND_FAMILIES, queries
from gridloop.health.watching import NodeCache

Log = Callable[[str], None]


# a prefetched read whose answer came back longer ago than this (its cycle was still
# acting) is not used as the next cycle's: that cycle reads again
PREFETCH_FOR_S = 2.0
# the sources of ignored series a cycle's summary and log name (the metric counts them all)
IGNORED_SHOWN = 10
Answer = dict[str, list[Sample]] | str


@dataclass(frozen=True)
class Read:
    """One fault read: the answer, and when it started and came back (monotonic)."""

    answer: Answer
    started: float
    finished: float


@dataclass(frozen=True)
class Prefetch:
    """The next cycle's fault read, started (or due to start) while this cycle acts."""

    future: Future[Read]
    took: dict[str, float]  # each query's time, filled in as they answer


def read_delay(last_started: float, now: float, gap_s: float) -> float:
    """How long the next fault read waits: none once `gap_s` has passed since the last one
    started (pure)."""
    return max(0.0, last_started + gap_s - now)


@dataclass(frozen=True)
class CycleReport:
    outcomes: list[Outcome]
    seconds: float
    held: str | None


def _cycle_line(
    read_s: float,
    plan_s: float,
    act_s: float,
    total_s: float,
    planned: Tally[str],
    applied: int,
    baseline_age_s: float,
    prefetched: str,
    sample_age_s: float | None,
    held: str | None,
    slowest_query: str = "",
) -> str:
    """`--log-cycles`: one cycle in one line (pure)."""
    kinds = " ".join(f"{k}={n}" for k, n in sorted(planned.items()) if k not in ("Warn",))
    age = "none" if sample_age_s is None else f"{sample_age_s:.1f}s old"
    base = (
        "no baseline yet" if baseline_age_s == math.inf else f"baseline {baseline_age_s:.1f}s old"
    )
    return (
        f"cycle {total_s:.2f}s: read {read_s:.2f}s{f' ({prefetched})' if prefetched else ''}"
        f"{f' (slowest: {slowest_query})' if slowest_query else ''} "
        f"plan {plan_s:.2f}s act {act_s:.2f}s; {base}, "
        f"newest sample {age}; planned {kinds or 'nothing'}, applied {applied}"
        + (f"; held: {held}" if held else "")
    )


def _baseline_line(seconds: float, took: dict[str, float], error: str | None) -> str:
    """`--log-cycles`: one background read in one line (pure)."""
    outcome = f"failed: {error}" if error else "done"
    return f"background read {seconds:.2f}s (slowest: {slowest(took) or 'none'}): {outcome}"


def _describe(action: Hold | Warn | TripBreaker) -> str:
    match action:
        case Warn():
            return f"warning: {action.node}: {action.message}"
        case Hold(fault_events_only=True):
            return f"acting on fresh fault events only (no release, nothing else): {action.reason}"
        case Hold():
            return f"holding (no quarantine, no release): {action.reason}"
    return f"circuit breaker tripped: {action.reason}"


class HealthService:
    def __init__(
        self,
        api: client.ApiClient,
        prom: Any,
        policy: Policy,
        namespace: str,
        exporter_job: str = names.EXPORTER_JOB,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
        log: Log = print,
        workers: int = WORKERS,
        nodes: NodeCache | None = None,
        background_events: bool = False,
        instance: str = MANAGER,
        log_cycles: bool = False,
        background_baseline: bool = False,
        exporter_namespace: str = "",
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.instance = instance  # this replica, as its Events report it
        self.prom, self.policy, self.namespace = prom, policy, namespace
        self.queries = queries(policy, exporter_job, exporter_namespace)
        self.nodes = nodes  # None: list every GPU node each cycle
        self.executor = Executor(
            api,
            dry_run=policy.dry_run,
            clock=clock,
            workers=workers,
            on_patched=nodes.offer if nodes else lambda _node: None,
            basis=nodes.basis if nodes else lambda _name: None,
            events=EventSender(self.core, log, instance) if background_events else None,
            instance=instance,
        )
        self.metrics = metrics or Metrics()
        self.metrics.dry_run.set(1 if policy.dry_run else 0)
        self.clock, self.log = clock, log
        self.log_cycles = log_cycles  # one line per cycle: where its time went
        self._used_prefetch = ""  # "prefetched", "prefetch too old, read again" or ""
        self._storming = False  # the last cycle quarantined a node
        # when the run loop last went round (monotonic): /healthz reads it (liveness.py)
        self.heartbeat = time.monotonic()
        self._said: frozenset[str] = frozenset()  # last cycle's warnings, said once
        slow = {f: q for f, q in self.queries.items() if f in BACKGROUND_FAMILIES}
        self.fast = {f: q for f, q in self.queries.items() if f not in BACKGROUND_FAMILIES}
        # the running service never waits for the background read (refreshing.py)
        self.slow = Refresher(
            prom,
            slow,
            policy.scrape_interval_s,
            policy.stale_after_s,
            digest=baseline,
            background=background_baseline,
            on_read=(lambda *read: log(_baseline_line(*read))) if log_cycles else None,
        )
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="health-next")
        self._next: Prefetch | None = None
        # fault reads start at least this far apart (run() sets it to the interval)
        self.read_gap_s = 0.0
        self._read_started = -math.inf  # monotonic: when the last fault read started
        self._took: dict[str, float] = {}  # this cycle's fault read: each query's time
        # the fault events the last cycle read: a read between cycles that shows more starts
        # the next cycle at once (fault_news.py)
        self._seen: frozenset[fault_news.Event] = frozenset()
        # the background read the last cycle laid its faults over, and the last one whose
        # ignored series were counted: each read's count once
        self._kept: object = None
        self._counted: object = None
        self.rebalancer = (
            Rebalancer(api, policy, self.metrics, log, instance)
            if policy.rebalance_quotas
            else None
        )

    def observe(self) -> Observed:
        nodes = self.nodes.views() if self.nodes else None
        if nodes is None:
            nodes = list_views(self.core, self.policy.opt_out_label).views
        # in a storm the cycles' own reads of the fault events come first: the background
        # read starts only just in time to be back before its answers go stale (and if it
        # is late, plan() acts on fresh fault events alone)
        kept = self.slow.answers(defer=self._storming)
        self._kept = kept
        if isinstance(kept, str):
            return Observed(nodes=nodes, prometheus_error=kept)
        prefetched, self._used_prefetch = self._prefetched()
        if prefetched is None:
            self._took = {}
            self._read_started = time.monotonic()
            results = read(self.prom, self.fast, lag_s=0.0, took=self._took)
        else:
            results = prefetched
        if isinstance(results, str):
            return Observed(nodes=nodes, prometheus_error=results)
        self._seen = fault_news.events(results)
        # the baseline can be up to a scrape interval old: staleness counts to now
        observed = with_faults(kept, results, nodes, now=time.time())
        if self.slow.error:
            return dataclasses.replace(observed, baseline_error=self.slow.error)
        return observed

    def _prefetch(self) -> None:
        """Start the next cycle's read while this cycle acts, once `read_gap_s` has passed
        since the last read started (in a storm the next cycle follows as soon as it is
        back: its faults are read while these nodes are patched)."""
        took: dict[str, float] = {}
        delay = read_delay(self._read_started, time.monotonic(), self.read_gap_s)
        self._read_started = time.monotonic() + delay

        def paced() -> Read:
            time.sleep(delay)
            started = time.monotonic()
            answer = read(self.prom, self.fast, 0.0, took=took)
            return Read(answer, started, time.monotonic())

        self._next = Prefetch(self._reader.submit(paced), took)

    def _prefetched(self) -> tuple[Answer | None, str]:
        """The read started by the last cycle, unless its answer has waited too long for
        this cycle, and what became of it (for the cycle's log line). A read that is slow
        to answer is waited for and used: reading again would take as long."""
        prefetch, self._next = self._next, None
        if prefetch is None:
            return None, ""
        done = prefetch.future.result()
        if time.monotonic() - done.finished >= PREFETCH_FOR_S:
            return None, "prefetch too old, read again"
        self._took = prefetch.took
        return done.answer, "prefetched"

    def _watch_cpu(self) -> float:
        return self.nodes.cpu_s if self.nodes else 0.0

    def cycle(self) -> CycleReport:
        start, cpu, watch_cpu = time.monotonic(), time.process_time(), self._watch_cpu()
        now = self.clock()
        observed = self.observe()
        read_at = time.monotonic()
        if self._kept is not self._counted and not observed.prometheus_error:
            self._counted = self._kept
            for ignored in observed.ignored:
                self.metrics.ignored.labels(ignored.reason).inc(ignored.series)
        saved = status.load(self.core, self.namespace)
        breaker = saved.breaker
        actions = plan(observed, self.policy, breaker, now)
        planned_at = time.monotonic()
        if not self.policy.dry_run and any(isinstance(a, Quarantine) for a in actions):
            self._prefetch()
        outcomes = self.executor.apply(actions)
        self._storming = any(o.applied and isinstance(o.action, Quarantine) for o in outcomes)
        phases = self.metrics.phase.labels
        phases("read").observe(read_at - start)
        phases("plan").observe(planned_at - read_at)
        acted_at = time.monotonic()
        phases("act").observe(acted_at - planned_at)
        # a quarantine the API server refused did not happen: it does not count in the window
        done = [o.action for o in outcomes if not o.failed]
        after = breakers.advance(breaker, done, observed.nodes, now, self.policy.limits.window_s)
        hold = next((a for a in actions if isinstance(a, Hold)), None)
        held = hold.reason if hold else None
        partly = bool(hold and hold.fault_events_only)  # fresh fault events still acted on
        self._log(outcomes)
        removals = saved.removals
        if self.rebalancer:
            # the breaker as this cycle found it: the cycle that trips it still counts the
            # nodes it took out; after that, quotas do not move until a reset
            removals = self.rebalancer.cycle(
                observed, done, held, breaker.tripped, saved.removals, now
            )
            phases("quota").observe(time.monotonic() - acted_at)
        summary = {
            "at": now,
            "held": held,
            "faultEventsOnly": partly,
            "dryRun": self.policy.dry_run,
            "actions": dict(Tally(type(a).__name__ for a in actions)),
            # DCGM-named series it read as no node's (`gridloop status` shows them)
            "ignored": [str(i) for i in observed.ignored[:IGNORED_SHOWN]],
        }
        if not self.policy.dry_run:
            status.save(self.core, self.namespace, after, summary, removals)
            if after.tripped and not breaker.tripped:
                ref = client.V1ObjectReference(
                    kind="ConfigMap", name=status.NAME, namespace=self.namespace
                )
                record_event(
                    self.core,
                    self.namespace,
                    ref,
                    "GPUQuarantineBreakerTripped",
                    f"no new quarantines until `gridloop health reset-breaker`: {after.reason}",
                    warning=True,
                    instance=self.instance,
                )
        label = f"fault events only: {held}" if partly else held
        self._record(observed, outcomes, after.tripped, label, time.monotonic() - start)
        if self.log_cycles:
            self.log(
                _cycle_line(
                    read_at - start,
                    planned_at - read_at,
                    acted_at - planned_at,
                    time.monotonic() - start,
                    Tally(type(a).__name__ for a in actions),
                    sum(1 for o in outcomes if o.applied),
                    self.slow.age_s(),
                    self._used_prefetch,
                    observed.newest_sample_age_s,
                    held,
                    slowest(self._took),
                )
            )
        # the node watch works between cycles as well: its share is not the cycle's
        self.metrics.cycle_cpu.set(time.process_time() - cpu - (self._watch_cpu() - watch_cpu))
        # a condition that lasts (an exporter down, Prometheus away) is logged when it
        # starts and when it ends, not every second; metrics carry it meanwhile
        said = frozenset(_describe(a) for a in actions if isinstance(a, Hold | Warn | TripBreaker))
        said |= {
            f"ignoring DCGM series of {i.source} ({i.reason}): no node's"
            for i in observed.ignored[:IGNORED_SHOWN]
        }
        for line in sorted(said - self._said):
            self.log(line)
        for line in sorted(self._said - said):
            self.log(f"resolved: {line}")
        self._said = said
        return CycleReport(outcomes, time.monotonic() - start, held)

    def _record(
        self,
        observed: Observed,
        outcomes: list[Outcome],
        tripped: bool,
        held: str | None,
        seconds: float,
    ) -> None:
        m = self.metrics
        for o in outcomes:
            outcome = "failed" if o.failed else "applied" if o.applied else "planned"
            m.actions.labels(type(o.action).__name__, outcome).inc()
        m.quarantined.set(sum(1 for n in observed.nodes.values() if n.record is not None))
        m.breaker.set(1 if tripped else 0)
        m.cycle.observe(seconds)
        age = observed.newest_sample_age_s
        m.staleness.set(-1 if age is None else age)
        m.hold.clear()
        if held:  # "fault events only" keeps its own prefix: quarantines still happen
            partly = held.startswith("fault events only:")
            m.held.labels("all-but-fault-events" if partly else "all").inc()
            prefix = ":".join(held.split(":")[:2]) if partly else held.split(":")[0]
            m.hold.labels(prefix[:60]).set(1)

    def _log(self, outcomes: list[Outcome]) -> None:
        """The node actions done (or, in dry-run, planned), before the quota they change."""
        for o in outcomes:
            if o.applied or o.failed or self.policy.dry_run:
                self.log(
                    f"{type(o.action).__name__.lower()} {getattr(o.action, 'node', '')}"
                    f"{' (dry-run)' if self.policy.dry_run else ''}: {o.detail}".rstrip(": ")
                )

    def run(
        self,
        interval_s: float,
        stop: threading.Event,
        lease: Lease | None = None,
        fault_read_s: float | None = None,
    ) -> None:
        """Cycle every `interval_s` until `stop` is set; act only while holding `lease`.

        Between cycles, the leader reads the fault events every `fault_read_s` (default, and
        at most, `interval_s`): a read that shows an event the last cycle did not see starts
        the next cycle at once, on that read (`_until`). A cycle that quarantined a node is
        followed at once by the next, whose read was started while it acted: the rest of a
        fault storm reaches Prometheus over one scrape interval, and each of its nodes should
        wait for one read, not for a read and an interval. Reads still start at most once per
        `fault_read_s` (`read_gap_s`).
        """
        self.read_gap_s = min(fault_read_s or interval_s, interval_s)
        while not stop.is_set():
            started, storm, leading = time.monotonic(), False, False
            self.heartbeat = started
            try:
                leading = lease.hold() if lease else True
            except Exception as err:  # API server away: not leading is the safe answer
                self.log(f"leader election failed: {one_line(err)}")
            self.metrics.leader.set(1 if leading else 0)
            if leading:
                try:
                    self.cycle()
                    storm = self._storming
                except Exception as err:  # one bad cycle must not kill the service
                    self.log(f"cycle failed: {one_line(err)}")
            self.heartbeat = time.monotonic()
            if not storm:
                self._until(started + interval_s, stop, leading)
        if self.executor.events is not None:
            self.executor.events.close()  # the Events of the last cycle's actions go out

    def _until(self, due: float, stop: threading.Event, leading: bool) -> None:
        """Wait for the next cycle, due at `due` (monotonic). The leader reads the fault
        events meanwhile, once per `read_gap_s`, and returns early with a read that shows
        something new, kept for the next cycle. A read that fails is left to the cycle to
        report."""
        while not stop.is_set():
            now = time.monotonic()
            next_read = self._read_started + self.read_gap_s
            if not leading or next_read >= due:
                stop.wait(max(0.0, due - now))  # the cycle's own read comes first
                return
            if now < next_read:
                stop.wait(min(due, next_read) - now)
                continue
            took: dict[str, float] = {}
            self._read_started = started = time.monotonic()
            answer = read(self.prom, self.fast, 0.0, took=took)
            if not isinstance(answer, str) and fault_news.news(self._seen, answer):
                done: Future[Read] = Future()
                done.set_result(Read(answer, started, time.monotonic()))
                self._next = Prefetch(done, took)
                return

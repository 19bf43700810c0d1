"""Read what `gridloop status` shows: the shell around snapshot.py.

Nodes and GPU pods come from watch-backed mirrors (watching.py). ClusterQueues,
LocalQueues, models, sandboxes and their pods, the health service's Events and its
status ConfigMap are few and are listed by a poller thread every interval; it also asks
Prometheus two questions (which GPUs report, which exporters are up), for the whole
fleet at once. A snapshot only puts together what the watches and the latest polls
hold, so a slow Prometheus (seconds per query on a busy one) slows the GPU columns,
not the UI. Every source fails on its own: the last good answer stays and the
snapshot's `problems` says what is stale and why, so the UI keeps working while
the API server or Prometheus is away.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from gridloop import kube, names
from gridloop.errors import one_line
from gridloop.health import breaker as breakers
from gridloop.health import reading
from gridloop.health.observed import GPUS, MANAGER, QUARANTINED_AT, QUARANTINED_BY, REASON
from gridloop.health.queues import CONFIGURED, MANUAL
from gridloop.health.signals import PRESENCE
from gridloop.health.status_configmap import NAME as STATUS_CONFIGMAP
from gridloop.models import rollout_reading, rollouts
from gridloop.status.snapshot import (
    CLAIMED,
    OTHER,
    WARM,
    Breaker,
    Event,
    FlavorQuota,
    Model,
    Node,
    Queue,
    QueuedJob,
    Sandbox,
    SandboxPod,
    Snapshot,
)
from gridloop.status.sources import Source, local_prometheus  # noqa: F401 (re-exported)
from gridloop.status.watching import Mirror

GPU = names.GPU_RESOURCE
GPU_NODES = f"{names.GPU_PRESENT_LABEL}=true"
KUEUE = ("kueue.x-k8s.io", "v1beta2")
SANDBOX = ("extensions.agents.x-k8s.io", "v1beta1")
SANDBOX_CORE = ("agents.x-k8s.io", "v1beta1")  # the Sandbox objects claims are bound to
SANDBOX_NAMESPACES = "gridloop.io/sandbox=true"
# the labels and annotation agent-sandbox's controllers put on the pods they make
TEMPLATE_HASH = "agents.x-k8s.io/sandbox-template-ref-hash"
POOL_LABEL = "agents.x-k8s.io/warm-pool-sandbox"  # on a pool's pods until one is claimed
CLAIM_UID = "agents.x-k8s.io/claim-uid"
# on a Sandbox that adopted a pod of another name (v0.2's warm pools); else the pod is
# named as its Sandbox
POD_NAME = "agents.x-k8s.io/pod-name"
TEMPLATE_LABEL = "gridloop.io/sandbox-template"  # the chart's template sets it
OPT_OUT_LABEL = names.OPT_OUT_LABEL
TIMEOUT = 5.0  # seconds for one small list; a hung server must not hold a refresh long
# Prometheus is asked at most this often (seconds): DCGM samples change once per scrape
# interval (5 s locally, 15-60 s in production), and its answers at 5,000 nodes cost
# tens of milliseconds of CPU to read
PROMETHEUS_EVERY = 5.0
Readings = tuple[dict[str, int], dict[str, bool]]  # GPUs reporting, exporter up; per node


def api_client(source: Source) -> client.ApiClient:
    """The installer's client (an unknown context names the flag and lists the known
    ones), retrying a failed request once: an unreachable server shows as stale within
    a refresh, not after minutes of retries."""
    return kube.api_client(source.kubeconfig, context=source.context, pool=16, retries=1)


# --- projections: one raw object to the few fields status keeps --------------------


def _int(value: Any) -> int:
    """A GPU count from a quantity ("8", 8, "8000m")."""
    text = str(value or "0")
    try:
        return int(text[:-1]) // 1000 if text.endswith("m") else int(float(text))
    except ValueError:
        return 0


def node_row(obj: dict[str, Any]) -> Node:
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    labels = meta.get("labels") or {}
    notes = meta.get("annotations") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )
    by = notes.get(QUARANTINED_BY, "") if notes.get(QUARANTINED_AT) else ""
    return Node(
        name=meta["name"],
        site=labels.get(names.SITE_LABEL, "-"),
        pool=labels.get(names.POOL_LABEL, "-"),
        region=labels.get("topology.kubernetes.io/region", "-"),
        product=labels.get(names.GPU_PRODUCT_LABEL, "-"),
        gpus=_int((status.get("allocatable") or {}).get(GPU) or labels.get(names.GPU_COUNT_LABEL)),
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),
        quarantined_by=by,
        reason=notes.get(REASON, "") if by else "",
        faulty=tuple(g for g in notes.get(GPUS, "").split(",") if g) if by else (),
        quarantined_at=notes.get(QUARANTINED_AT, "") if by else "",
        opted_out=labels.get(OPT_OUT_LABEL) == "true",
        taints=tuple(
            f"{t.get('key')}{'=' + t['value'] if t.get('value') else ''}:{t.get('effect')}"
            for t in spec.get("taints") or ()
        ),
        labels=tuple(sorted(labels.items())),
    )


def last_ignored(last_cycle: str) -> tuple[str, ...]:
    """The health service's last cycle's ignored DCGM series (its status ConfigMap's
    `lastCycle`), one string per source; none from a summary it cannot read."""
    try:
        ignored = json.loads(last_cycle).get("ignored") or []
    except (ValueError, AttributeError):
        return ()
    return tuple(str(i) for i in ignored) if isinstance(ignored, list) else ()


def pod_gpus(obj: dict[str, Any]) -> tuple[str, int] | None:
    """(node, GPUs) of a running or pending pod bound to a node that asks for GPUs."""
    spec = obj.get("spec") or {}
    node = spec.get("nodeName")
    if not node:
        return None
    gpus = 0
    for c in spec.get("containers") or ():
        res = c.get("resources") or {}
        gpus += _int((res.get("limits") or {}).get(GPU) or (res.get("requests") or {}).get(GPU))
    return (node, gpus) if gpus else None


def _true(conditions: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    return next(
        (c for c in conditions if c.get("type") == kind and c.get("status") == "True"), None
    )


def queued_job(obj: dict[str, Any]) -> QueuedJob:
    """A Workload as the Queues view shows it: the job it stands for (its owner), and
    where Kueue has it, in Kueue's own words."""
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    owner: dict[str, Any] = next(iter(meta.get("ownerReferences") or ()), {})
    conditions = list(status.get("conditions") or ())
    finished, evicted = _true(conditions, "Finished"), _true(conditions, "Evicted")
    admitted, reserved = _true(conditions, "Admitted"), _true(conditions, "QuotaReserved")
    if finished:
        state, why = "finished", str(finished.get("message") or "")
    elif admitted:
        state, why = "admitted", ""
    elif reserved:
        state, why = "reserved", str(reserved.get("message") or "")
    elif evicted:
        state, why = "evicted", str(evicted.get("message") or "")
    else:
        waiting: dict[str, Any] = next(
            (c for c in conditions if c.get("type") == "QuotaReserved"), {}
        )
        state, why = "pending", str(waiting.get("message") or "")
    assignments = (status.get("admission") or {}).get("podSetAssignments") or ()
    flavors = sorted({f for a in assignments for f in (a.get("flavors") or {}).values()})
    return QueuedJob(
        namespace=str(meta.get("namespace") or ""),
        kind=str(owner.get("kind") or "Workload"),
        name=str(owner.get("name") or meta["name"]),
        local_queue=str(spec.get("queueName") or ""),
        state=state,
        flavors=tuple(flavors),
        why=why,
        created=str(meta.get("creationTimestamp") or ""),
    )


def queue_row(
    obj: dict[str, Any], local_queues: tuple[str, ...] = (), jobs: tuple[QueuedJob, ...] = ()
) -> Queue:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    notes = obj["metadata"].get("annotations") or {}
    try:
        record = json.loads(notes.get(CONFIGURED, "{}"))
        record = record if isinstance(record, dict) else {}
    except ValueError:
        record = {}
    usage: dict[str, tuple[int, int]] = {}
    for f in status.get("flavorsUsage") or ():
        for r in f.get("resources") or ():
            if r.get("name") == GPU:
                usage[f["name"]] = (_int(r.get("total")), _int(r.get("borrowed")))
    flavors = []
    for group in spec.get("resourceGroups") or ():
        for f in group.get("flavors") or ():
            for r in f.get("resources") or ():
                if r.get("name") != GPU:
                    continue
                nominal = _int(r.get("nominalQuota"))
                mine = record.get(f["name"])
                configured = None
                if isinstance(mine, dict) and mine.get("set") == nominal:
                    configured = _int(mine.get("configured"))
                used, borrowed = usage.get(f["name"], (0, 0))
                flavors.append(FlavorQuota(f["name"], nominal, used, borrowed, configured))
    active = all(
        c.get("status") == "True"
        for c in status.get("conditions") or ()
        if c.get("type") == "Active"
    )
    return Queue(
        name=obj["metadata"]["name"],
        cohort=spec.get("cohortName") or spec.get("cohort") or "",
        flavors=tuple(flavors),
        pending=int(status.get("pendingWorkloads") or 0),
        admitted=int(status.get("admittedWorkloads") or 0),
        reserving=int(status.get("reservingWorkloads") or 0),
        active=active,
        manual=notes.get(MANUAL, ""),
        local_queues=local_queues,
        jobs=jobs,
    )


def gpu_limits(containers: Sequence[dict[str, Any]]) -> int:
    """The GPUs these containers' limits ask for."""
    return sum(_int(((c.get("resources") or {}).get("limits") or {}).get(GPU)) for c in containers)


_LOAD_FORMAT = re.compile(r"--load-format[= ](\S+)")


def model_row(
    obj: dict[str, Any], rollout: rollouts.Rollout | None = None, port: int = 8000
) -> Model | None:
    meta, spec = obj["metadata"], obj.get("spec") or {}
    template = spec.get("template") or {}
    tmeta = template.get("metadata") or {}
    name = (tmeta.get("labels") or {}).get(names.MODEL_LABEL)
    if not name:
        return None
    containers = (template.get("spec") or {}).get("containers") or [{}]
    args = " ".join(str(a) for a in containers[0].get("args") or ())
    fmt = _LOAD_FORMAT.search(args)
    status = obj.get("status") or {}
    gpus = gpu_limits(containers)
    return Model(
        namespace=meta.get("namespace", ""),
        name=name,
        kind="Deployment",
        replicas=int(spec.get("replicas", 1)),
        ready=int(status.get("readyReplicas") or 0),
        endpoint=f"http://{meta['name']}.{meta.get('namespace', '')}.svc:{port}/v1",
        load_format=fmt.group(1) if fmt else "auto",
        revision=(tmeta.get("annotations") or {}).get(names.MODEL_REVISION, ""),
        gpus=gpus * int(spec.get("replicas", 1)),
        serving=tuple(r.name for r in rollout.serving) if rollout else (),
        stuck=rollout.stuck if rollout else "",
    )


KAITO = ("kaito.sh", "v1beta1")  # KAITO's Workspaces (its controller from the chart's bundle)
WORKSPACE_LABEL = "kaito.sh/workspace"  # on the pods KAITO makes for a Workspace
# the conditions KAITO writes on a Workspace, in the order they come true
WORKSPACE_CONDITIONS = ("NodesReady", "ResourceReady", "InferenceReady", "WorkspaceSucceeded")


def workspace_row(obj: dict[str, Any], pods: Sequence[dict[str, Any]]) -> Model:
    """A KAITO Workspace as a model row: its pods (labelled with its name) for ready, GPUs
    and where they run, its inference template (the chart's vLLM pod, or the user's) for
    the rest, its conditions as KAITO words them."""
    meta, status = obj["metadata"], obj.get("status") or {}
    inference = obj.get("inference") or {}
    template = inference.get("template") or {}
    containers = (template.get("spec") or {}).get("containers") or [{}]
    args = " ".join(str(a) for a in containers[0].get("args") or ())
    fmt = _LOAD_FORMAT.search(args)
    preset = str((inference.get("preset") or {}).get("name") or "")
    revision = ((template.get("metadata") or {}).get("annotations") or {}).get(names.MODEL_REVISION)
    replicas = int(status.get("targetNodeCount") or (obj.get("resource") or {}).get("count") or 1)
    mine = [
        p
        for p in pods
        if ((p["metadata"].get("labels") or {}).get(WORKSPACE_LABEL) == meta["name"])
    ]
    gpus = gpu_limits(containers)
    found = {c.get("type"): c for c in status.get("conditions") or ()}
    conditions = []
    for kind in (*WORKSPACE_CONDITIONS, *sorted(set(found) - set(WORKSPACE_CONDITIONS))):
        c = found.get(kind)
        if c is None:
            continue
        said = f"{kind}={c.get('status')}"
        if c.get("status") != "True":
            message = " ".join(str(c.get("message") or "").split())[:160]
            said += f" ({c.get('reason') or '-'}): {message}"
        conditions.append(said)
    # where its pods run (status.workerNodes is every node the labelSelector picks, in BYO)
    on = {(p.get("spec") or {}).get("nodeName") for p in mine}
    in_pods = sum(gpu_limits((p.get("spec") or {}).get("containers") or ()) for p in mine)
    return Model(
        namespace=meta.get("namespace", ""),
        name=meta["name"],
        kind="Workspace",
        replicas=replicas,
        ready=sum(1 for p in mine if _ready(p.get("status") or {})),
        endpoint=f"http://{meta['name']}.{meta.get('namespace', '')}.svc:80/v1",
        load_format=fmt.group(1) if fmt else ("preset" if preset else "auto"),
        revision=str(revision or preset),
        gpus=in_pods if mine else gpus * replicas,
        serving=(str(revision),)
        if revision and any(_ready(p.get("status") or {}) for p in mine)
        else (),
        conditions=tuple(conditions),
        nodes=tuple(sorted(n for n in on if n)),
    )


def event_row(obj: dict[str, Any]) -> Event:
    about = obj.get("involvedObject") or {}
    when = (
        obj.get("lastTimestamp")
        or obj.get("eventTime")
        or obj.get("firstTimestamp")
        or obj["metadata"].get("creationTimestamp", "")
    )
    return Event(
        time=str(when),
        type=obj.get("type", "Normal"),
        reason=obj.get("reason", ""),
        object=f"{about.get('kind', '?')}/{about.get('name', '?')}",
        message=" ".join(str(obj.get("message", "")).split()),
        count=int(obj.get("count") or 1),
    )


def sandbox_rows(
    templates: Sequence[dict[str, Any]],
    pools: Sequence[dict[str, Any]] = (),
    claims: Sequence[dict[str, Any]] = (),
) -> tuple[Sandbox, ...]:
    """One row per SandboxTemplate, with its warm pool and the claims against it (a claim
    names a warm pool, the pool its template)."""
    by_template: dict[tuple[str, str], dict[str, Any]] = {}
    template_of: dict[tuple[str, str], str] = {}  # (namespace, pool) -> template
    for p in pools:
        ns = p["metadata"].get("namespace", "")
        ref = ((p.get("spec") or {}).get("sandboxTemplateRef") or {}).get("name", "")
        by_template[(ns, ref)] = p
        template_of[(ns, p["metadata"]["name"])] = ref
    counts: dict[tuple[str, str], int] = {}
    for c in claims:
        ns = c["metadata"].get("namespace", "")
        key = (ns, template_of.get((ns, _claim_pool(c)), ""))
        counts[key] = counts.get(key, 0) + 1
    rows = []
    for t in templates:
        ns, name = t["metadata"].get("namespace", ""), t["metadata"]["name"]
        pod = ((t.get("spec") or {}).get("podTemplate") or {}).get("spec") or {}
        pool = by_template.get((ns, name))
        rows.append(
            Sandbox(
                namespace=ns,
                template=name,
                runtime_class=pod.get("runtimeClassName", ""),
                # v1beta1 leaves replicas out when it is its default, 1
                warm_pool=None if pool is None else int(pool["spec"].get("replicas", 1)),
                warm_ready=None
                if pool is None
                else int((pool.get("status") or {}).get("readyReplicas") or 0),
                claims=counts.get((ns, name), 0),
            )
        )
    return tuple(sorted(rows, key=lambda s: (s.namespace, s.template)))


def _claim_pool(claim: dict[str, Any]) -> str:
    return str(((claim.get("spec") or {}).get("warmPoolRef") or {}).get("name", ""))


def name_hash(name: str) -> str:
    """agent-sandbox's NameHash: FNV-1a (32 bits) of a name as 8 hex digits, the value of
    the pods' sandbox-template-ref-hash (of the template's name) and pool labels."""
    h = 0x811C9DC5
    for byte in name.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return f"{h:08x}"


def _exit_reason(term: dict[str, Any]) -> str:
    if term.get("reason"):
        return str(term["reason"])
    if term.get("signal"):
        return f"Signal:{term['signal']}"
    return f"ExitCode:{term.get('exitCode', 0)}"


def _ready(status: dict[str, Any]) -> bool:
    """The pod's Ready condition is True."""
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )


def pod_status(obj: dict[str, Any]) -> str:
    """What kubectl's STATUS column says about a pod (its printer, less the rarer cases):
    a container's waiting or terminated reason over the pod's phase, Init:... while an
    init container has not finished, Terminating once it is being deleted."""
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    reason = str(status.get("reason") or status.get("phase") or "Unknown")
    inits = spec.get("initContainers") or ()
    sidecars = {c.get("name") for c in inits if c.get("restartPolicy") == "Always"}
    initializing = False
    for i, c in enumerate(status.get("initContainerStatuses") or ()):
        state = c.get("state") or {}
        term, wait = state.get("terminated"), state.get("waiting")
        if term is not None and term.get("exitCode") == 0:
            continue
        if c.get("name") in sidecars and c.get("started"):
            continue  # a sidecar (an init container with restartPolicy Always) that started
        if term is not None:
            reason = "Init:" + _exit_reason(term)
        elif wait and wait.get("reason") and wait["reason"] != "PodInitializing":
            reason = "Init:" + str(wait["reason"])
        else:
            reason = f"Init:{i}/{len(inits)}"
        initializing = True
        break
    if not initializing:
        running = False
        for c in reversed(status.get("containerStatuses") or ()):
            state = c.get("state") or {}
            wait, term = state.get("waiting"), state.get("terminated")
            if wait and wait.get("reason"):
                reason = str(wait["reason"])
            elif term is not None:
                reason = _exit_reason(term)
            elif state.get("running") is not None and c.get("ready"):
                running = True
        if reason == "Completed" and running:
            reason = "Running" if _ready(status) else "NotReady"
    if meta.get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason


def sandbox_pod_rows(
    pods: list[dict[str, Any]],
    templates: Sequence[dict[str, Any]] = (),
    claims: Sequence[dict[str, Any]] = (),
    sandboxes: Sequence[dict[str, Any]] = (),
) -> tuple[SandboxPod, ...]:
    """agent-sandbox's pods as rows, sorted by namespace, template, state and name.

    A pod's template is the chart's gridloop.io/sandbox-template label, else the
    template in its namespace whose name hashes to its sandbox-template-ref-hash. A pod
    with the pool label is warm; one with a claim-uid label is claimed, by the claim
    with that uid, else by the claim bound to its Sandbox (the claim's
    status.sandbox.name; a Sandbox's pod is named as it, or by its
    agents.x-k8s.io/pod-name annotation)."""
    by_hash: dict[tuple[str, str], str] = {}
    for t in templates:
        meta = t["metadata"]
        by_hash[(meta.get("namespace", ""), name_hash(meta["name"]))] = meta["name"]
    by_uid = {
        c["metadata"]["uid"]: c["metadata"]["name"] for c in claims if c["metadata"].get("uid")
    }
    bound = {
        (c["metadata"].get("namespace", ""), sandbox): c["metadata"]["name"]
        for c in claims
        if (sandbox := ((c.get("status") or {}).get("sandbox") or {}).get("name"))
    }
    running_in: dict[tuple[str, str], str] = {}
    for sb in sandboxes:
        meta = sb["metadata"]
        ns = meta.get("namespace", "")
        pod_name = (meta.get("annotations") or {}).get(POD_NAME) or meta["name"]
        if (ns, meta["name"]) in bound:
            running_in[(ns, pod_name)] = bound[(ns, meta["name"])]
    rows = []
    for pod in pods:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        ns, name = meta.get("namespace", ""), meta["name"]
        labels = meta.get("labels") or {}
        hashed = by_hash.get((ns, labels.get(TEMPLATE_HASH, "")), "")
        template = labels.get(TEMPLATE_LABEL) or hashed
        claim = ""
        if CLAIM_UID in labels:
            state = CLAIMED
            claim = by_uid.get(labels[CLAIM_UID]) or running_in.get((ns, name), "")
        elif POOL_LABEL in labels:
            state = WARM
        else:
            state = OTHER
        rows.append(
            SandboxPod(
                namespace=ns,
                name=name,
                template=template,
                state=state,
                claim=claim,
                status=pod_status(pod),
                ready=_ready(status),
                ready_containers=sum(
                    1 for c in status.get("containerStatuses") or () if c.get("ready")
                ),
                containers=len(spec.get("containers") or ()),
                node=spec.get("nodeName") or "",
                runtime_class=spec.get("runtimeClassName") or "",
                created=str(meta.get("creationTimestamp") or ""),
            )
        )
    return tuple(sorted(rows, key=lambda p: (p.namespace, p.template, p.state, p.name)))


# --- the collector ------------------------------------------------------------------


@dataclass(frozen=True)
class Polled:
    """One round of polling: when, Prometheus' two answers, and the small lists with what
    failed (a Snapshot without nodes, which the watches supply)."""

    at: float = 0.0  # monotonic; 0: no round finished yet
    prom: Readings | None = None
    lists: Snapshot = field(default_factory=lambda: Snapshot(taken_at=0.0))


class Collector:
    """Keeps the mirrors running and builds a Snapshot on demand (from a worker thread)."""

    MAX_EVENTS = 200

    def __init__(self, source: Source) -> None:
        self.source = source
        self.api = api_client(source)
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.apps = client.AppsV1Api(self.api)
        url, access = source.prometheus_url, source.prometheus_access
        self.prom = reading.connect(url, access) if url else None
        self.nodes: Mirror[Node] = Mirror(
            "nodes", self.core.list_node, node_row, label_selector=GPU_NODES
        )
        self.pods: Mirror[tuple[str, int]] = Mirror(
            "pods",
            self.core.list_pod_for_all_namespaces,
            pod_gpus,
            field_selector="status.phase!=Succeeded,status.phase!=Failed",
        )
        self._last = Snapshot(taken_at=time.time(), context=self.context)
        self._fleet_key: tuple[object, ...] = ()
        # name -> (the mirror's node, its allocation and Prometheus inputs, the row built)
        self._fleet_built: dict[str, tuple[Node, tuple[object, ...], Node]] = {}
        self._fleet_names: list[str] = []  # the keys of _fleet_built, sorted
        self._allocated: dict[str, int] = {}  # GPUs held by pods, per node
        self._last_prom: Readings | None = None
        self._first_wait = 0.0
        self.interval = 2.0
        self._quick = False
        self._prom_at = -math.inf
        self._prom_problem: str | None = None
        self._polled = Polled()
        # the SandboxTemplates and SandboxClaims last listed (templates, claims)
        self._sandbox_objects: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
        self._polled_once = threading.Event()
        self.first_poll_at: float | None = None  # monotonic: the first round of polls done
        self.prometheus_at: float | None = None  # monotonic: Prometheus' first answers in
        self._lock = threading.Lock()
        self._stop = threading.Event()

    @property
    def context(self) -> str:
        if self.source.context:
            return self.source.context
        try:
            _, current = config.list_kube_config_contexts(config_file=self.source.kubeconfig)
            return str(current["name"])
        except (config.ConfigException, KeyError, TypeError):
            return ""

    def start(self, wait: float = 10.0, interval: float = 2.0, quick: bool = False) -> Collector:
        """Start the watches and the poller (every `interval` s); the first snapshot waits
        up to `wait` s for the watches' lists and the first round of polls. `quick` (the
        UI): that first round leaves Prometheus out, so a Prometheus that takes seconds
        to answer shows as "no answer yet" instead of holding the first picture back."""
        self.interval = interval
        self._quick = quick
        self.nodes.start()
        self.pods.start()
        threading.Thread(target=self._poll_loop, name="status-poll", daemon=True).start()
        self._first_wait = wait
        return self

    def stop(self) -> None:
        self.nodes.stop()
        self.pods.stop()
        self._stop.set()

    def snapshot(self) -> Snapshot:
        """What the watches and the latest polls hold, now: never waits on the network
        (but the first call waits for the first answers)."""
        if self._first_wait:
            deadline = time.monotonic() + self._first_wait
            for mirror in (self.nodes, self.pods):
                mirror.wait_synced(max(0.0, deadline - time.monotonic()))
            self._polled_once.wait(max(0.0, deadline - time.monotonic()))
            self._first_wait = 0.0
        with self._lock:
            polled = self._polled
        problems = dict(polled.lists.problems)
        for mirror in (self.nodes, self.pods):
            if mirror.problem:
                problems["api"] = mirror.problem
        age = time.monotonic() - polled.at
        if not polled.at:
            problems.setdefault("polls", "no answers yet from the API server or Prometheus")
        elif age > max(3 * self.interval, 10.0):
            problems.setdefault("polls", f"the last answers are {age:.0f}s old")
        last = self._last
        self._last = replace(
            polled.lists,
            taken_at=time.time(),
            context=last.context,
            nodes=self._fleet(polled.prom, last),
            problems=tuple(sorted(problems.items())),
        )
        return self._last

    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self._poll()
            except Exception as err:  # a poller that dies would freeze every view
                if self._stop.is_set():
                    return
                with self._lock:
                    lists = self._polled.lists
                    kept = tuple(p for p in lists.problems if p[0] != "polls")
                    problems = (*kept, ("polls", one_line(err, 160)))
                    self._polled = replace(self._polled, lists=replace(lists, problems=problems))
            if not self._polled_once.is_set():
                self.first_poll_at = time.monotonic()
            self._polled_once.set()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - began)))

    def _poll(self) -> None:
        """One round of the small lists and the two Prometheus queries; a source that
        fails keeps its last answer and says why."""
        problems: dict[str, str] = {}
        absent: list[str] = []
        last = self._polled.lists
        if self._quick and not self._polled_once.is_set():
            prom = None
            if self.prom is not None:
                problems["prometheus"] = "no answer yet"
        elif time.monotonic() - self._prom_at >= max(self.interval, PROMETHEUS_EVERY):
            self._prom_at = time.monotonic()
            prom = self._prometheus(problems)
            self._prom_problem = problems.get("prometheus")
            if self._prom_problem is None and self.prometheus_at is None:
                self.prometheus_at = time.monotonic()
        else:  # its samples change once per scrape interval: the last answer stands
            prom = self._polled.prom
            if self._prom_problem:
                problems["prometheus"] = self._prom_problem
        queues = self._guard("kueue", problems, absent, self._queues, last.queues)
        models = self._guard("inference", problems, absent, self._models, last.models)
        sandboxes = self._guard("sandboxes", problems, absent, self._sandboxes, last.sandboxes)
        sandbox_pods: tuple[SandboxPod, ...] = ()
        if "sandboxes" not in absent:  # without agent-sandbox there are none to list
            sandbox_pods = self._guard(
                "sandbox-pods", problems, absent, self._sandbox_pods, last.sandbox_pods
            )
        events = self._guard("events", problems, absent, self._events, last.events)
        breaker = self._guard("health", problems, absent, self._breaker, last.breaker)
        lists = Snapshot(
            taken_at=time.time(),
            queues=queues,
            models=models,
            sandboxes=sandboxes,
            sandbox_pods=sandbox_pods,
            events=events,
            breaker=breaker,
            problems=tuple(problems.items()),
            absent=tuple(absent),
        )
        polled = Polled(at=time.monotonic(), prom=prom, lists=lists)
        with self._lock:
            self._polled = polled

    def _guard(
        self, name: str, problems: dict[str, str], absent: list[str], read: Any, last: Any
    ) -> Any:
        try:
            return read()
        except ApiException as err:
            if err.status == 404:
                absent.append(name)
                return type(last)()
            problems[name] = f"{err.status} {err.reason}"
        except Exception as err:  # unreachable: keep the last answer, say it is stale
            problems.setdefault("api", f"unreachable: {one_line(err, 160)}")
        return last

    # Prometheus: which GPUs report, and which exporters are up, per node
    def _prometheus(
        self, problems: dict[str, str]
    ) -> tuple[dict[str, int], dict[str, bool]] | None:
        if self.prom is None:
            return None
        job = f'{{job="{self.source.exporter_job}"}}'  # the exporter's own series only
        answers = reading.read(  # by the scrape's node alone (health's reading.resolve)
            self.prom, {"present": f"count by (node) ({PRESENCE}{job})", "up": f"up{job}"}
        )
        if isinstance(answers, str):
            problems["prometheus"] = answers
            return self._last_prom
        reporting: dict[str, int] = {}
        for sample in answers.get("present", []):
            labels = sample.get("metric", {})
            host = labels.get("node")
            if host:
                reporting[host] = reporting.get(host, 0) + int(float(sample["value"][1]))
        up = reading.baseline({"up": answers.get("up", [])}).exporter_up
        if not reporting and not up:
            problems["prometheus"] = (
                f"no DCGM series (job {self.source.exporter_job!r}): is the exporter scraped?"
            )
        if (reporting, up) != self._last_prom:  # unchanged answers keep the fleet's rows
            self._last_prom = (reporting, up)
        return self._last_prom

    def _fleet(self, prom: Readings | None, last: Snapshot) -> tuple[Node, ...]:
        """The node rows; rebuilt only when a watch or Prometheus brought something new,
        and then only the nodes whose own inputs changed (the rest are the same objects,
        which the UI's row cache recognises). When only nodes moved, only the nodes the
        watch changed are visited."""
        key = (self.nodes.version, self.pods.version, id(prom))
        if key == self._fleet_key:
            return last.nodes
        nodes, changed = self.nodes.changes()
        before = self._fleet_key or (None, None, None)
        every = changed is None or key[1:] != before[1:]  # else: only the changed nodes
        if key[1] != before[1]:
            self._allocated = {}
            for host, gpus in self.pods.items().values():
                self._allocated[host] = self._allocated.get(host, 0) + gpus
        old = self._fleet_built
        if every:
            self._fleet_built = {}
        names_moved = every
        for name in nodes if every or changed is None else changed:
            node = nodes.get(name)
            if node is None:
                names_moved |= self._fleet_built.pop(name, None) is not None
                continue
            names_moved |= name not in self._fleet_built
            self._fleet_built[name] = self._node_row(name, node, prom, old.get(name))
        if names_moved:
            self._fleet_names = sorted(self._fleet_built)
        self._fleet_key = key
        return tuple(self._fleet_built[name][2] for name in self._fleet_names)

    def _node_row(
        self,
        name: str,
        node: Node,
        prom: Readings | None,
        cached: tuple[Node, tuple[object, ...], Node] | None,
    ) -> tuple[Node, tuple[object, ...], Node]:
        """(the mirror's node, its allocation and Prometheus inputs, the row built); the
        cached row stands while the node object and its inputs are the same."""
        allocated = self._allocated.get(name, 0)
        inputs: tuple[object, ...] = (allocated, prom is not None)
        reporting, up = prom if prom is not None else ({}, {})
        if prom is not None:
            inputs += (up.get(name), reporting.get(name, 0))
        if cached is not None and cached[0] is node and cached[1] == inputs:
            return cached
        changes: dict[str, Any] = {}
        if allocated:
            changes["allocated"] = allocated
        if prom is not None:
            changes["exporter_up"] = up.get(name)
            changes["reporting"] = reporting.get(name, 0) if up.get(name) else None
        return (node, inputs, replace(node, **changes) if changes else node)

    def _queues(self) -> tuple[Queue, ...]:
        group, version = KUEUE
        lqs = self.custom.list_cluster_custom_object(
            group, version, "localqueues", _request_timeout=TIMEOUT
        )
        by_cq: dict[str, list[str]] = {}
        for lq in lqs.get("items", []):
            cq = (lq.get("spec") or {}).get("clusterQueue", "")
            meta = lq["metadata"]
            by_cq.setdefault(cq, []).append(f"{meta.get('namespace')}/{meta['name']}")
        cqs = self.custom.list_cluster_custom_object(
            group, version, "clusterqueues", _request_timeout=TIMEOUT
        )
        workloads = self.custom.list_cluster_custom_object(
            group, version, "workloads", _request_timeout=TIMEOUT
        )
        cq_of = {lq: cq for cq, lqs in by_cq.items() for lq in lqs}
        jobs: dict[str, list[QueuedJob]] = {}
        for w in workloads.get("items", []):
            job = queued_job(w)
            cq = cq_of.get(f"{job.namespace}/{job.local_queue}", "")
            jobs.setdefault(cq, []).append(job)
        return tuple(
            queue_row(
                cq,
                tuple(sorted(by_cq.get(cq["metadata"]["name"], ()))),
                tuple(sorted(jobs.get(cq["metadata"]["name"], ()), key=lambda j: j.created)),
            )
            for cq in sorted(cqs.get("items", []), key=lambda o: o["metadata"]["name"])
        )

    def _models(self) -> tuple[Model, ...]:
        raw = self.apps.list_deployment_for_all_namespaces(
            label_selector="app.kubernetes.io/part-of=gridloop",
            _preload_content=False,
            _request_timeout=TIMEOUT,
        )
        deployments = [d for d in json.loads(raw.data)["items"] if rollout_reading.is_model(d)]
        workspaces = self._workspaces()
        if not deployments:
            return workspaces

        def by_namespace(listed: Callable[..., Any]) -> dict[str, list[Any]]:
            answer = listed(
                label_selector=rollouts.MODEL, _preload_content=False, _request_timeout=TIMEOUT
            )
            out: dict[str, list[Any]] = {}
            for item in json.loads(answer.data)["items"]:
                out.setdefault(item["metadata"].get("namespace", ""), []).append(item)
            return out

        replica_sets = by_namespace(self.apps.list_replica_set_for_all_namespaces)
        pods = by_namespace(self.core.list_pod_for_all_namespaces)
        rows = [
            model_row(d, rollouts.rollout(d, replica_sets.get(ns, []), pods.get(ns, [])))
            for d in deployments
            for ns in [d["metadata"].get("namespace", "")]
        ]
        found = [m for m in rows if m] + list(workspaces)
        return tuple(sorted(found, key=lambda m: (m.namespace, m.name, m.kind)))

    def _workspaces(self) -> tuple[Model, ...]:
        """KAITO's Workspaces, any namespace; none when KAITO's CRD is not served, or the
        user may not list them (the chart's own model servers are still shown)."""
        group, version = KAITO
        try:
            listed = self.custom.list_cluster_custom_object(
                group, version, "workspaces", _request_timeout=TIMEOUT
            )
        except ApiException as err:
            if err.status in (403, 404):
                return ()
            raise
        items = list(listed.get("items", []))
        if not items:
            return ()
        answer = self.core.list_pod_for_all_namespaces(
            label_selector=WORKSPACE_LABEL, _preload_content=False, _request_timeout=TIMEOUT
        )
        pods: dict[str, list[Any]] = {}
        for pod in json.loads(answer.data)["items"]:
            pods.setdefault(pod["metadata"].get("namespace", ""), []).append(pod)
        return tuple(
            workspace_row(w, pods.get(w["metadata"].get("namespace", ""), [])) for w in items
        )

    def _sandboxes(self) -> tuple[Sandbox, ...]:
        group, version = SANDBOX

        def items(plural: str) -> list[dict[str, Any]]:
            answer = self.custom.list_cluster_custom_object(
                group, version, plural, _request_timeout=TIMEOUT
            )
            return list(answer.get("items", []))

        templates = items("sandboxtemplates")
        pools = items("sandboxwarmpools")
        claims = items("sandboxclaims")
        self._sandbox_objects = (templates, claims)  # what _sandbox_pods names pods by
        return sandbox_rows(templates, pools, claims)

    def _sandbox_pods(self) -> tuple[SandboxPod, ...]:
        """agent-sandbox's pods in the sandbox namespaces (labelled gridloop.io/sandbox=true,
        and any other namespace holding a SandboxTemplate: a pod there is not held to the
        sandbox admission policy), and the Sandboxes that name the pods they run in."""
        templates, claims = self._sandbox_objects
        raw = self.core.list_namespace(
            label_selector=SANDBOX_NAMESPACES, _preload_content=False, _request_timeout=TIMEOUT
        )
        namespaces = {n["metadata"]["name"] for n in json.loads(raw.data)["items"]}
        namespaces |= {t["metadata"].get("namespace", "") for t in templates} - {""}
        uids = {c["metadata"].get("uid") for c in claims}
        group, version = SANDBOX_CORE
        pods: list[dict[str, Any]] = []
        sandboxes: list[dict[str, Any]] = []
        for ns in sorted(namespaces):
            raw = self.core.list_namespaced_pod(
                ns,
                label_selector=TEMPLATE_HASH,
                _preload_content=False,
                _request_timeout=TIMEOUT,
            )
            found = json.loads(raw.data)["items"]
            pods += found
            held = {(p["metadata"].get("labels") or {}).get(CLAIM_UID) for p in found}
            if not held - {None} - uids:
                continue  # every claimed pod (if any) is named by its claim's uid
            try:
                answer = self.custom.list_namespaced_custom_object(
                    group, version, ns, "sandboxes", _request_timeout=TIMEOUT
                )
            except ApiException as err:
                if err.status != 404:  # no Sandbox CRD: claims are named by uid only
                    raise
                continue
            sandboxes += answer.get("items", [])
        return sandbox_pod_rows(pods, templates, claims, sandboxes)

    def _events(self) -> tuple[Event, ...]:
        items = []
        for source in (MANAGER, rollout_reading.SOURCE):  # the health service's, the installer's
            raw = self.core.list_event_for_all_namespaces(
                field_selector=f"source={source}",
                _preload_content=False,
                _request_timeout=TIMEOUT,
            )
            items += json.loads(raw.data)["items"]
        rows = sorted(
            (event_row(e) for e in items),
            key=lambda e: e.time,
            reverse=True,
        )
        return tuple(rows[: self.MAX_EVENTS])

    def _breaker(self) -> Breaker:
        try:
            cm = self.core.read_namespaced_config_map(
                STATUS_CONFIGMAP, self.source.health_namespace, _request_timeout=TIMEOUT
            )
        except ApiException as err:
            if err.status == 404:
                return Breaker()
            raise
        data = cm.data or {}
        saved = breakers.from_json(data.get("breaker", ""))
        return Breaker(saved.tripped, saved.reason, True, last_ignored(data.get("lastCycle", "")))

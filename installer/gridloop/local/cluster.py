"""Bring the local cluster up and down: the orchestration behind `gridloop local`.

`up` checks everything it can before it starts anything (fleet file, binaries,
free ports), so bad input changes nothing. Once it starts processes, a failure
stops every process it started: there is never a half-started cluster. `up` on
a running cluster reports it and changes nothing. `down` stops each process by
the pid it recorded and checks that every port is free again.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from gridloop import kube, resources
from gridloop.bundle.sources import source_for
from gridloop.errors import ClusterError, UsageError
from gridloop.fleet import Fleet, FleetError, load_fleet, planned_nodes
from gridloop.local import certs, flags, launching, ports, processes, prometheus_config
from gridloop.local.addons import (
    applying,
    kueue_installing,
    kueue_manifests,
    object_store,
    sandbox_installing,
    store_admin,
)
from gridloop.local.build import building, recipes
from gridloop.local.container import addons, network_policy, stale_leases, sweeping
from gridloop.local.container import starting as container
from gridloop.local.kwok import nodes as simulated_nodes
from gridloop.local.kwok import stages
from gridloop.local.ports import LOOPBACK, Ports
from gridloop.local.processes import Proc
from gridloop.local.state import State, load

Say = Callable[[str], None]

# the order processes start in, and the reverse of the order they stop in
ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# how long `down` waits after SIGTERM before SIGKILL, where not the default: kube-apiserver
# v1.35 stops listening at once but then did not exit within 15 s (every `down` of a
# cluster with container nodes measured here, a fresh one's too; kwok-only clusters' were
# quick), and it holds nothing etcd, stopped after it, does not
STOP_GRACE_S = {"kube-apiserver": 2.0}
# when the fleet asks for it: Kueue's controller, after its CRDs and webhooks are applied
KUEUE = launching.KUEUE
AGENT_SANDBOX = launching.AGENT_SANDBOX  # its controller, the process (sandbox_installing.py)
AGENT_SANDBOX_BINARY = launching.AGENT_SANDBOX_BINARY
# simulated dcgm-exporters, a real Prometheus scraping them, the health service
GPU_HEALTH = ("dcgm-sim", "prometheus", "gridloop-health")
# with container nodes: the local registry they pull images from, started before them
REGISTRY = launching.REGISTRY
# with container nodes: the object store model weights stream from, beside the registry
OBJECT_STORE = launching.OBJECT_STORE
# with container nodes, after them: Services (kube-proxy) and NetworkPolicy enforcement
# (kube-network-policies); the cluster DNS is a pod (container/addons.py)
SERVICES = ("kube-proxy", "kube-network-policies")
START_TIMEOUT = 60.0
DNS_TIMEOUT = 120.0  # seconds; its pod's image is in the local registry
FIRST_SCRAPE_TIMEOUT = 30.0  # seconds; the scrape interval is 5 s


def default_health_policy() -> Path:
    return resources.health_policy()


def default_fleet_file() -> Path:
    return resources.default_fleet()


def read_fleet(path: Path) -> Fleet:
    try:
        return load_fleet(path)
    except FleetError as err:
        raise UsageError(str(err)) from err


def running(state: State | None) -> list[Proc]:
    return [p for p in state.processes if processes.alive(p)] if state else []


def fully_running(state: State | None) -> bool:
    if state is None or not state.processes:
        return False
    expected = state.components or list(ORDER)
    return [p.name for p in running(state)] == expected


@dataclass(frozen=True)
class UpResult:
    state: State
    already_running: bool
    started_seconds: float = 0.0
    ready_seconds: float = 0.0
    created: int = 0
    deleted: int = 0


def up(
    state_dir: Path,
    fleet_path: Path,
    base_port: int,
    say: Say = print,
    gpu_health: bool = True,
    health_policy: Path | None = None,
    health_service: bool = True,
    prometheus_settings: Mapping[str, str] | None = None,
) -> UpResult:
    """Start the cluster; with `gpu_health`, also the simulated dcgm-exporters and
    Prometheus, and (unless `health_service` is False) the health service itself; with
    the fleet's container nodes, the registry, the images and the nodes' kubelets.
    `prometheus_settings`: Prometheus's global settings over the local ones (benchmarks)."""
    fleet = read_fleet(fleet_path)
    policy_path = health_policy or default_health_policy()
    if gpu_health:
        from gridloop.health.policy_loading import load_policy

        load_policy(policy_path)  # a bad policy is refused before anything starts
    try:
        ports = Ports.from_base(base_port)
    except ValueError as err:
        raise UsageError(str(err)) from err
    previous = load(state_dir)
    alive = running(previous)
    if fully_running(previous):
        assert previous is not None
        return UpResult(previous, already_running=True)
    if previous and alive:
        say(f"found a partly running cluster ({', '.join(p.name for p in alive)}): restarting it")
        _stop_all(previous)
    kueue = fleet.kueue.enabled  # never with container nodes (the fleet schema)
    nodes = container.process_names(fleet)
    # in start order: the exporters and Prometheus right after the nodes, so their first
    # scrapes overlap the controllers' CRD applies; the health service last (it reads
    # what Kueue and Prometheus serve). With container nodes the controllers and the
    # health service are the chart's pods (`gridloop install`), not processes here.
    metrics = GPU_HEALTH[:-1] if gpu_health else ()
    service = GPU_HEALTH[-1:] if gpu_health and health_service and not nodes else ()
    real = (REGISTRY, OBJECT_STORE, *nodes, *SERVICES) if nodes else ()
    controllers = () if nodes else (*((KUEUE,) if kueue else ()), AGENT_SANDBOX)
    components = [*ORDER, *real, *metrics, *controllers, *service]
    processes.check_ports_free(ports.used_by(components))
    if nodes:  # first: this cluster's own sweep below forgets which cluster owned the nodes
        _sweep_stale_owner(state_dir)
    if previous is not None and not alive:
        _sweep(previous, None)  # a cluster that died without `down` may have left pods
    container.check(fleet, str(fleet_path), state_dir)
    if note := container.disk_note(fleet, state_dir):
        say(f"note: {note}")
    binaries = _binaries(say, gpu_health, kueue, bool(nodes))

    state = State(
        dir=state_dir,
        base_port=base_port,
        ports=ports,
        fleet_name=fleet.name,
        nodes=fleet.node_count,
        started_at=time.time(),
        components=components,
    )
    _prepare(state, fleet_path, binaries, fleet, policy_path, prometheus_settings)
    t0 = time.monotonic()
    try:
        if nodes:  # the API server advertises the first node's address on the bridge
            container.prepare_network(fleet, state.ports, state.dir)
        _start_all(state, binaries, say, ORDER)
        started = time.monotonic() - t0
        api = kube.api_client(state.kubeconfig)
        result = simulated_nodes.sync(api, fleet)
        say(
            f"fleet {fleet.name}: {fleet.node_count} nodes, {fleet.gpu_count} GPUs "
            f"({result.created} created, {result.deleted} removed, {result.kept} kept)"
        )
        if nodes and (released := stale_leases.release(api)):
            say(
                f"leader leases: {len(released)} released, their holders stopped with the "
                f"cluster: {', '.join(map(str, released))}"
            )
        retired = container.retire(api, fleet)
        if retired:
            say(f"removed container nodes the fleet no longer has: {', '.join(retired)}")
        ready = simulated_nodes.wait_ready(
            api, fleet.node_count, timeout=60 + fleet.node_count / 25, progress=_every(5.0, say)
        )
        if nodes:
            _start_container_nodes(state, fleet, binaries, api, say)
        # Prometheus starts without Kueue's scrape token: it reads the file on each scrape
        _start_all(state, binaries, say, metrics)
        _converge_kueue(state, binaries, api, say, kueue)
        if not nodes:
            _converge_agent_sandbox(state, binaries, say)
        if gpu_health:
            _ensure_namespace(api, prometheus_config.HEALTH_NAMESPACE)
            if kueue or nodes:  # the chart's Kueue pod is scraped with it too
                kueue_installing.write_scraper_token(
                    api, prometheus_config.HEALTH_NAMESPACE, launching.kueue_token(state)
                )
            _start_all(state, binaries, say, service)
            _wait_first_scrape(state.ports, say)
    except BaseException:
        _stop_all(state)
        raise
    return UpResult(state, False, started, ready, result.created, result.deleted)


def registry_url(state_dir: Path) -> str | None:
    """The URL of the registry a running local cluster's nodes pull from; None when no
    cluster with one runs from `state_dir`."""
    state = load(state_dir)
    if state is None or not fully_running(state) or REGISTRY not in state.components:
        return None
    return f"http://{LOOPBACK}:{state.ports.registry}"


def push_new_images(state_dir: Path) -> str | None:
    """On a running cluster with a registry, push every built image it lacks there (or
    holds an older build of) and say which in one line; None when no such cluster runs.
    Its nodes pull from that registry only, so an image built after `up` must go there
    before an install can use it."""
    from gridloop.local.build.images import pushing

    state = load(state_dir)
    if state is None or not fully_running(state) or REGISTRY not in state.components:
        return None
    binaries = {name: building.binary(name) for name in pushing.BINARIES}
    pushed = pushing.push_all(state.ports.registry, binaries)
    where = f"the local cluster's registry (127.0.0.1:{state.ports.registry})"
    if pushed:
        return f"images: pushed to {where}: {', '.join(pushed)}"
    return f"images: {where} already holds every built image"


def _start_container_nodes(
    state: State, fleet: Fleet, binaries: dict[str, Path], api: client.ApiClient, say: Say
) -> None:
    """The registry, the images the nodes need, then each node's containerd and kubelet."""
    from gridloop.local.build.images import pushing

    _start_all(state, binaries, say, (REGISTRY, OBJECT_STORE))
    t0 = time.monotonic()
    made, buckets = store_admin.converge(state.dir, state.ports.object_store)
    say(
        f"object store: {made} users made, policies on {buckets} buckets: a key per role "
        f"in {time.monotonic() - t0:.1f}s"
    )
    t0 = time.monotonic()
    pause = pushing.ensure_images(state.ports.registry, binaries)
    say(f"images: in the local registry in {time.monotonic() - t0:.1f}s")

    def record(proc: Proc) -> None:
        state.processes.append(proc)
        state.save()

    since = time.time()
    container.start(
        fleet,
        state.dir,
        state.ports,
        certs.Pki(state.dir / "pki"),
        state.server,
        binaries,
        pause,
        record,
        lambda port: launching.http_ok(f"http://{LOOPBACK}:{port}/healthz", state),
        say,
    )
    names = [n.name for n in container.nodes(fleet, state.dir)]
    took = container.wait_ready(api, names, since)
    say(f"container nodes: {len(names)} Ready in {took:.1f}s")
    if untainted := container.drop_old_taint(api, names):
        say(f"container nodes: an older gridloop's taint removed from {', '.join(untainted)}")
    first = container.nodes(fleet, state.dir)[0].planned
    from gridloop.local.build.images import table

    objects = addons.dns_objects(ports.SERVICE_CIDR, table.coredns_ref(), len(names))
    objects += addons.prometheus_objects(first.node_ip, state.ports.prometheus)
    objects += network_policy.rbac_objects()
    objects += object_store.cluster_objects(
        first.node_ip, state.ports.object_store, object_store.RELEASE_NAMESPACE, state.dir
    )
    applying.server_side_apply(
        binaries["kubectl"],
        state.kubeconfig,
        state.dir / "cluster-dns.yaml",
        objects,
        "the cluster DNS, Prometheus' Service and kube-network-policies' RBAC",
    )
    _start_all(state, binaries, say, SERVICES)
    _wait_dns(api, say)


def _wait_dns(api: client.ApiClient, say: Say) -> None:
    """Return once the cluster DNS pod is ready (it needs kube-proxy for the API server's
    Service): a pod started right after `up` resolves names at once."""
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    t0 = time.monotonic()
    while time.monotonic() - t0 < DNS_TIMEOUT:
        found = apps.read_namespaced_deployment_status(addons.DNS_NAME, addons.DNS_NAMESPACE)
        if (found.status.ready_replicas or 0) >= 1:
            say(f"cluster DNS: CoreDNS ready in {time.monotonic() - t0:.1f}s")
            return
        time.sleep(0.25)
    selector = ",".join(f"{k}={v}" for k, v in addons.DNS_POD_LABELS.items())
    pods = core.list_namespaced_pod(addons.DNS_NAMESPACE, label_selector=selector).items
    states = [
        f"{p.metadata.name} {p.status.phase}"
        + "".join(
            f" ({s.state.waiting.reason})"
            for s in p.status.container_statuses or []
            if s.state and s.state.waiting
        )
        for p in pods
    ]
    raise ClusterError(
        f"cluster DNS: CoreDNS not ready after {DNS_TIMEOUT:.0f}s: {', '.join(states) or 'no pod'}"
    )


def _converge_kueue(
    state: State, binaries: dict[str, Path], api: client.ApiClient, say: Say, wanted: bool
) -> None:
    """Kueue's objects applied and its controller running, or its webhooks gone."""
    if not wanted:
        removed = kueue_installing.remove_webhooks(api)
        if removed:
            say(
                f"removed {removed} Kueue webhook configurations (the fleet does not ask for Kueue)"
            )
        return
    t0 = time.monotonic()
    applied = kueue_installing.install(
        binaries["kubectl"],
        state.kubeconfig,
        state.dir / "kueue",
        state.ports.kueue_webhook,
        state.dir / "pki" / "ca.crt",
    )
    say(f"kueue: {applied} objects applied, CRDs Established in {time.monotonic() - t0:.1f}s")
    _start_all(state, binaries, say, (KUEUE,))
    _wait_webhooks(api, say)


def _wait_webhooks(api: client.ApiClient, say: Say) -> None:
    """Return once every fail-closed webhook `up` applied answers: until then the API server
    refuses every request they match (a Deployment, a Job)."""
    import json

    from gridloop.local.addons import webhook_waiting

    admission = client.AdmissionregistrationV1Api(api)
    configs = []
    for lister in (
        admission.list_mutating_webhook_configuration,
        admission.list_validating_webhook_configuration,
    ):
        resp = lister(label_selector=kueue_manifests.LOCAL_LABEL, _preload_content=False)
        configs += json.loads(resp.data)["items"]
    hooks = webhook_waiting.blocking_webhooks(configs)
    t0 = time.monotonic()
    silent = webhook_waiting.wait_answering(hooks, START_TIMEOUT, webhook_waiting.post_hook)
    if silent:
        names = ", ".join(sorted({h.name for h in silent}))
        raise ClusterError(f"kueue: webhooks not answering after {START_TIMEOUT:.0f}s: {names}")
    say(f"kueue: {len(hooks)} webhooks answering in {time.monotonic() - t0:.1f}s")


def _converge_agent_sandbox(state: State, binaries: dict[str, Path], say: Say) -> None:
    """agent-sandbox's CRDs applied and its controller running."""
    t0 = time.monotonic()
    applied = sandbox_installing.install(
        binaries["kubectl"], state.kubeconfig, state.dir / AGENT_SANDBOX
    )
    say(f"agent-sandbox: {applied} CRDs applied, Established in {time.monotonic() - t0:.1f}s")
    _start_all(state, binaries, say, (AGENT_SANDBOX,))


def _wait_first_scrape(ports: Ports, say: Say) -> None:
    """Return once Prometheus has tried a first exporter, so `gridloop status` right
    after `up` shows GPU health rather than "no DCGM series"; say so after the timeout
    (`up` still succeeds: the scrapes may only be slow). Read as status and the health
    service read it (reading.read: evaluated a little before now)."""
    from gridloop.health import reading

    prom = reading.connect(f"http://{LOOPBACK}:{ports.prometheus}")
    query = {"up": f'up{{job="{prometheus_config.EXPORTER_JOB}"}}'}
    deadline = time.monotonic() + FIRST_SCRAPE_TIMEOUT
    while time.monotonic() < deadline:
        answers = reading.read(prom, query)
        if not isinstance(answers, str) and answers["up"]:
            return
        time.sleep(0.2)
    waited = f"{FIRST_SCRAPE_TIMEOUT:.0f}s"
    say(f"prometheus: no exporter scraped after {waited}; GPU health shows once one is")


def _every(seconds: float, say: Say) -> Callable[[int, int], None]:
    """A progress callback that reports nodes Ready at most every `seconds`."""
    last = [time.monotonic()]

    def report(ready: int, total: int) -> None:
        if ready < total and time.monotonic() - last[0] >= seconds:
            last[0] = time.monotonic()
            say(f"  … {ready}/{total} nodes Ready")

    return report


def _binaries(say: Say, gpu_health: bool, kueue: bool, nodes: bool) -> dict[str, Path]:
    """The binaries this cluster runs, building the missing ones (and only those: Helm 3
    and the scanner are for the tests, not for a cluster)."""
    names = (*ORDER, "kubectl", "helm", *(("prometheus",) if gpu_health else ()))
    names += (KUEUE,) if kueue else ()
    names += (AGENT_SANDBOX_BINARY,)
    if nodes:
        from gridloop.local.build.images import pushing

        names += (*container.BINARIES, "registry", object_store.BINARY, *pushing.BINARIES)
        names += SERVICES
    needed = {r.name for r in recipes.RECIPES if set(recipes.binary_names(r)) & set(names)}
    missing = [c for c in building.missing_components() if c in needed]
    if missing:
        say(f"building missing components: {', '.join(missing)}")
        building.build(missing, lambda p: say(f"  {p.binary} {p.version}: {p.status}"))
    found = {name: building.binary(name) for name in names}
    found["python"] = Path(sys.executable)
    return found


def _ensure_namespace(api: client.ApiClient, name: str) -> None:
    try:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    except ApiException as err:
        if err.status != 409:
            raise ClusterError(f"creating namespace {name}: {err.reason}") from err


def _prepare(
    state: State,
    fleet_path: Path,
    binaries: dict[str, Path],
    fleet: Fleet,
    policy: Path,
    prometheus_settings: Mapping[str, str] | None = None,
) -> None:
    d = state.dir
    for sub in ("pki", "etcd", "logs", "bin", "sim", "prometheus", "kueue"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    (d / "etcd").chmod(0o700)
    pki = certs.ensure_pki(d / "pki", container.advertise_address(fleet))
    certs.write_kubeconfigs(pki, state.server)
    shutil.copyfile(pki.kubeconfig("admin"), state.kubeconfig)
    state.kubeconfig.chmod(0o600)
    (d / "kwok.yaml").write_text(stages.kwok_config())
    (d / "audit-policy.yaml").write_text(yaml.safe_dump(flags.audit_policy(), sort_keys=False))
    if fleet_path.resolve() != (d / "fleet.yaml").resolve():
        shutil.copyfile(fleet_path, d / "fleet.yaml")
    for tool in ("kubectl", "helm"):
        link = d / "bin" / tool
        link.unlink(missing_ok=True)
        link.symlink_to(binaries[tool])
    planned = planned_nodes(fleet)
    nodes = [p.name for p in planned]
    pods = fleet.container_nodes is not None
    token = launching.kueue_token(state) if fleet.kueue.enabled or pods else None
    places = {p.name: (p.site, p.pool) for p in planned}
    scrape = prometheus_config.prometheus_config(
        state.ports,
        nodes,
        token,
        pki.path("ca.crt"),
        places=places,
        workloads=True,
        pods=pods,
        settings=prometheus_settings,
    )
    (d / "prometheus.yml").write_text(yaml.safe_dump(scrape, sort_keys=False))
    if fleet.kueue.enabled:
        serving = certs.ensure_loopback_server(
            pki, launching.kueue_certs(state), "kueue", (kueue_manifests.WEBHOOK_DNS_NAME,)
        )
        config = kueue_manifests.controller_config(
            state.ports, str(serving), source_for("kueue").kueue_frameworks
        )
        (d / "kueue" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (d / "health-policy.yaml").write_bytes(policy.read_bytes())


def _start_all(state: State, binaries: dict[str, Path], say: Say, names: tuple[str, ...]) -> None:
    for name in names:
        t0 = time.monotonic()
        log = state.dir / "logs" / f"{name}.log"
        proc = processes.start(
            name, launching.argv(name, state, binaries), log, state.dir, launching.env(name, state)
        )
        state.processes.append(proc)
        state.save()
        processes.wait_healthy(proc, partial(launching.healthy, name, state), START_TIMEOUT)
        say(f"  ✓ {name:<24} pid {proc.pid:<8} ready in {time.monotonic() - t0:.1f}s")


def _stop_processes(state: State) -> list[str]:
    stopped = []
    for proc in reversed(state.processes):
        if processes.alive(proc):
            processes.stop(proc, STOP_GRACE_S.get(proc.name, processes.STOP_GRACE_S))
            stopped.append(proc.name)
    state.processes = []
    if state.dir.exists():
        state.save()
    return stopped


def _stop_all(state: State) -> list[str]:
    """Stop every process, then sweep what the container nodes left."""
    stopped = _stop_processes(state)
    if state.dir.exists():
        _sweep(state, None)
    return stopped


def _sweep_stale_owner(state_dir: Path) -> None:
    """The container nodes of another local cluster that died without `down` left
    mounts, sockets and cgroups: gone, as its own `down` would have left it."""
    owner = container.stale_owner(state_dir)
    if owner is None:
        return
    try:
        stale = load(owner)
    except ClusterError:
        stale = None
    if stale is not None and stale.dir.exists():
        _sweep(stale, None)
    sweeping.remove_dead_sockets()


def _sweep(state: State, fleet: Fleet | None) -> sweeping.Leftovers:
    """Whatever the container nodes left (pods, mounts, network namespaces, the bridge):
    gone. The nodes are those of the fleet the cluster was started with."""
    if fleet is None:
        fleet_file = state.dir / "fleet.yaml"
        if not fleet_file.is_file():
            return sweeping.Leftovers()
        try:
            fleet = load_fleet(fleet_file)
        except FleetError:
            return sweeping.Leftovers()
    found = container.nodes(fleet, state.dir)
    if not found:
        return sweeping.Leftovers()
    left = sweeping.sweep([n.layout for n in found], state.dir, container.network(fleet))
    container.cleanup_cgroups(state.dir)
    return left


@dataclass(frozen=True)
class DownResult:
    stopped: list[str]
    busy: list[int]  # ports still listened on
    left: sweeping.Leftovers  # what the container nodes left (empty: nothing)


def down(state_dir: Path, purge: bool = False) -> DownResult:
    """Stop every recorded process, sweep what the container nodes left, and check that
    every port is free and nothing is left."""
    try:
        state = load(state_dir)
    except ClusterError:
        if not purge:
            raise
        state = None  # an unreadable record is exactly what --purge is for
    stopped = _stop_processes(state) if state else []
    busy: list[int] = []
    left = _sweep(state, None) if state and state.dir.exists() else sweeping.Leftovers()
    if state:
        deadline = time.monotonic() + 10
        busy = list(state.ports.used_by(state.components or list(ORDER)).values())
        while busy and time.monotonic() < deadline:
            busy = [p for p in busy if processes.listening(p)]
            if busy:
                time.sleep(0.1)
    if purge and state_dir.exists():
        shutil.rmtree(state_dir)
    return DownResult(stopped, busy, left)

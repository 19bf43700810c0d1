"""Start the container nodes: check, write each node's files, run its containerd and kubelet.

`check` runs before `up` starts anything, so a machine that cannot run container nodes
(not root, no cgroup v1 hierarchies, a pod subnet that overlaps the host's networks,
another cluster's nodes still running) changes nothing. `start` then brings each node
up in order: identities, files, cgroup, bridge address, containerd (in the node's
runtime cgroup), kubelet; and `wait_ready` returns once every node is Ready.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from gridloop.errors import ClusterError, UsageError
from gridloop.fleet import Fleet
from gridloop.fleet.host_networks import overlap_problem, read_host_networks
from gridloop.fleet.nodes import (
    CONTAINER_NODE_LABEL,
    PlannedContainerNode,
    planned_container_nodes,
)
from gridloop.local import certs, node_taints, processes
from gridloop.local.container import (
    addons,
    cgroups,
    configs,
    disk_room,
    hostnet,
    kube_chains,
    sweeping,
)
from gridloop.local.container.layout import (
    BRIDGE,
    CGROUP_PARENT,
    SOCKETS_ROOT,
    NodeLayout,
    cluster_cgroup,
)
from gridloop.local.ports import LOOPBACK, SERVICE_CIDR, Ports, node_process
from gridloop.local.processes import Proc

Say = Callable[[str], None]
START_TIMEOUT = 60.0
READY_TIMEOUT = 120.0
# what each container node runs, from the build cache (recipes.py)
BINARIES = (
    "containerd",
    "containerd-shim-runc-v2",
    "kubelet",
    "runc",
    "runsc",
    "containerd-shim-runsc-v1",
    "bridge",
)


@dataclass(frozen=True)
class ContainerNode:
    planned: PlannedContainerNode
    layout: NodeLayout

    @property
    def name(self) -> str:
        return self.planned.name


def nodes(fleet: Fleet, state_dir: Path) -> list[ContainerNode]:
    return [
        ContainerNode(p, NodeLayout.of(state_dir, p.name)) for p in planned_container_nodes(fleet)
    ]


def process_names(fleet: Fleet) -> list[str]:
    """In start order: each node's containerd, then its kubelet."""
    count = fleet.container_node_count
    return [node_process(kind, i) for i in range(count) for kind in ("containerd", "kubelet")]


def check(fleet: Fleet, source: str, state_dir: Path) -> None:
    """Everything container nodes need from this machine, before anything starts."""
    if not fleet.container_node_count:
        return
    assert fleet.container_nodes is not None
    if os.geteuid() != 0:
        raise UsageError(
            f"{source}: containerNodes: container nodes need root (mounts, cgroups, a bridge): "
            "run as root or remove the containerNodes block"
        )
    if not cgroups.hierarchies():
        raise UsageError(
            f"{source}: containerNodes: no cgroup v1 hierarchy under {cgroups.CGROUP_FS}: "
            "this machine cannot run the container nodes' kubelets"
        )
    for tool, package in (
        ("ip", "iproute2"),
        ("umount", "mount"),
        ("iptables", "iptables"),
        ("buildah", "buildah"),
    ):
        if shutil.which(tool) is None:
            raise UsageError(
                f"{source}: containerNodes: `{tool}` not found on PATH: container nodes need "
                f"it (apt-get install {package})"
            )
    subnet = fleet.container_nodes.pod_subnet
    problem = overlap_problem(source, subnet, read_host_networks())
    if problem:
        raise UsageError(problem)
    where = existing_ancestor(state_dir)
    usage = shutil.disk_usage(where)
    refused = disk_room.refusal(where, usage.free, usage.total)
    if refused:
        raise UsageError(f"{source}: containerNodes: {refused}")
    owner = _owner()
    if owner is not None and owner != state_dir.resolve() and _runs(owner):
        # one local cluster at a time: the nodes share the host's network namespace, and
        # two kube-proxies would rewrite each other's rules (a record whose cluster runs
        # nothing is stale: its bridge is taken over)
        raise UsageError(
            f"{source}: containerNodes: the container nodes of the local cluster in {owner} "
            f"run on this machine: stop it first (`gridloop local down --state-dir {owner}`)"
        )
    for node in nodes(fleet, state_dir):
        busy = cgroups.pids(node.layout.cgroup)
        if busy:
            raise UsageError(
                f"container node {node.name}: {len(busy)} processes of an earlier run of this "
                f"cluster are still in cgroup {node.layout.cgroup} and could not be stopped: "
                "stop them, then `gridloop local down`"
            )


def existing_ancestor(path: Path) -> Path:
    """`path`, or its nearest folder that exists (a state dir `up` has yet to make)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def disk_note(fleet: Fleet, state_dir: Path) -> str | None:
    """A line to say when this disk has no room for a served model's images."""
    if not fleet.container_node_count:
        return None
    where = existing_ancestor(state_dir)
    usage = shutil.disk_usage(where)
    return disk_room.shortfall_for_models(where, usage.free, usage.total)


def _settings(
    node: ContainerNode, fleet: Fleet, ports: Ports, binaries: dict[str, Path], pause: str
) -> configs.NodeSettings:
    assert fleet.container_nodes is not None
    return configs.NodeSettings(
        name=node.name,
        node_ip=node.planned.node_ip,
        pod_cidr=node.planned.pod_cidr,
        pod_subnet=fleet.container_nodes.pod_subnet,
        service_cidr=SERVICE_CIDR,
        healthz_port=ports.kubelet_healthz(node.planned.index),
        registry=f"{LOOPBACK}:{ports.registry}",
        pause_image=pause,
        labels=tuple(sorted(node.planned.labels.items())),
        binaries=binaries,
        cni_bin_dir=binaries["bridge"].parent,
        ca_file=node.layout.pki / "ca.crt",
        cluster_dns=(addons.dns_service_ip(SERVICE_CIDR),),
    )


def prepare(
    node: ContainerNode,
    fleet: Fleet,
    ports: Ports,
    pki: certs.Pki,
    server: str,
    binaries: dict[str, Path],
    pause: str,
) -> configs.NodeSettings:
    """Write the node's identities and configuration files (existing state is kept)."""
    layout, s = node.layout, _settings(node, fleet, ports, binaries, pause)
    for folder in (
        layout.root,
        layout.containerd_root,
        layout.containerd_state,
        layout.cni_conf_dir,
        layout.cni_data_dir,
        layout.runsc_root,
        layout.runsc_logs,
        layout.kubelet_root,
        layout.pod_logs,
        layout.sockets,
    ):
        folder.mkdir(parents=True, exist_ok=True)
    layout.sockets.chmod(0o700)
    certs.ensure_node(pki, layout.pki, node.name, s.node_ip)
    shutil.copyfile(pki.path("ca.crt"), layout.pki / "ca.crt")
    certs.write_node_kubeconfig(pki, layout.pki, server, layout.kubelet_kubeconfig)
    layout.containerd_config.write_text(configs.containerd_config(layout, s))
    layout.runsc_config.write_text(configs.runsc_config(layout, s))
    (layout.cni_conf_dir / "10-gridloop.conflist").write_text(configs.cni_config(layout, s))
    layout.kubelet_config.write_text(configs.kubelet_config(layout, s))
    for registry, text in configs.registry_hosts(s.registry).items():
        folder = layout.registry_hosts / registry
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "hosts.toml").write_text(text)
    return s


def start(
    fleet: Fleet,
    state_dir: Path,
    ports: Ports,
    pki: certs.Pki,
    server: str,
    binaries: dict[str, Path],
    pause: str,
    record: Callable[[Proc], None],
    healthz: Callable[[int], bool],
    say: Say,
) -> None:
    """Start every node's containerd and kubelet (prepare_network made the bridge);
    `record` is told of each process the moment it starts (so a failure later stops
    it), `healthz(port)` probes a kubelet."""
    found = nodes(fleet, state_dir)
    path = os.pathsep.join(
        [str(binaries[b].parent) for b in ("containerd", "runc", "runsc")] + [os.defpath]
    )
    for node in found:
        t0 = time.monotonic()
        s = prepare(node, fleet, ports, pki, server, binaries, pause)
        _start_node(node, s, state_dir / "logs", binaries, path, record, healthz)
        say(
            f"  ✓ container node {node.name:<12} {s.node_ip:<14} up in {time.monotonic() - t0:.1f}s"
        )


def _start_node(
    node: ContainerNode,
    s: configs.NodeSettings,
    log_dir: Path,
    binaries: dict[str, Path],
    path: str,
    record: Callable[[Proc], None],
    healthz: Callable[[int], bool],
) -> None:
    """containerd in the node's runtime cgroup (its shims inherit it), then the kubelet."""
    layout, index = node.layout, node.planned.index
    cgroups.ensure(layout.runtime_cgroup)
    name = node_process("containerd", index)
    proc = processes.start(
        name,
        configs.containerd_argv(binaries["containerd"], layout),
        log_dir / f"{name.replace('/', '-')}.log",
        layout.root,
        {"PATH": path},
        before_exec=lambda: cgroups.join(layout.runtime_cgroup, os.getpid()),
    )
    record(proc)
    processes.wait_healthy(
        proc, lambda: sweeping.socket_answers(layout.containerd_socket), START_TIMEOUT
    )
    name = node_process("kubelet", index)
    proc = processes.start(
        name,
        configs.kubelet_argv(binaries["kubelet"], layout, s),
        log_dir / f"{name.replace('/', '-')}.log",
        layout.root,
    )
    record(proc)
    processes.wait_healthy(proc, lambda: healthz(s.healthz_port), START_TIMEOUT)


def _subnet(fleet: Fleet) -> str:
    assert fleet.container_nodes is not None
    return fleet.container_nodes.pod_subnet


def _ready(node: Any, since: float) -> bool:
    """Ready, as reported by a kubelet started at `since` (a Node kept from an earlier
    `up` still says Ready until the controller-manager's grace period runs out)."""
    for cond in node.status.conditions or []:
        if cond.type == "Ready":
            heard = cond.last_heartbeat_time.timestamp() if cond.last_heartbeat_time else 0.0
            return bool(cond.status == "True" and heard >= since - 1)
    return False


def wait_ready(
    api: client.ApiClient, names: list[str], since: float, timeout: float = READY_TIMEOUT
) -> float:
    """Return the seconds it took until every container node is Ready (a heartbeat at or
    after `since`, wall-clock seconds)."""
    core, t0 = client.CoreV1Api(api), time.monotonic()
    pending = list(names)
    while pending:
        try:
            pending = [n for n in names if not _ready(core.read_node(n), since)]
        except ApiException as err:
            if err.status != 404:
                raise ClusterError(f"reading container nodes: {err.reason}") from err
        if pending and time.monotonic() - t0 > timeout:
            raise ClusterError(
                f"container nodes not Ready after {timeout:.0f}s: {', '.join(pending)} "
                "(see the kubelet logs in the state dir's logs/)"
            )
        if pending:
            time.sleep(0.5)
    return time.monotonic() - t0


def drop_old_taint(api: client.ApiClient, names: list[str]) -> list[str]:
    """Remove the NoSchedule taint gridloop registered container nodes with before
    2026-12-03 (key gridloop.io/container-node) and return the nodes that had it: the GPU
    nodes carry the taint now, and a pod that asks for no GPU must fit on these. A Node
    keeps the taints it registered with across kubelet restarts, so an older local cluster
    still has it."""
    core, untaint = client.CoreV1Api(api), node_taints.without_key(CONTAINER_NODE_LABEL)
    return [name for name in names if node_taints.change_taints(core, name, untaint)]


def retire(api: client.ApiClient, fleet: Fleet) -> list[str]:
    """Delete the container Nodes the fleet no longer has (it shrank, or has none now),
    with the Pods bound to them, and return their names. Call it only while no kubelet of
    an earlier run is up: their containers went with the node's cgroup when that run
    stopped, so nothing is left to wait for (on a real cluster, `kubectl delete node` and
    the pod garbage collector; here the pods go at once)."""
    core = client.CoreV1Api(api)
    planned = {p.name for p in planned_container_nodes(fleet)}
    found = core.list_node(label_selector=f"{CONTAINER_NODE_LABEL}=true").items
    gone = sorted(n.metadata.name for n in found if n.metadata.name not in planned)
    for name in gone:
        # the Node first, so the scheduler binds no replacement pod to it meanwhile
        _ignore_gone(core.delete_node, name)
        _delete_pods_on(core, name)
    return gone


def _delete_pods_on(core: client.CoreV1Api, node: str, settle: float = 10.0) -> None:
    """Force-delete the Pods bound to `node` until a list finds none: a binding the
    scheduler made just before the Node went can land after the first list."""
    deadline = time.monotonic() + settle
    while True:
        pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
        for pod in pods:
            _ignore_gone(
                core.delete_namespaced_pod,
                pod.metadata.name,
                pod.metadata.namespace,
                grace_period_seconds=0,
            )
        if not pods or time.monotonic() > deadline:
            return
        time.sleep(0.5)


def _ignore_gone(call: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    try:
        call(*args, **kwargs)
    except ApiException as err:
        if err.status != 404:
            raise ClusterError(f"removing a retired container node: {err.reason}") from err


def advertise_address(fleet: Fleet) -> str | None:
    """Where pods reach the API server: the first container node's address."""
    planned = planned_container_nodes(fleet)
    return planned[0].node_ip if planned else None


OWNER = SOCKETS_ROOT / "owner"  # the state directory whose container nodes run here


def _owner() -> Path | None:
    try:
        return Path(OWNER.read_text().strip())
    except OSError:
        return None


def _runs(state_dir: Path) -> bool:
    """Whether the local cluster in `state_dir` has a process still running."""
    from gridloop.local.state import load

    try:
        state = load(state_dir)
    except ClusterError:
        return False
    return bool(state and any(processes.alive(p) for p in state.processes))


def stale_owner(state_dir: Path) -> Path | None:
    """Another local cluster recorded as the one whose container nodes run here, that
    runs nothing now (it died without `down`: a reboot, a killed session): whatever it
    left (mounts, its socket folder, cgroups) is for the next `up` to sweep."""
    owner = _owner()
    if owner is None or owner == state_dir.resolve() or _runs(owner):
        return None
    return owner


def prepare_network(fleet: Fleet, ports: Ports, state_dir: Path) -> None:
    """The bridge with every node's address, and only loopback and the bridge let in to
    the API server, Prometheus and the object store (they listen on every address once
    pods must reach them); the cluster
    is recorded as the one whose container nodes run on this machine."""
    OWNER.parent.mkdir(parents=True, exist_ok=True)
    OWNER.write_text(f"{state_dir.resolve()}\n")
    kube_chains.record(sweeping.RULES_RECORD)  # before any kubelet adds its chains
    hostnet.ensure_bridge([n.node_ip for n in planned_container_nodes(fleet)], _subnet(fleet))
    hostnet.guard_host_ports([ports.apiserver, ports.prometheus, ports.object_store])


def network(fleet: Fleet) -> sweeping.Network:
    ips = tuple(p.node_ip for p in planned_container_nodes(fleet))
    return sweeping.Network(ips, fleet.container_nodes.pod_subnet if fleet.container_nodes else "")


def cleanup_cgroups(state_dir: Path) -> None:
    """Remove the cluster's cgroup, and the shared `gridloop` one once no cluster uses it."""
    for hierarchy in cgroups.hierarchies():
        for folder in (hierarchy / cluster_cgroup(state_dir).strip("/"), hierarchy / CGROUP_PARENT):
            if folder.is_dir() and not any(p.is_dir() for p in folder.iterdir()):
                with contextlib.suppress(OSError):
                    folder.rmdir()


__all__ = ["BRIDGE", "ContainerNode", "check", "nodes", "start", "wait_ready"]

"""`gridloop local up|down|stop-node|status|env|fleet`: flags and printing around cluster.py."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gridloop import kube, paths
from gridloop.errors import ClusterError, UsageError
from gridloop.fleet import FleetError, dump_fleet, generate_fleet
from gridloop.local import cluster, flags, processes
from gridloop.local.addons import object_store
from gridloop.local.kwok import nodes as simulated_nodes
from gridloop.local.ports import DEFAULT_BASE_PORT
from gridloop.local.state import load


def register(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    def with_state(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument(
            "--state-dir",
            type=Path,
            default=None,
            help=f"where the cluster keeps its state (default {paths.state_root()})",
        )
        return p

    p = with_state(verbs.add_parser("up", help="start the local cluster and its simulated fleet"))
    p.add_argument(
        "--fleet", type=Path, default=None, help="fleet file (default examples/fleets/default.yaml)"
    )
    p.add_argument(
        "--base-port",
        type=int,
        default=DEFAULT_BASE_PORT,
        help=f"first of the loopback ports used (default {DEFAULT_BASE_PORT}; "
        "the API server listens on base+43)",
    )
    p.add_argument(
        "--no-gpu-health",
        dest="gpu_health",
        action="store_false",
        help="skip the simulated dcgm-exporters, Prometheus and the health service",
    )
    p.add_argument(
        "--no-health-service",
        dest="health_service",
        action="store_false",
        help="start the exporters and Prometheus but not the health service",
    )
    p.add_argument(
        "--health-policy",
        type=Path,
        default=None,
        help="health policy for the health service (default policies/health.yaml)",
    )
    p.set_defaults(func=cmd_up)

    p = with_state(verbs.add_parser("down", help="stop every process the cluster started"))
    p.add_argument("--purge", action="store_true", help="also delete the state directory")
    p.set_defaults(func=cmd_down)

    p = with_state(
        verbs.add_parser(
            "stop-node",
            help="make a container node fail: its kubelet, then its containers "
            "(`local up` brings it back)",
        )
    )
    p.add_argument("name", metavar="NAME", help="a container node, e.g. system-001")
    p.add_argument(
        "--kubelet-only",
        action="store_true",
        help="stop the kubelet alone: the node's containers keep running",
    )
    p.set_defaults(func=cmd_stop_node)

    p = with_state(verbs.add_parser("status", help="what runs, where, and how many nodes"))
    p.add_argument("--output", "-o", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_status)

    p = with_state(
        verbs.add_parser(
            "env", help='shell exports for kubectl and helm: eval "$(gridloop local env)"'
        )
    )
    p.set_defaults(func=cmd_env)

    p = verbs.add_parser("fleet", help="generate a large fleet file")
    p.add_argument("--nodes", type=int, required=True, help="total number of GPU nodes")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--output", "-o", type=Path, default=None, help="write here (default stdout)")
    p.set_defaults(func=cmd_fleet)


def _state_dir(args: argparse.Namespace) -> Path:
    return Path(args.state_dir) if args.state_dir else paths.state_root()


def cmd_up(args: argparse.Namespace) -> int:
    fleet = args.fleet or cluster.default_fleet_file()
    if not fleet.is_file():
        raise UsageError(f"--fleet: no such file: {fleet}")
    state_dir = _state_dir(args)
    t0 = time.monotonic()
    res = cluster.up(
        state_dir,
        fleet,
        args.base_port,
        say=lambda m: print(m, flush=True),
        gpu_health=args.gpu_health,
        health_policy=args.health_policy,
        health_service=args.health_service,
    )
    if res.already_running:
        print(
            f"already running: {res.state.server} ({len(res.state.processes)} processes, "
            f"fleet {res.state.fleet_name}, state {state_dir})"
        )
        if said := cluster.push_new_images(state_dir):  # images built since it started
            print(said)
        return 0
    print(
        f"cluster up in {time.monotonic() - t0:.1f}s: control plane {res.started_seconds:.1f}s, "
        f"{res.state.nodes} nodes Ready {res.ready_seconds:.1f}s later"
    )
    print(f'use it: eval "$(gridloop local env{_state_flag(args)})"; kubectl get nodes')
    return 0


def _state_flag(args: argparse.Namespace) -> str:
    return f" --state-dir {shlex.quote(str(args.state_dir))}" if args.state_dir else ""


def cmd_down(args: argparse.Namespace) -> int:
    state_dir = _state_dir(args)
    result = cluster.down(state_dir, purge=args.purge)
    stopped = result.stopped
    print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
    if args.purge:
        print(f"removed {state_dir}")
    if result.busy:
        raise ClusterError(f"ports still in use after down: {', '.join(map(str, result.busy))}")
    if result.left:
        raise ClusterError(f"the container nodes left behind: {result.left.describe()}")
    return 0


def cmd_stop_node(args: argparse.Namespace) -> int:
    from gridloop.local.container.stopping import stop_node

    done = stop_node(_state_dir(args), args.name, kubelet_only=args.kubelet_only)
    kubelet = "kubelet stopped" if done.kubelet else "kubelet was not running"
    rest = (
        "its containers keep running"
        if args.kubelet_only
        else f"{done.killed} processes of containerd, its shims and its pods killed"
    )
    print(f"{args.name}: {kubelet}; {rest}")
    print(
        "the Node stays Ready in the API until the controller-manager's grace period "
        f"({flags.NODE_MONITOR_GRACE}) runs out; `gridloop local up{_state_flag(args)}` "
        "brings it back"
    )
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    state_dir = _state_dir(args)
    state = load(state_dir)
    procs = (
        []
        if state is None
        else [
            {"name": p.name, "pid": p.pid, "running": processes.alive(p), "log": p.log}
            for p in state.processes
        ]
    )
    running = bool(procs) and all(p["running"] for p in procs)
    ready = total = None
    rows: list[simulated_nodes.PoolRow] = []
    real: list[dict[str, object]] = []
    if running and state is not None:
        try:
            rows = simulated_nodes.fleet_rows(kube.api_client(state.kubeconfig))
            ready, total = sum(r.ready for r in rows), sum(r.nodes for r in rows)
            real = _container_nodes(kube.api_client(state.kubeconfig))
        except Exception as err:  # status must report, not crash, on an unreachable API
            print(f"warning: API server unreachable: {err}", file=sys.stderr)
    info = {
        "state_dir": str(state_dir),
        "running": running,
        "server": state.server if state else None,
        "kubeconfig": str(state.kubeconfig) if state else None,
        "fleet": state.fleet_name if state else None,
        "nodes": {"ready": ready, "total": total, "expected": state.nodes if state else 0},
        "ports": state.ports.by_process() if state else {},
        "processes": procs,
        "pools": [asdict(r) for r in rows],
        "container_nodes": real,
    }
    if args.output == "json":
        print(json.dumps(info, indent=2))
        return 0 if running else 3
    print(f"state:      {state_dir}")
    if state is None:
        print("cluster:    not created (run `gridloop local up`)")
        return 3
    print(f"cluster:    {'running' if running else 'stopped'}  {state.server}")
    print(f"kubeconfig: {state.kubeconfig}")
    print(
        f"fleet:      {state.fleet_name}, nodes Ready {ready}/{total} (fleet has {state.nodes})"
        if running
        else f"fleet:      {state.fleet_name}"
    )
    for node in real:
        mark = "Ready" if node["ready"] else "NotReady"
        print(f"container:  {node['name']} {mark} {node['address']} ({node['runtime']})")
    ports = {v: k for k, v in state.ports.by_process().items()}
    for p in procs:
        port = next((n for n, owner in ports.items() if owner.split(" (")[0] == p["name"]), "")
        mark = "running" if p["running"] else "dead"
        where = f"127.0.0.1:{port}" if port else "(unix socket)"
        print(f"  {p['name']:<24} pid {p['pid']:<8} {mark:<8} {where:<15}  {p['log']}")
    if rows:
        _print_pools(rows)
    return 0 if running else 3


def _container_nodes(api: Any) -> list[dict[str, object]]:
    """The real nodes (container nodes): name, Ready, address, runtime."""
    from kubernetes import client as k8s

    from gridloop.fleet import CONTAINER_NODE_LABEL

    out: list[dict[str, object]] = []
    for node in k8s.CoreV1Api(api).list_node(label_selector=CONTAINER_NODE_LABEL).items:
        ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
        internal = [a.address for a in node.status.addresses or [] if a.type == "InternalIP"]
        out.append(
            {
                "name": node.metadata.name,
                "ready": ready,
                "address": internal[0] if internal else "",
                "runtime": node.status.node_info.container_runtime_version,
            }
        )
    return out


def _print_pools(rows: list[simulated_nodes.PoolRow]) -> None:
    head = ("SITE", "TYPE", "REGION", "POOL", "GPU", "READY", "GPUS")
    table = [head] + [
        (r.site, r.site_type, r.region, r.pool, r.product, f"{r.ready}/{r.nodes}", str(r.gpus))
        for r in rows
    ]
    ready, nodes = sum(r.ready for r in rows), sum(r.nodes for r in rows)
    table.append(("", "", "", "", "total", f"{ready}/{nodes}", str(sum(r.gpus for r in rows))))
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    print()
    for row in table:
        print("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def cmd_env(args: argparse.Namespace) -> int:
    state_dir = _state_dir(args)
    state = load(state_dir)
    if state is None:
        raise UsageError(f"no local cluster in {state_dir}: run `gridloop local up` first")
    print(f"export KUBECONFIG={shlex.quote(str(state.kubeconfig))}")
    print(f'export PATH={shlex.quote(str(state_dir / "bin"))}:"$PATH"')
    if object_store.PROCESS in state.components:
        # S3 clients on the host (`gridloop models push`, aws, boto3) reach the store
        for key, value in object_store.shell_env(state_dir, state.ports.object_store).items():
            print(f"export {key}={shlex.quote(value)}")
    return 0


def cmd_fleet(args: argparse.Namespace) -> int:
    try:
        text = dump_fleet(generate_fleet(args.nodes, gpus_per_node=args.gpus_per_node))
    except FleetError as err:
        raise UsageError(str(err)) from err
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0

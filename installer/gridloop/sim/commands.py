"""`gridloop sim inject|clear|list|serve`: flags and printing around the faults file.

The faults file lives in the local cluster's state directory (``<state>/sim/faults.json``)
next to the fleet it refers to (``<state>/fleet.yaml``); the simulated exporters re-read it
on change, so a fault shows up on the next scrape. Numbers and `serve --label-shape` are
parsed here rather than by argparse so that a bad value is the same one-line
``error: --gpu x: ...`` as every other refusal. Decisions (what is valid, what a fault
does, which labels a series gets) live in ``injections.py``, ``faults.py`` and
``label_shapes.py``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from gridloop import paths
from gridloop.errors import UsageError
from gridloop.fleet import FleetError, iter_planned_nodes, load_fleet
from gridloop.sim.faults import Fault
from gridloop.sim.injections import Injection, check_target, target_name, validate
from gridloop.sim.label_shapes import FLAG as LABEL_SHAPE_FLAG
from gridloop.sim.label_shapes import parse_shape, shapes_help
from gridloop.sim.storing import FAULTS_FILE, FLEET_FILE, read_faults, update_faults

_SWITCHES = (
    ("--ecc-dbe", "add one double-bit ECC error (volatile and aggregate totals)"),
    ("--row-remap-failure", "row remapping failed"),
    ("--row-remap-pending", "a row remap is pending"),
    ("--retired-pending", "pages are pending retirement"),
    ("--vanish", "the GPU's series disappear, as when it falls off the bus"),
    ("--exporter-down", "the node's exporter answers 503 (node only, no --gpu)"),
    ("--thermal-violation", "thermal throttling: the violation counter grows 1 s per s"),
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sim = sub.add_parser(
        "sim",
        help="inject GPU faults into the simulated dcgm-exporters",
        description="Inject, clear and list the GPU faults the simulated dcgm-exporters "
        "report for the local cluster's fleet.",
    )
    verbs = sim.add_subparsers(dest="verb", metavar="VERB", required=True)

    def verb(name: str, help_: str) -> argparse.ArgumentParser:
        p = verbs.add_parser(name, help=help_, description=help_)
        p.add_argument(
            "--state-dir",
            type=Path,
            default=None,
            help=f"the local cluster's state directory (default {paths.state_root()})",
        )
        return p

    p = verb("inject", "add faults to one GPU, or to every GPU of a node")
    p.add_argument("--node", help="the node (required)")
    p.add_argument("--gpu", metavar="N", help="the GPU index (default: every GPU of the node)")
    p.add_argument("--xid", metavar="CODE", help="report XID CODE (1-999) as the last XID")
    for flag, text in _SWITCHES:
        p.add_argument(flag, action="store_true", help=text)
    p.add_argument("--temp", metavar="C", help="override the GPU temperature (degrees C)")
    p.add_argument("--nvlink-errors", metavar="RATE", help="NVLink CRC errors per second")
    p.add_argument("--pcie-replays", metavar="RATE", help="PCIe replays per second")
    p.set_defaults(func=cmd_inject)

    p = verb("clear", "remove faults: all, one node's, or one GPU's own")
    p.add_argument("--node", help="only this node")
    p.add_argument("--gpu", metavar="N", help="only this GPU's own faults (needs --node)")
    p.set_defaults(func=cmd_clear)

    p = verb("list", "show the faults in force")
    p.add_argument("--output", "-o", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_list)

    p = verb("serve", "run the simulated dcgm-exporters in the foreground")
    p.add_argument("--port", metavar="PORT", help="port on 127.0.0.1 (required)")
    p.add_argument(LABEL_SHAPE_FLAG, metavar="SHAPE", help=shapes_help())
    p.set_defaults(func=cmd_serve)


def cmd_inject(args: argparse.Namespace) -> int:
    if not args.node:
        raise UsageError("--node: required; name the node to inject into")
    injection = Injection(
        node=args.node,
        gpu=_int_flag("--gpu", args.gpu),
        xid=_int_flag("--xid", args.xid),
        ecc_dbe=args.ecc_dbe,
        row_remap_failure=args.row_remap_failure,
        row_remap_pending=args.row_remap_pending,
        retired_pending=args.retired_pending,
        temp=_float_flag("--temp", args.temp),
        vanish=args.vanish,
        exporter_down=args.exporter_down,
        thermal_violation=args.thermal_violation,
        nvlink_errors_per_s=_float_flag("--nvlink-errors", args.nvlink_errors),
        pcie_replays_per_s=_float_flag("--pcie-replays", args.pcie_replays),
    )
    state = _state_dir(args)
    gpus = _gpus_by_node(state)
    validate(injection, gpus)
    now = time.time()
    update_faults(state / FAULTS_FILE, lambda faults: faults.inject(gpus, injection, now))
    for change in injection.changes():
        print(f"injected {change} on {injection.target()}")
    return 0


def cmd_clear(args: argparse.Namespace) -> int:
    gpu = _int_flag("--gpu", args.gpu)
    node: str | None = args.node
    state = _state_dir(args)
    path = state / FAULTS_FILE
    if not read_faults(path).matching(node, gpu) and node is not None:
        check_target(_gpus_by_node(state), node, gpu)  # a typo should not pass as "nothing"
    before, _ = update_faults(path, lambda faults: faults.clear(node, gpu))
    cleared = before.matching(node, gpu)
    for fault in cleared:
        print(f"cleared {fault.describe() or 'counters'} on {target_name(fault.node, fault.gpu)}")
    if not cleared:
        print(f"no faults on {target_name(node, gpu) if node else 'the fleet'}")
    if node is not None and gpu is not None and (node, None) in before:
        print(f"node-wide faults on {node} stay: clear them with --node {node} alone")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    faults = [f for f in read_faults(_state_dir(args) / FAULTS_FILE).values() if f.summary()]
    if args.output == "json":
        rows = [{"node": f.node, "gpu": f.gpu, "faults": f.summary()} for f in faults]
        print(json.dumps(rows, indent=2))
    elif not faults:
        print("no faults injected")
    else:
        print(_table(faults))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from gridloop.sim import server  # the HTTP machinery only when serving

    port = _int_flag("--port", args.port)
    if port is None:
        raise UsageError("--port: required; the port on 127.0.0.1 to serve on")
    shape = parse_shape(args.label_shape)
    state = _state_dir(args)
    _gpus_by_node(state)  # refuse early, with the state-dir hint, when there is no fleet
    server.serve(state / FLEET_FILE, state / FAULTS_FILE, port, shape=shape)
    return 0


def _table(faults: list[Fault]) -> str:
    rows = [("NODE", "GPU", "FAULTS")]
    rows += [(f.node, "all" if f.gpu is None else str(f.gpu), f.describe()) for f in faults]
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{node:<{width}}  {gpu:<4} {text}".rstrip() for node, gpu, text in rows)


def _state_dir(args: argparse.Namespace) -> Path:
    return Path(args.state_dir) if args.state_dir else paths.state_root()


def _gpus_by_node(state: Path) -> dict[str, int]:
    path = state / FLEET_FILE
    if not path.exists():
        raise UsageError(f"--state-dir {state}: no {FLEET_FILE} there; run `gridloop local up`")
    try:
        return {node.name: node.gpus for node in iter_planned_nodes(load_fleet(path))}
    except FleetError as err:
        raise UsageError(str(err)) from err


def _int_flag(flag: str, raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise UsageError(f"{flag} {raw}: must be a whole number") from None


def _float_flag(flag: str, raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"{flag} {raw}: must be a number") from None
    if not math.isfinite(value):
        raise UsageError(f"{flag} {raw}: must be a finite number")
    return value

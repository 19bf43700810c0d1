"""`gridloop hooks delete-queues`: what the chart's pre-delete hook runs (queue_removal.py).

Exit 0 once every named queue and flavor is gone (or was never there), 1 when some are
still there at --timeout (Helm then stops the uninstall: `kubectl get clusterqueues`
shows why; `helm uninstall --no-hooks` skips it).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kubernetes.client.rest import ApiException

from gridloop.errors import ClusterError, UsageError
from gridloop.hooks import queue_removal
from gridloop.hooks.queue_removal import Queue


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    hooks = sub.add_parser(
        "hooks",
        help="what the chart's Helm hooks run in gridloop's image",
        description="What the chart's own Helm hooks run, from inside the cluster.",
    )
    verbs = hooks.add_subparsers(dest="verb", metavar="VERB", required=True)
    p = verbs.add_parser(
        "delete-queues",
        help="delete the release's Kueue queues and flavors while Kueue runs (pre-delete)",
    )
    p.add_argument("--localqueue", action="append", default=[], metavar="NS/NAME")
    p.add_argument("--clusterqueue", action="append", default=[], metavar="NAME")
    p.add_argument("--cohort", action="append", default=[], metavar="NAME")
    p.add_argument("--resourceflavor", action="append", default=[], metavar="NAME")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds (default 120)")
    p.add_argument("--kubeconfig", type=Path, help="default: the pod's ServiceAccount")
    p.set_defaults(func=cmd_delete_queues)


def cmd_delete_queues(args: argparse.Namespace) -> int:
    from gridloop.health.commands import api_client

    try:
        queues = [queue_removal.parse_local_queue(q) for q in args.localqueue]
    except ValueError as err:
        raise UsageError(str(err)) from err
    queues += [Queue("clusterqueues", n) for n in args.clusterqueue]
    queues += [Queue("cohorts", n) for n in args.cohort]
    queues += [Queue("resourceflavors", n) for n in args.resourceflavor]
    if args.timeout <= 0:
        raise UsageError(f"--timeout {args.timeout}: must be more than 0 seconds")
    try:
        left = queue_removal.remove(
            api_client(args.kubeconfig), queues, lambda m: print(m, flush=True), args.timeout
        )
    except ApiException as err:
        raise ClusterError(f"deleting the release's queues: {err.status} {err.reason}") from err
    if left:
        print(f"still there after {args.timeout:.0f}s: {', '.join(map(str, left))}")
        return 1
    print(f"ok: {len(queues)} queues and flavors of the release are gone")
    return 0

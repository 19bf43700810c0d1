"""`gridloop sandboxes issue-tokens`: the token issuer the chart runs beside the router."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from gridloop import kube
from gridloop.errors import UsageError
from gridloop.sandboxes import issuer


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sandboxes = sub.add_parser("sandboxes", help="agent sandboxes' router tokens")
    verbs = sandboxes.add_subparsers(dest="verb", metavar="VERB", required=True)
    p = verbs.add_parser(
        "issue-tokens",
        help="mint a router token for every bound SandboxClaim (what the chart runs)",
    )
    p.add_argument("--kubeconfig", type=Path, default=None, help="default: in-cluster")
    p.add_argument("--namespace", required=True, help="the router's namespace (the key's)")
    p.add_argument("--key-secret", required=True, help="the router's key Secret there")
    p.add_argument("--deployment", required=True, help="this issuer's Deployment (owns the key)")
    p.add_argument(
        "--sandbox-namespaces",
        action="append",
        required=True,
        help="namespaces whose claims get tokens (repeat, or comma-separated)",
    )
    p.add_argument("--ttl-seconds", type=int, default=24 * 3600, help="a token's life")
    p.set_defaults(func=cmd_issue_tokens)


def cmd_issue_tokens(args: argparse.Namespace) -> int:
    if args.ttl_seconds < 60:
        raise UsageError(f"--ttl-seconds: at least 60, got {args.ttl_seconds}")
    namespaces = issuer.namespaces(args.sandbox_namespaces)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s"
    )
    settings = issuer.Settings(
        namespace=args.namespace,
        key_secret=args.key_secret,
        deployment=args.deployment,
        sandbox_namespaces=namespaces,
        ttl_s=args.ttl_seconds,
        resync_s=min(60.0, args.ttl_seconds / 4),
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    issuer.run(kube.api_client(args.kubeconfig), settings, stop)
    return 0

"""`gridloop status`: the live UI, or `--once` for scripts and CI."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gridloop.chart import locating
from gridloop.errors import UsageError
from gridloop.status import collecting, views

DEFAULT_INTERVAL = 2.0  # seconds between refreshes, as k9s's default


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "status",
        help="the fleet, GPU health, queues, inference and sandboxes: a live terminal UI",
        description="A k9s-like live view of the GPU platform. Keys: `:` view, `/` filter, "
        "`s` sort, Enter details, `?` help, `q` quit. Read-only unless --allow-actions. "
        "With --once, print the same data (a table, or JSON with --output json) and exit.",
    )
    p.add_argument(
        "--kubeconfig",
        type=Path,
        help="the cluster (default: $KUBECONFIG, else the local cluster's if it was "
        "started, else ~/.kube/config)",
    )
    p.add_argument("--context", help="the kubeconfig context (default: its current one)")
    p.add_argument(
        "--prometheus-url",
        metavar="URL",
        help="where DCGM metrics are (default: the local cluster's Prometheus when the "
        "kubeconfig is the local cluster's; without one, GPU counts come from the API only)",
    )
    p.add_argument(
        "--health-namespace",
        default="gridloop-system",
        help="where the health service keeps its status ConfigMap (default gridloop-system)",
    )
    p.add_argument(
        "--exporter-job",
        default="dcgm-exporter",
        help="the DCGM exporter's Prometheus job (default dcgm-exporter)",
    )
    p.add_argument(
        "--view",
        choices=views.VIEWS,
        default="fleet",
        help="the view to open (default fleet)",
    )
    p.add_argument("--filter", default="", metavar="TEXT", help="start with this `/` filter")
    p.add_argument("--once", action="store_true", help="print once and exit (no UI)")
    p.add_argument(
        "--screenshot",
        type=Path,
        metavar="FILE.svg",
        help="draw the UI once, headless, save it as SVG and exit (for docs and bug reports)",
    )
    p.add_argument(
        "--output",
        "-o",
        choices=("table", "json"),
        help="with --once: table (default) or json; --output alone implies --once",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="with --once: every view (default: just --view)",
    )
    p.add_argument(
        "--interval",
        type=float,
        default=DEFAULT_INTERVAL,
        help=f"seconds between refreshes (default {DEFAULT_INTERVAL:g})",
    )
    p.add_argument(
        "--allow-actions",
        action="store_true",
        help="let the UI cordon/uncordon nodes and reset the health breaker (asks first)",
    )
    p.set_defaults(func=cmd_status)


def _source(args: argparse.Namespace) -> collecting.Source:
    kubeconfig = locating.kubeconfig(args.kubeconfig)
    url = args.prometheus_url
    if url is not None and not url.startswith(("http://", "https://")):
        raise UsageError(f"--prometheus-url {url}: not an http:// or https:// URL")
    if url is None:
        url = collecting.local_prometheus(kubeconfig)
    return collecting.Source(
        kubeconfig=kubeconfig,
        context=args.context,
        prometheus_url=url,
        health_namespace=args.health_namespace,
        exporter_job=args.exporter_job,
    )


def cmd_status(args: argparse.Namespace) -> int:
    if not 0.2 <= args.interval <= 3600:
        raise UsageError(f"--interval {args.interval:g}: between 0.2 and 3600 seconds")
    once = args.once or args.output is not None
    if args.allow_actions and once:
        raise UsageError("--allow-actions: only for the live UI, not with --once/--output")
    if args.screenshot is not None and args.screenshot.suffix != ".svg":
        raise UsageError(f"--screenshot {args.screenshot}: must end in .svg")
    if args.screenshot is not None and not args.screenshot.parent.is_dir():
        raise UsageError(f"--screenshot {args.screenshot}: no such folder")
    source = _source(args)
    collector = collecting.Collector(source).start(interval=args.interval, quick=not once)
    try:
        if once:
            from gridloop.status import printing

            snapshot = collector.snapshot()
            chosen = list(views.VIEWS) if args.all else [args.view]
            out = printing.as_json if args.output == "json" else printing.as_table
            sys.stdout.write(out(snapshot, chosen, args.filter))
            # the data was printed either way; a stale source is an error for scripts
            return 3 if snapshot.problems else 0
        from gridloop.status.app import StatusApp, screenshot

        if args.screenshot is not None:
            app = StatusApp(collector.snapshot, view=args.view, live=False, filter_text=args.filter)
            screenshot(app, args.screenshot)
            print(f"wrote {args.screenshot}", file=sys.stderr)
            return 0
        if not sys.stdout.isatty():
            raise UsageError("stdout is not a terminal: use --once (and --output json)")
        from gridloop.status.acting import Actions

        act = Actions(collector.api, source.health_namespace) if args.allow_actions else None
        app = StatusApp(
            collector.snapshot,
            view=args.view,
            interval=args.interval,
            act=act,
            filter_text=args.filter,
        )
        app.run()
        return 0
    finally:
        collector.stop()

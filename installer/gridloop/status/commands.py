"""`gridloop status`: the live UI, or `--once` for scripts and CI."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from gridloop import names
from gridloop.chart import locating
from gridloop.errors import GridloopError, UsageError
from gridloop.health import prometheus_access
from gridloop.status import views
from gridloop.status.snapshot import Snapshot
from gridloop.status.sources import Source, local_prometheus

if TYPE_CHECKING:
    from gridloop.status.collecting import Collector

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
    prometheus_access.add_flags(p)
    p.add_argument(
        "--health-namespace",
        default=names.DEFAULT_NAMESPACE,
        help="where the health service keeps its status ConfigMap "
        f"(default {names.DEFAULT_NAMESPACE})",
    )
    p.add_argument(
        "--exporter-job",
        default=names.EXPORTER_JOB,
        help=f"the DCGM exporter's Prometheus job (default {names.EXPORTER_JOB})",
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


def _source(args: argparse.Namespace) -> Source:
    kubeconfig = locating.kubeconfig(args.kubeconfig)
    url = args.prometheus_url
    if url is not None and not url.startswith(("http://", "https://")):
        raise UsageError(f"--prometheus-url {url}: not an http:// or https:// URL")
    access = prometheus_access.from_args(args, url)
    if url is None:
        # they describe the Prometheus a URL names, not the local cluster's plain one
        given = [(flag, path) for flag, path in access.files().items() if path is not None]
        if given:
            flag, path = given[0]
            named = "for the Prometheus --prometheus-url names; none given"
            raise UsageError(f"{flag} {path}: {named}")
        url = local_prometheus(kubeconfig)
    return Source(
        kubeconfig=kubeconfig,
        context=args.context,
        prometheus_url=url,
        health_namespace=args.health_namespace,
        exporter_job=args.exporter_job,
        prometheus_access=access,
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
    if once or args.screenshot is not None:
        return _headless(args, source, once)
    not_terminal = _not_terminal(sys.stdout, sys.__stderr__)
    if not_terminal:
        raise UsageError(f"{not_terminal} is not a terminal: use --once (and --output json)")
    from gridloop.status.app import StatusApp

    later = Later(source, args.interval)
    app = StatusApp(
        later.snapshot,
        view=args.view,
        interval=args.interval,
        act=later.act if args.allow_actions else None,
        filter_text=args.filter,
    )
    later.on_error = lambda: app.call_from_thread(app.exit)
    try:
        app.run()
    finally:
        later.stop()
    if later.error is not None:
        raise later.error
    return 0


def _not_terminal(stdout: TextIO | None, stderr: TextIO | None) -> str:
    """Which of stdout and stderr is not a terminal ("" when both are). The live view
    needs both: Textual draws on stderr (`gridloop status 2>/dev/null` would show
    nothing), and output sent to a file or a pipe wants --once."""
    for name, stream in (("stdout", stdout), ("stderr", stderr)):
        if stream is None or not stream.isatty():
            return name
    return ""


def _headless(args: argparse.Namespace, source: Source, once: bool) -> int:
    """`--once` (print the data) or `--screenshot` (draw the UI once, off screen)."""
    from gridloop.status import collecting

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

        app = StatusApp(collector.snapshot, view=args.view, live=False, filter_text=args.filter)
        screenshot(app, args.screenshot)
        print(f"wrote {args.screenshot}", file=sys.stderr)
        return 0
    finally:
        collector.stop()


class Later:
    """The live UI's collector, started on its first use: in the UI's poll thread, once
    the first frame is on screen. The Kubernetes client's import and set-up then come
    after the first paint, not before it. A setup error (an unknown --context) ends the
    UI, and the command reports it as it would have before the UI started."""

    def __init__(self, source: Source, interval: float) -> None:
        self.source, self.interval = source, interval
        self.collector: Collector | None = None
        self.error: GridloopError | None = None
        self.on_error: Callable[[], None] = lambda: None
        self._lock = threading.Lock()

    def _started(self) -> Collector | None:
        with self._lock:
            if self.collector is None and self.error is None:
                from gridloop.status import collecting

                try:
                    self.collector = collecting.Collector(self.source).start(
                        interval=self.interval, quick=True
                    )
                except GridloopError as err:
                    self.error = err
                    self.on_error()
            return self.collector

    def snapshot(self) -> Snapshot:
        collector = self._started()
        if collector is None:
            return Snapshot(taken_at=0.0, problems=(("api", str(self.error)),))
        return collector.snapshot()

    def act(self, action: str, node: str) -> str:
        from gridloop.status.acting import Actions

        collector = self._started()
        if collector is None:
            return f"not connected: {self.error}"
        return Actions(collector.api, self.source.health_namespace)(action, node)

    def stop(self) -> None:
        with self._lock:
            if self.collector is not None:
                self.collector.stop()

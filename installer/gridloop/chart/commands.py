"""`gridloop render` and `gridloop install`: flags and printing around rendering/installing."""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

from gridloop.bundle import charting
from gridloop.chart import installing, locating, records, rendering
from gridloop.errors import UsageError

DEFAULT_NAMESPACE = "gridloop-system"
DEFAULT_RELEASE = "gridloop"
DEFAULT_TIMEOUT = "5m"
_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_RELEASE = 53  # Helm's limit: names derived from it need room for suffixes


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "render",
        help="print every manifest the chart would install, CRDs included (applies nothing)",
        description="Render the chart with helm (`helm template --include-crds`) and print "
        "it. Bad values fail with one line naming the key, as `gridloop install` would.",
    )
    _chart_flags(p)
    p.set_defaults(func=cmd_render)

    p = sub.add_parser(
        "install",
        help="install or upgrade gridloop on a cluster (render, CRDs, helm upgrade --install)",
        description="Render first (bad values fail before anything is applied), then apply "
        "the chart's crds/ server-side and run `helm upgrade --install --skip-crds`.",
    )
    _chart_flags(p)
    p.add_argument(
        "--kubeconfig",
        type=Path,
        help="the cluster (default: $KUBECONFIG, else the local cluster's if it was "
        "started, else ~/.kube/config)",
    )
    p.add_argument(
        "--wait", action="store_true", help="wait until every workload is ready (up to --timeout)"
    )
    p.add_argument(
        "--timeout",
        default=DEFAULT_TIMEOUT,
        help=f"how long to wait, as 90s, 5m, 1h (default {DEFAULT_TIMEOUT})",
    )
    p.set_defaults(func=cmd_install)


def _chart_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", metavar="P", help="values from the chart's profiles/P.yaml")
    p.add_argument(
        "-f",
        "--values",
        dest="files",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="a values file (repeatable; later ones win)",
    )
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="K=V",
        help="a value, in helm's --set syntax (repeatable; wins over files)",
    )
    p.add_argument(
        "--chart",
        type=Path,
        metavar="DIR",
        help=f"the chart (default: ./{locating.DEFAULT_BUNDLE} if `gridloop bundle` wrote "
        "it there, else the repository's charts/gridloop)",
    )
    p.add_argument(
        "--namespace",
        default=DEFAULT_NAMESPACE,
        help=f"the release namespace (default {DEFAULT_NAMESPACE})",
    )
    p.add_argument(
        "--release", default=DEFAULT_RELEASE, help=f"the release name (default {DEFAULT_RELEASE})"
    )


def _request(args: argparse.Namespace) -> rendering.Request:
    if not _DNS_LABEL.match(args.namespace) or len(args.namespace) > 63:
        raise UsageError(f"--namespace {args.namespace}: not a namespace name (a DNS label)")
    if not _DNS_LABEL.match(args.release) or len(args.release) > MAX_RELEASE:
        raise UsageError(
            f"--release {args.release}: lowercase letters, digits and '-', "
            f"at most {MAX_RELEASE} characters"
        )
    chart = locating.chart_folder(args.chart)
    return rendering.Request(
        chart=chart,
        profile=locating.profile_file(chart, args.profile),
        files=tuple(args.files),
        sets=tuple(args.sets),
        namespace=args.namespace,
        release=args.release,
    )


def cmd_render(args: argparse.Namespace) -> int:
    request = _request(args)
    rendered = rendering.render(request)
    sys.stdout.write(rendered.text)
    print(
        f"rendered {rendered.objects} objects and {rendered.crds} CRDs from {request.chart}",
        file=sys.stderr,
    )
    return 0


def cmd_install(args: argparse.Namespace) -> int:
    start = time.monotonic()
    if not _DURATION.match(args.timeout):
        raise UsageError(f"--timeout {args.timeout}: not a duration (like 90s, 5m or 1h)")
    request = _request(args)
    target = installing.Target(
        kubeconfig=locating.kubeconfig(args.kubeconfig), wait=args.wait, timeout=args.timeout
    )
    chart = charting.read(request.chart)
    profile = f", profile {args.profile}" if args.profile else ""
    print(
        f"installing {request.release} into {request.namespace} from {request.chart} "
        f"(chart {chart.version}{profile}; kubeconfig {target.kubeconfig})",
        flush=True,
    )

    rendered = rendering.render(request)
    size = records.estimate(request.chart, rendered.manifest)
    if size > records.SECRET_LIMIT:
        raise UsageError(
            f"the release would not fit: Helm keeps the chart and its rendering in a Secret "
            f"of at most 1 MiB, and this one needs about {records.mib(size)}; leave unused "
            "upstream components out (`gridloop bundle --skip COMPONENT`)"
        )
    _step(
        "values",
        f"{rendered.objects} objects and {rendered.crds} CRDs rendered "
        f"(release record ≈ {records.mib(size)} of 1 MiB)",
    )

    applied = installing.apply_crds(request.chart, target)
    if applied:
        _step("CRDs", f"{len(applied)} applied server-side from {request.chart / 'crds'}")
    else:
        _step("CRDs", "none in this chart")

    waiting = f", waiting up to {target.timeout} for workloads" if target.wait else ""
    print(f"  … {'helm':<12} upgrade --install {request.release}{waiting}", flush=True)
    installed = installing.upgrade(request, target)
    _step(f"release {request.release}", f"revision {installed.revision} {installed.status}")
    if installed.notes:
        print(f"\nNOTES:\n{installed.notes}")
    print(f"done in {time.monotonic() - start:.1f}s", file=sys.stderr)
    return 0


def _step(what: str, detail: str) -> None:
    print(f"  ✓ {what:<12} {detail}", flush=True)

"""What every chart command shares: the flags of the chart, the release and the cluster,
their checks, and the rendering each command starts with (`prepare`). The commands
(render_command, install_command, doctor_command, uninstall_command) each register
themselves and build on this; nothing here imports them."""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gridloop.bundle import charting
from gridloop.chart import bundles, connecting, exits, locating, objects, planning, rendering
from gridloop.chart.connecting import Target
from gridloop.chart.objects import Doc
from gridloop.chart.values import Layer
from gridloop.errors import UsageError
from gridloop.names import DEFAULT_NAMESPACE, DEFAULT_RELEASE

DEFAULT_TIMEOUT = "5m"
_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_RELEASE = 53  # Helm's limit: names derived from it need room for suffixes

if TYPE_CHECKING:
    Sub = argparse._SubParsersAction[argparse.ArgumentParser]


def cluster_command(sub: Sub, name: str, summary: str, description: str) -> argparse.ArgumentParser:
    """A command that talks to a cluster: --kubeconfig, --context, exit codes in --help."""
    p = sub.add_parser(
        name,
        help=summary,
        description=description,
        epilog=exits.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cluster_flags(p)
    return p


def chart_flags(p: argparse.ArgumentParser) -> None:
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
        "it there, else the package's chart bundled into the cache, fetching what it can)",
    )
    p.add_argument(
        "--mirror",
        type=Path,
        metavar="DIR",
        help="bundle the package's chart with what DIR holds, as `gridloop bundle --mirror` "
        "reads it (DIR/<component>/*.yaml, or a release archive versions.yaml pins by hash)",
    )
    release_flags(p)


def release_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--namespace",
        default=DEFAULT_NAMESPACE,
        help=f"the release namespace (default {DEFAULT_NAMESPACE})",
    )
    p.add_argument(
        "--release", default=DEFAULT_RELEASE, help=f"the release name (default {DEFAULT_RELEASE})"
    )
    p.add_argument(
        "--helm", metavar="PATH", help="the helm to run, 3.x or 4.x (default: helm on PATH)"
    )
    p.add_argument(
        "--kubectl",
        metavar="PATH",
        help="the kubectl to run, within one minor version of the server (default: on PATH)",
    )


def cluster_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--kubeconfig",
        type=Path,
        help="the cluster (default: $KUBECONFIG, else the local cluster's if it was "
        "started, else ~/.kube/config)",
    )
    p.add_argument(
        "--context", metavar="NAME", help="a context of the kubeconfig (default: its current)"
    )


def check_release(args: argparse.Namespace) -> None:
    if not _DNS_LABEL.match(args.namespace) or len(args.namespace) > 63:
        raise UsageError(f"--namespace {args.namespace}: not a namespace name (a DNS label)")
    if not _DNS_LABEL.match(args.release) or len(args.release) > MAX_RELEASE:
        raise UsageError(
            f"--release {args.release}: lowercase letters, digits and '-', "
            f"at most {MAX_RELEASE} characters"
        )


def target(args: argparse.Namespace) -> Target:
    timeout = getattr(args, "timeout", DEFAULT_TIMEOUT)
    if not _DURATION.match(timeout):
        raise UsageError(f"--timeout {timeout}: not a duration (like 90s, 5m or 1h)")
    if args.context is not None and not args.context.strip():
        raise UsageError("--context: empty")
    kubeconfig = locating.kubeconfig(args.kubeconfig)
    connecting.check_context(kubeconfig, args.context)
    return Target(
        kubeconfig=kubeconfig,
        context=args.context,
        wait=getattr(args, "wait", False),
        timeout=timeout,
    )


def request(args: argparse.Namespace) -> rendering.Request:
    check_release(args)
    bundle = getattr(args, "bundle", None)
    if bundle is not None:
        if args.chart is not None or getattr(args, "mirror", None) is not None:
            raise UsageError("--bundle and --chart or --mirror: give one of them")
        chart = bundles.unpack(bundle)
    else:
        chart = locating.chart_folder(
            args.chart, say=_to_stderr, mirror=getattr(args, "mirror", None)
        )
    return rendering.Request(
        chart=chart,
        profile=locating.profile_file(chart, args.profile),
        files=tuple(args.files),
        sets=tuple(args.sets),
        namespace=args.namespace,
        release=args.release,
    )


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr)


@dataclass(frozen=True)
class Prepared:
    """A rendering, with its objects parsed and the values it was made from."""

    request: rendering.Request
    rendered: rendering.Rendered
    crds: list[Doc]  # the chart's crds/, in order
    docs: list[Doc]  # everything else: what Helm records as the release
    values: dict[str, Any]


def prepare(req: rendering.Request) -> Prepared:
    rendered = rendering.render(req)
    everything = objects.parse(rendered.text)
    layers = [Layer(str(req.profile), locating.values_file(req.profile))] if req.profile else []
    layers += [Layer(str(path), locating.values_file(path)) for path in req.files]
    defaults = charting.read(req.chart).values
    values = planning.merged_values(
        defaults if isinstance(defaults, dict) else {}, layers, req.sets
    )
    return Prepared(
        request=req,
        rendered=rendered,
        crds=[d for d in everything if d["kind"] == objects.CRD],
        docs=objects.parse(rendered.manifest),
        values=values,
    )

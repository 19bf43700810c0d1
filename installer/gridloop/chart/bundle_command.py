"""`gridloop bundle`: the command-line shell around bundle/bundling.py. Parses, calls,
prints. It sits with the chart's commands, above both the bundle and the local cluster
(whose registry `--digests-from local` reads)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from gridloop import paths
from gridloop.bundle import bundling
from gridloop.bundle.sources import COMPONENTS
from gridloop.errors import UsageError

DEFAULT_OUT = paths.BUNDLE_OUT


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bundle",
        help="write the chart with its upstream operators and the list of images it runs",
        description="Write OUT/gridloop/ (the umbrella chart plus crds/<component>.yaml and "
        f"upstream/<component>/ for {', '.join(COMPONENTS)}) and OUT/images.txt; with "
        "--tarball also OUT/gridloop-<version>.tgz. Upstream renderings are cached outside "
        "the repo.",
    )
    p.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default: ./{DEFAULT_OUT})"
    )
    p.add_argument(
        "--mirror",
        type=Path,
        metavar="DIR",
        help="take a component's manifests from DIR/<component>/*.yaml (offline); they get "
        "the same edits as downloaded ones, but their images are not pinned",
    )
    p.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="COMPONENT",
        help=f"leave a component out (repeatable): {', '.join(COMPONENTS)}",
    )
    p.add_argument(
        "--digests-from",
        metavar="REGISTRY",
        help="pin every image by its digest in REGISTRY, which holds each image under its "
        "full name (<REGISTRY>/<image>, as imageRegistry pulls): a URL such as "
        "https://mirror.example:5000/gridloop, or `local` for the local cluster's registry",
    )
    p.add_argument("--tarball", action="store_true", help="also `helm package` the bundled chart")
    p.add_argument(
        "--chart", type=Path, metavar="DIR", help="the chart to bundle (default: charts/gridloop)"
    )
    p.set_defaults(func=cmd_bundle)


def cmd_bundle(args: argparse.Namespace) -> int:
    start = time.monotonic()
    request = bundling.Request(
        out=args.out,
        chart=args.chart,
        mirror=args.mirror,
        skip=frozenset(args.skip),
        tarball=args.tarball,
        digests_from=_registry(args.digests_from),
    )
    print(f"bundling into {args.out}", flush=True)
    result = bundling.bundle(request, say=lambda line: print(line, flush=True))
    chart = f"chart {result.chart.version}" if result.chart else "no chart"
    print(f"wrote {result.folder} ({chart}, {len(result.components)} upstream components)")
    print(f"wrote {result.images_file} ({len(result.images)} images)")
    if result.tarball is not None:
        print(f"wrote {result.tarball}")
    print(f"done in {time.monotonic() - start:.1f}s", file=sys.stderr)
    return 0


def _registry(given: str | None) -> str | None:
    """`local`: the registry of the running local cluster in $GRIDLOOP_STATE (or the
    default state folder)."""
    if given != "local":
        return given
    from gridloop.local import cluster  # only here: a plain bundle loads no cluster code

    where = paths.state_root()
    url = cluster.registry_url(where)
    if url is None:
        raise UsageError(
            f"--digests-from local: no local cluster with a registry runs from {where} "
            "(`gridloop local up` starts one with its container nodes)"
        )
    return url

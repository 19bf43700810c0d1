"""`gridloop dashboards generate|preview`: flags and printing around the dashboards.

``generate`` writes the JSON files into the chart (``--check``: only says which differ
from the code, exit 1 if any); ``preview`` draws each dashboard's panels into a PNG from
a Prometheus URL.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from gridloop.dashboards.catalog import DASHBOARDS
from gridloop.dashboards.fetching import check_url
from gridloop.dashboards.generating import default_dir, differences, write
from gridloop.errors import UsageError

_DURATION = re.compile(r"^(\d+)(s|m|h)$")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "dashboards",
        help="generate the Grafana dashboards into the chart, or preview them as PNG",
        description="Grafana dashboards as code (dashboards/gridloop/dashboards/).",
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    gen = verbs.add_parser("generate", help="write charts/gridloop/dashboards/*.json")
    gen.add_argument("--out", type=Path, default=None, help=f"folder (default {default_dir()})")
    gen.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1 if a file differs from what the code generates",
    )
    gen.set_defaults(func=_generate)
    pre = verbs.add_parser("preview", help="draw each dashboard's panels into a PNG")
    pre.add_argument("--prometheus-url", required=True, help="e.g. http://127.0.0.1:26406")
    pre.add_argument("--out", type=Path, default=Path("dashboard-previews"), help="folder")
    pre.add_argument(
        "--dashboard",
        action="append",
        default=None,
        help=f"one of {', '.join(DASHBOARDS)} (repeatable; default all)",
    )
    pre.add_argument("--since", default="30m", help="how far back, e.g. 15m, 2h (default 30m)")
    pre.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="VAR=VALUE",
        help="a dashboard variable's value (a regex), e.g. site=us-east; default All",
    )
    pre.set_defaults(func=_preview)


def _generate(args: argparse.Namespace) -> int:
    folder = args.out or default_dir()
    if args.check:
        stale = differences(folder)
        for name in stale:
            print(f"{folder / name}: differs from the code; run `gridloop dashboards generate`")
        return 1 if stale else 0
    changed = write(folder)
    print(f"{len(DASHBOARDS)} dashboards in {folder} ({len(changed)} changed)")
    return 0


def parse_since(text: str) -> float:
    m = _DURATION.match(text)
    if not m or int(m.group(1)) == 0:
        raise UsageError(f"--since {text}: not a duration like 30m, 2h or 90s")
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)]


def parse_sets(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise UsageError(f"--set {item}: expected VAR=VALUE, e.g. site=us-east")
        out[name] = value
    return out


def _preview(args: argparse.Namespace) -> int:
    from gridloop.dashboards.previewing import render  # matplotlib only when drawing

    url = check_url(args.prometheus_url)
    since = parse_since(args.since)
    values = parse_sets(args.set)
    names = args.dashboard or list(DASHBOARDS)
    for name in names:
        if name not in DASHBOARDS:
            raise UsageError(f"--dashboard {name}: no such dashboard ({', '.join(DASHBOARDS)})")
    for name in names:
        print(render(name, url, args.out, since, values))
    return 0

"""`gridloop render`: print every manifest the chart would install (applies nothing)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gridloop.chart import rendering
from gridloop.chart.preparing import chart_flags, request

if TYPE_CHECKING:
    from gridloop.chart.preparing import Sub


def register(sub: Sub) -> None:
    p = sub.add_parser(
        "render",
        help="print every manifest the chart would install, CRDs included (applies nothing)",
        description="Render the chart with helm (`helm template --include-crds`) and print "
        "it. Bad values fail with one line naming the key, as `gridloop install` would.",
    )
    chart_flags(p)
    p.set_defaults(func=cmd_render)


def cmd_render(args: argparse.Namespace) -> int:
    req = request(args)
    rendered = rendering.render(req)
    sys.stdout.write(rendered.text)
    print(
        f"rendered {rendered.objects} objects and {rendered.crds} CRDs from {req.chart}",
        file=sys.stderr,
    )
    return 0

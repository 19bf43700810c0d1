"""The `gridloop` command line: parse, dispatch, and turn errors into one line.

Subcommands live in their own modules; this one only wires them. A
`GridloopError` becomes `error: <one line>` on stderr and its exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from gridloop.errors import GridloopError

# The module that registers each command. Only the one named on the command line is
# imported (`gridloop status` starts without loading the chart, bundle or dashboard code);
# --help, completion and a misspelt command load them all.
COMMANDS = {
    "local": "gridloop.local.commands",
    "health": "gridloop.health.commands",
    "sim": "gridloop.sim.commands",
    "bundle": "gridloop.bundle.commands",
    "render": "gridloop.chart.commands",
    "install": "gridloop.chart.commands",
    "upgrade": "gridloop.chart.commands",
    "doctor": "gridloop.chart.doctor_command",
    "uninstall": "gridloop.chart.uninstall_command",
    "completion": "gridloop.chart.completion",
    "dashboards": "gridloop.dashboards.commands",
    "status": "gridloop.status.commands",
}


def make_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser, or only `command`'s when it is one."""
    parser = argparse.ArgumentParser(
        prog="gridloop",
        description="An open GPU platform bundle for Kubernetes.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    modules = [COMMANDS[command]] if command in COMMANDS else dict.fromkeys(COMMANDS.values())
    for module in modules:
        importlib.import_module(module).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = make_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    try:
        result: int = args.func(args)
        return result
    except GridloopError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

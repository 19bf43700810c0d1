"""The `gridloop` command line: parse, dispatch, and turn errors into one line.

Subcommands live in their own modules; this one only wires them. A
`GridloopError` becomes `error: <one line>` on stderr and its exit code.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gridloop.bundle import commands as bundle_commands
from gridloop.chart import commands as chart_commands
from gridloop.chart import completion as completion_command
from gridloop.chart import doctor_command, uninstall_command
from gridloop.dashboards import commands as dashboard_commands
from gridloop.errors import GridloopError
from gridloop.health import commands as health_commands
from gridloop.local import commands as local_commands
from gridloop.sim import commands as sim_commands
from gridloop.status import commands as status_commands


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gridloop",
        description="An open GPU platform bundle for Kubernetes.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    local_commands.register(sub)
    health_commands.register(sub)
    sim_commands.register(sub)
    bundle_commands.register(sub)
    chart_commands.register(sub)
    doctor_command.register(sub)
    uninstall_command.register(sub)
    completion_command.register(sub)
    dashboard_commands.register(sub)
    status_commands.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_parser()
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

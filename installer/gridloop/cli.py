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
    "bundle": "gridloop.chart.bundle_command",
    "render": "gridloop.chart.render_command",
    "install": "gridloop.chart.install_command",
    "upgrade": "gridloop.chart.install_command",
    "doctor": "gridloop.chart.doctor_command",
    # what the chart's `helm test` hooks run in gridloop's image: base dependencies only
    "selftest": "gridloop.selftest.selftest_command",
    # what its pre-delete hook runs, likewise
    "hooks": "gridloop.hooks.hooks_command",
    "uninstall": "gridloop.chart.uninstall_command",
    "completion": "gridloop.completion",
    "dashboards": "gridloop.dashboards.commands",
    "status": "gridloop.status.commands",
    "models": "gridloop.models.commands",
    "loop": "gridloop.loop.commands",
    # what the chart's sandbox-token-issuer runs in gridloop's image
    "sandboxes": "gridloop.sandboxes.commands",
}


# The extra that brings each optional library (pyproject.toml): the wheel's own
# dependencies are the health service's only, so gridloop's image stays slim.
EXTRAS = {
    "textual": "cli",
    "rich": "cli",
    "grafana_foundation_sdk": "cli",
    "matplotlib": "cli",
    "cryptography": "local",
    "boto3": "models",
    "botocore": "models",
    "numpy": "models",
    "safetensors": "models",
    "tokenizers": "models",
    "k8s_agent_sandbox": "sandboxes",
}


def missing_extra(err: ModuleNotFoundError, command: str) -> str | None:
    """The line to say when `command` needs a library of an extra that is not installed."""
    top = (err.name or "").split(".")[0]
    extra = EXTRAS.get(top)
    if extra is None:
        return None
    return (
        f"gridloop {command} needs the {extra!r} extra ({top} is not installed): "
        f"pip install 'gridloop[{extra}]'"
    )


def make_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser, or only `command`'s when it is one."""
    parser = argparse.ArgumentParser(
        prog="gridloop",
        description="An open GPU platform bundle for Kubernetes.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    if command in COMMANDS:
        importlib.import_module(COMMANDS[command]).register(sub)
        return parser
    for module in dict.fromkeys(COMMANDS.values()):
        try:
            importlib.import_module(module).register(sub)
        except ModuleNotFoundError as err:  # --help still lists it, and what it needs
            line = missing_extra(err, "")
            if line is None:
                raise
            for name in (c for c, m in COMMANDS.items() if m == module):
                if name in sub.choices:  # registered before the import that failed
                    continue
                sub.add_parser(name, help=f"(not installed: {line.split(' needs ', 1)[1]})")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = argv[0] if argv else ""
    try:
        parser = make_parser(command or None)
        args = parser.parse_args(argv)
        from gridloop import toolchain

        toolchain.configure(getattr(args, "helm", None), getattr(args, "kubectl", None))
        result: int = args.func(args)
        return result
    except ModuleNotFoundError as err:
        line = missing_extra(err, command)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return 2
    except GridloopError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""The command line loads only the command it runs."""

from __future__ import annotations

import argparse
import subprocess
import sys

from gridloop import cli


def _registered(parser: argparse.ArgumentParser) -> list[str]:
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(sub.choices)


def test_the_table_of_commands_names_every_command_once_in_help_order():
    assert _registered(cli.make_parser()) == list(cli.COMMANDS)


def test_each_command_parses_with_only_its_own_module_loaded():
    for command in cli.COMMANDS:
        assert command in _registered(cli.make_parser(command))


def test_status_starts_without_the_kubernetes_client_textual_or_other_commands():
    # the live UI imports Textual itself, and the Kubernetes client after its first frame
    probe = (
        "import sys; from gridloop import cli; cli.make_parser('status'); "
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('kubernetes', 'textual', 'prometheus_api_client', 'jinja2') "
        "or m in ('gridloop.chart.preparing', 'gridloop.chart.render_command', "
        "'gridloop.dashboards.commands'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""

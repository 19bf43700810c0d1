"""`gridloop completion bash|zsh`: shell completion generated from the CLI's own parser.

The parser is the one place the commands, their flags and the flags' choices are
declared, so the script is made from it (`table`, pure) and cannot drift from it: a
new flag completes the moment it exists. The script holds plain tables (subcommands,
flags, which flags take a value, their choices, which name files) and one small bash
function that walks the words typed so far. zsh runs the same function through its
bashcompinit layer. No dependency beyond argparse.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gridloop.chart.preparing import Sub

SHELLS = ("bash", "zsh")
FILE_METAVARS = {"FILE", "DIR", "PATH"}
TABLES = ("subs", "flags", "takes", "choices", "files")


@dataclass
class Table:
    """Per command path ("gridloop" itself, "gridloop local up" a nested one)."""

    subcommands: dict[str, list[str]] = field(default_factory=dict)
    flags: dict[str, list[str]] = field(default_factory=dict)
    takes_value: set[str] = field(default_factory=set)  # "path --flag"
    choices: dict[str, list[str]] = field(default_factory=dict)  # "path --flag" -> choices
    files: set[str] = field(default_factory=set)  # "path --flag" completing file names


def table(
    parser: argparse.ArgumentParser, path: str = "gridloop", out: Table | None = None
) -> Table:
    """Walk `parser` and its subparsers into a Table."""
    out = out or Table()
    flags: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            names = [n for n in action.choices if not n.startswith("-")]
            out.subcommands[path] = sorted(names)
            for name, child in action.choices.items():
                table(child, f"{path} {name}", out)
            continue
        if not action.option_strings:
            if action.choices:  # a positional with fixed values completes like a subcommand
                out.subcommands[path] = [str(c) for c in action.choices]
            continue
        flags += action.option_strings
        if action.nargs == 0:
            continue
        for option in action.option_strings:
            key = f"{path} {option}"
            out.takes_value.add(key)
            if action.choices:
                out.choices[key] = [str(c) for c in action.choices]
            if action.type is Path or str(action.metavar or "") in FILE_METAVARS:
                out.files.add(key)
    out.flags[path] = sorted(flags)
    return out


def _assoc(name: str, items: dict[str, str]) -> str:
    body = " ".join(f"[{shlex.quote(k)}]={shlex.quote(v)}" for k, v in sorted(items.items()))
    return f"{name}=({body})"


_FUNCTION = r"""
_gridloop() {
    [[ -n ${ZSH_VERSION:-} ]] && setopt localoptions ksharrays
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"
    local path=gridloop skip=0 i w
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${COMP_WORDS[i]}"
        if ((skip)); then skip=0; continue; fi
        if [[ $w == -* ]]; then
            [[ -n ${_gridloop_takes["$path $w"]+x} ]] && skip=1
            continue
        fi
        if [[ " ${_gridloop_subs["$path"]-} " == *" $w "* ]]; then
            path="$path $w"
        fi
    done
    COMPREPLY=()
    if ((skip)); then
        if [[ -n ${_gridloop_choices["$path $prev"]+x} ]]; then
            COMPREPLY=($(compgen -W "${_gridloop_choices["$path $prev"]}" -- "$cur"))
        elif [[ -n ${_gridloop_files["$path $prev"]+x} ]]; then
            COMPREPLY=($(compgen -f -- "$cur"))
        fi
        return 0
    fi
    if [[ $cur == -* || -z ${_gridloop_subs["$path"]-} ]]; then
        COMPREPLY=($(compgen -W "${_gridloop_flags["$path"]-}" -- "$cur"))
    else
        COMPREPLY=($(compgen -W "${_gridloop_subs["$path"]}" -- "$cur"))
    fi
    return 0
}
complete -o default -F _gridloop gridloop
"""


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    t = table(parser)
    lines = [
        f"# gridloop {shell} completion, generated from its parser: "
        f"source <(gridloop completion {shell})",
    ]
    if shell == "zsh":
        lines.append("autoload -U +X bashcompinit && bashcompinit")
    lines += [
        "declare -A " + " ".join(f"_gridloop_{t}" for t in TABLES),
        _assoc("_gridloop_subs", {k: " ".join(v) for k, v in t.subcommands.items()}),
        _assoc("_gridloop_flags", {k: " ".join(v) for k, v in t.flags.items()}),
        _assoc("_gridloop_takes", dict.fromkeys(t.takes_value, "1")),
        _assoc("_gridloop_choices", {k: " ".join(v) for k, v in t.choices.items()}),
        _assoc("_gridloop_files", dict.fromkeys(t.files, "1")),
    ]
    return "\n".join(lines) + _FUNCTION


def register(sub: Sub) -> None:
    p = sub.add_parser(
        "completion",
        help="print a shell completion script: source <(gridloop completion bash)",
        description="Print the completion script for bash or zsh, generated from gridloop's "
        "own command-line parser. bash: `source <(gridloop completion bash)` (or save it "
        "in /etc/bash_completion.d/gridloop); zsh: `source <(gridloop completion zsh)`.",
    )
    p.add_argument("shell", choices=SHELLS)
    p.set_defaults(func=cmd_completion)


def cmd_completion(args: argparse.Namespace) -> int:
    from gridloop import cli

    sys.stdout.write(script(cli.make_parser(), args.shell))
    return 0

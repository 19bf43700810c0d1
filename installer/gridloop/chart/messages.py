"""Helm's error output as the one line gridloop shows (pure).

Helm prints `Error: ` and then, for values the schema refuses, a header and one
`- at '/json/pointer': problem` line per violation; for a template's `fail`, the
template's file and position before the message that says what to change. Around it
come log lines (`level=INFO msg="found symbolic link..."`) and hints (`Use --debug
flag...`). What a person needs is the key and the problem: `kueue.teams[0].weight:
minimum: got -1, want 0`.
"""

from __future__ import annotations

import re

_LOG = re.compile(r"^(level=\w+ |time=|WARNING: |walk\.go:)")
_HINT = re.compile(r"^Use --debug flag")
_SCHEMA_HEADER = re.compile(r"^values don't meet the specifications of the schema")
_CHART_HEADER = re.compile(r"^[\w.-]+:$")
_VIOLATION = re.compile(r"^- at '([^']*)': (.*)$")
_TEMPLATE_FAIL = re.compile(r"^execution error at \([^)]*\): ")


def helm_error(output: str) -> str:
    """The problem in helm's stderr, one line, without `Error: ` and the noise around it."""
    lines = [line.strip() for line in output.splitlines()]
    lines = [line for line in lines if line and not _LOG.match(line) and not _HINT.match(line)]
    start = next((i for i, line in enumerate(lines) if line.startswith("Error: ")), None)
    if start is None:
        return " ".join(lines[-1:]) or "helm failed without saying why"
    body = [lines[start].removeprefix("Error: "), *lines[start + 1 :]]
    if _SCHEMA_HEADER.match(body[0]):
        violations = [_VIOLATION.match(line) for line in body[1:]]
        found = [f"{key_of(m.group(1))}: {m.group(2)}".lstrip(": ") for m in violations if m]
        if found:
            return "; ".join(found)
        body = [line for line in body[1:] if not _CHART_HEADER.match(line)]
    return " ".join(_TEMPLATE_FAIL.sub("", line) for line in body)


def key_of(pointer: str) -> str:
    """A JSON pointer into the values as a values key: `/a/b/0/c` -> `a.b[0].c`."""
    key = ""
    for part in pointer.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        key += f"[{part}]" if part.isdigit() else f".{part}"
    return key.lstrip(".")

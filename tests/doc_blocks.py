"""The command blocks of README.md and docs/*.md, as the tests read and run them.

A block is a fenced block a user runs: its language is `sh`, `bash`, `shell` or
`console`, or its lines start with `$ ` (a command shown with its output). Each one
carries, on the line just before its fence, a visible note that says how it is covered:

    <sub>Run by `tests/cluster/test_loop.py::platform`.</sub>
    <sub>Not run by the tests: it needs a GPU cluster.</sub>

(more tests after a comma; free text may follow the last name).
tests/unit/test_doc_commands.py fails for a block with no note and for a note naming a
test or fixture that does not exist. A test that runs a block itself takes it from the
Markdown with `doc_block(...)`, so a changed command in the docs is the command tested.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
FENCE = re.compile(r"^\s*```\s*([A-Za-z0-9_+-]*)\s*$")
HEADING = re.compile(r"^(#{1,6})\s+(.*\S)\s*$")
SHELLS = frozenset({"sh", "bash", "shell", "console"})
RUN_BY = re.compile(r"^<sub>Run by (`[^`]+`(?:,\s*`[^`]+`)*)(?:[^`].*)?</sub>\s*$")
NOT_RUN = re.compile(r"^<sub>Not run by the tests: .+</sub>\s*$")


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int  # of the opening fence, 1-based
    heading: str  # the nearest heading above it ("" before the first)
    text: str
    note: str  # the line just before the fence, stripped ("" when none)

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"

    def run_by(self) -> list[str]:
        """The tests the note names (`path::name`), or [] for any other note."""
        found = RUN_BY.match(self.note)
        return re.findall(r"`([^`]+)`", found.group(1)) if found else []

    def not_run(self) -> bool:
        return bool(NOT_RUN.match(self.note))


def is_command_block(language: str, body: list[str]) -> bool:
    return language in SHELLS or (
        not language and any(line.lstrip().startswith("$ ") for line in body)
    )


def blocks(doc: Path) -> list[Block]:
    """Every command block of `doc`, in order."""
    out: list[Block] = []
    heading, opened, language, body = "", 0, "", []  # opened: the fence's line, 0 outside
    lines = doc.read_text().splitlines()
    for number, line in enumerate(lines, start=1):
        fence = FENCE.match(line)
        if opened:
            if fence and not fence.group(1):
                if is_command_block(language, body):
                    note = lines[opened - 2].strip() if opened >= 2 else ""
                    out.append(Block(doc, opened, heading, "\n".join(body) + "\n", note))
                opened, body = 0, []
            else:
                body.append(line)
            continue
        if fence:
            opened, language = number, fence.group(1)
            continue
        titled = HEADING.match(line)
        if titled:
            heading = titled.group(2)
    return out


def block(doc: str, heading: str, index: int = 0) -> Block:
    """The `index`-th command block under the heading `heading` of `doc` (a path from the
    repository's root)."""
    under = [b for b in blocks(ROOT / doc) if b.heading == heading]
    assert len(under) > index, f"{doc}: no command block {index} under '{heading}'"
    return under[index]


def doc_block(doc: str, heading: str, index: int = 0) -> str:
    """The text of that block: what a test runs."""
    return block(doc, heading, index).text


def substituted(text: str, replacements: dict[str, str]) -> str:
    """`text` with each key replaced; a key the text lacks fails (the doc changed)."""
    for old, new in replacements.items():
        assert old in text, f"the block no longer has {old!r}:\n{text}"
        text = text.replace(old, new)
    return text

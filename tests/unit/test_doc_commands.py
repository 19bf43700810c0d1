"""Every command block in README.md and docs/*.md says whether a test runs it, and which:
a command the docs tell users to run that no test runs is already broken (the README's
model walk waited out ten minutes on an image never pushed). tests/doc_blocks.py has the
notes' form."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from doc_blocks import DOCS, ROOT, Block, block, blocks, substituted

TESTS = ROOT / "tests"
CALL = re.compile(r"""\bdoc_block\(\s*["']([^"']+)["']\s*,\s*["']([^"']+)["']\s*(?:,\s*(\d+))?""")


def all_blocks() -> list[Block]:
    return [block for doc in DOCS for block in blocks(doc)]


def defined(path: Path, name: str) -> bool:
    return bool(re.search(rf"^\s*(?:async\s+)?def {re.escape(name)}\(", path.read_text(), re.M))


def test_every_command_block_says_whether_a_test_runs_it() -> None:
    bare = [b.where for b in all_blocks() if not b.run_by() and not b.not_run()]
    assert not bare, (
        "command blocks with no note on the line before the fence "
        "(<sub>Run by `tests/...py::test_x`.</sub> or <sub>Not run by the tests: why.</sub>): "
        f"{bare}"
    )


def test_every_test_a_note_names_exists() -> None:
    wrong = []
    for found in all_blocks():
        for name in found.run_by():
            file, _, function = name.partition("::")
            path = ROOT / file
            if not file.startswith("tests/") or not path.is_file() or not defined(path, function):
                wrong.append(f"{found.where}: {name}")
    assert not wrong, f"notes name tests or fixtures that do not exist: {wrong}"


def test_a_block_a_test_extracts_names_that_test_file() -> None:
    """A test that runs a block from the Markdown is named by the block's note."""
    calls = [
        (path, doc, heading, int(index or 0))
        for path in TESTS.rglob("*.py")
        if path.name not in ("doc_blocks.py", "test_doc_commands.py")
        for doc, heading, index in CALL.findall(path.read_text())
    ]
    assert calls, "no test extracts a block"
    for path, doc, heading, index in calls:
        extracted = block(doc, heading, index)
        named = {n.partition("::")[0] for n in extracted.run_by()}
        assert str(path.relative_to(ROOT)) in named, (extracted.where, extracted.note)


def test_blocks_are_the_shell_fences_and_dollar_lines_with_their_notes(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Title\n\n<sub>Run by `tests/x.py::test_a`, `tests/y.py::fixture`; in part.</sub>\n"
        "```sh\nmake demo\n```\n\n```yaml\nkey: value\n```\n\n## Output\n\n"
        "<sub>Not run by the tests: it needs a GPU.</sub>\n```\n$ nvidia-smi\nGPU 0\n```\n"
        "\n```text\nplain\n```\n\n```console\n$ gridloop status\n```\n"
    )

    found = blocks(doc)

    assert [(b.line, b.heading, b.text) for b in found] == [
        (4, "Title", "make demo\n"),
        (15, "Output", "$ nvidia-smi\nGPU 0\n"),
        (24, "Output", "$ gridloop status\n"),
    ]
    assert found[0].run_by() == ["tests/x.py::test_a", "tests/y.py::fixture"]
    assert found[1].not_run() and found[1].run_by() == []
    assert found[2].note == "" and not found[2].not_run()


def test_a_substitution_the_block_no_longer_needs_fails() -> None:
    assert substituted("a /tmp/tiny b", {"/tmp/tiny": "/w/t"}) == "a /w/t b"
    with pytest.raises(AssertionError, match="no longer has '/tmp/x'"):
        substituted("a /tmp/tiny b", {"/tmp/x": "/w/t"})

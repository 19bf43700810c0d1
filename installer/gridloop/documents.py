"""Reading YAML documents that people write by hand (fleet files, health policies).

One strict reader for all of them: a duplicate key is an error instead of the
last one silently winning (a second `pools:` under a site would drop a pool
without a word), and every problem is one line with its line and column.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path

import yaml


class DocumentProblem(ValueError):
    """Why a document could not be read; one line, without the file name."""


def read_document(path: str | Path, what: str) -> object:
    """The parsed YAML of `path`; `what` names the document in a read error."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise DocumentProblem(f"cannot read {what}: {err}") from err
    try:
        return yaml.load(text, Loader=StrictLoader)  # a SafeLoader subclass
    except yaml.YAMLError as err:
        raise DocumentProblem(yaml_problem(err)) from err


def yaml_problem(err: yaml.YAMLError) -> str:
    if isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None:
        mark = err.problem_mark
        return f"line {mark.line + 1}, column {mark.column + 1}: invalid YAML: {err.problem}"
    return "invalid YAML: " + " ".join(str(err).split())


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys instead of keeping the last one."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[object, object]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # SafeLoader reports unhashable keys itself
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

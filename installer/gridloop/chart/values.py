"""Values as Helm merges them, far enough to check the fleet before helm runs (pure).

Helm merges `-f` files in order (maps key by key, anything else replaced), writes each
`--set` into the result in place, then lays that over the chart's values.yaml, where
a null removes a default. `fleet_problem` repeats that and checks `fleet` with
gridloop's own fleet schema, so a broken fleet reads exactly as it does for
`gridloop local up` (file, field path, what is wrong) rather than as a JSON-schema
pointer. `--set` is parsed in Helm's syntax (`a.b[0].c=v,x={1,2}`, `\\` escapes,
true/false/null and integers typed as Helm types them); what this parser does not
understand is left to helm, which reports it.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gridloop.fleet import API_VERSION, KIND, FleetError, parse_fleet

Values = dict[str, Any]
Key = list[str | int]

SET_SOURCE = "--set"
# a values fleet may leave out what a fleet file must have; its name is not used
VALUES_FLEET_NAME = "values"


class SetSyntax(ValueError):
    """A `--set` this parser does not understand (helm will say why)."""


@dataclass(frozen=True)
class Layer:
    """One values file, in the order helm gets it; `source` is how messages name it."""

    source: str
    values: Values


def merge(base: Values, override: Values) -> Values:
    """Two values files merged as `helm -f a -f b` does: maps key by key, the rest replaced."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def coalesce(defaults: Values, user: Values) -> Values:
    """User values over the chart's defaults: maps merged, a null removes the default."""
    out = dict(defaults)
    for key, value in user.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = coalesce(out[key], value)
        else:
            out[key] = value
    return out


def user_values(layers: Sequence[Layer], sets: Sequence[str]) -> tuple[Values, str]:
    """The user-supplied values, and the source that last set anything under `fleet`."""
    values: Values = {}
    fleet_source = ""
    for layer in layers:
        values = merge(values, copy.deepcopy(layer.values))  # --set writes in place
        if "fleet" in layer.values:
            fleet_source = layer.source
    for expression in sets:
        for key, value in parse_set(expression):
            set_into(values, key, value)
            if key[0] == "fleet":
                fleet_source = SET_SOURCE
    return values, fleet_source


def fleet_problem(defaults: Values, layers: Sequence[Layer], sets: Sequence[str]) -> str | None:
    """What is wrong with the merged values' fleet, as one line; None when it is fine,
    has no `sites`, or a `--set` could not be read (helm then reports that)."""
    try:
        user, source = user_values(layers, sets)
    except SetSyntax:
        return None
    fleet = coalesce(defaults, user).get("fleet")
    if not isinstance(fleet, dict) or "sites" not in fleet:
        return None
    doc: Values = {"apiVersion": API_VERSION, "kind": KIND, **fleet}
    metadata = doc.get("metadata")
    if metadata is None:
        doc["metadata"] = {"name": VALUES_FLEET_NAME}
    elif isinstance(metadata, dict) and "name" not in metadata:
        doc["metadata"] = {**metadata, "name": VALUES_FLEET_NAME}
    try:
        parse_fleet(doc, source or "values")
    except FleetError as err:
        where = f"fleet.{err.path}" if err.path else "fleet"
        return f"{err.source}: {where}: {err.message}"
    return None


# --- `--set`, in Helm's syntax ---


def parse_set(expression: str) -> list[tuple[Key, object]]:
    """`a.b[0]=1,c={x,y}` -> [(["a", "b", 0], 1), (["c"], ["x", "y"])]."""
    out: list[tuple[Key, object]] = []
    rest = expression
    while rest:
        raw_key, rest = _until(rest, "=", allow_end=False)
        key = _key(raw_key)
        value: object
        if rest.startswith("{"):
            items, rest = _list(rest[1:])
            value = items
            if rest and not rest.startswith(","):
                raise SetSyntax(f"{expression}: unexpected {rest[0]!r} after a list")
            rest = rest[1:]
        else:
            raw, rest = _until(rest, ",", allow_end=True)
            value = typed(_unescape(raw))
        out.append((key, value))
    return out


def typed(raw: str) -> object:
    """A `--set` value as Helm types it: booleans, null, integers (no leading 0), else text."""
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "null":
        return None
    if raw == "0":
        return 0
    if raw and raw[0] != "0":
        digits = raw[1:] if raw[0] in "+-" else raw
        if digits.isascii() and digits.isdigit():
            return int(raw)
    return raw


def set_into(values: Values, key: Key, value: object) -> None:
    """Write `value` at `key`, creating maps and padding lists with nulls as Helm does."""
    current: Any = values
    for i, part in enumerate(key):
        last = i == len(key) - 1
        if isinstance(part, str) != isinstance(current, dict):
            raise SetSyntax(f"{_show(key)}: a map and a list disagree at {part!r}")
        if isinstance(part, int):
            current.extend([None] * (part + 1 - len(current)))
        if last:
            current[part] = value
            return
        want: type = list if isinstance(key[i + 1], int) else dict
        child = current[part] if isinstance(part, int) else current.get(part)
        if not isinstance(child, want):
            child = want()
            current[part] = child
        current = child


def _until(text: str, stop: str, allow_end: bool) -> tuple[str, str]:
    """The raw text (escapes kept) up to the first unescaped `stop`, and what follows it."""
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == stop:
            return text[:i], text[i + 1 :]
        if stop == "=" and text[i] == ",":
            break
        i += 1
    if not allow_end:
        raise SetSyntax(f"key {text[:i]!r} has no value")
    return text, ""


def _list(text: str) -> tuple[list[object], str]:
    """`x,y}rest` -> ([x, y], rest)."""
    items: list[object] = []
    start = i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] in ",}":
            items.append(typed(_unescape(text[start:i])))
            if text[i] == "}":
                return items, text[i + 1 :]
            start = i + 1
        i += 1
    raise SetSyntax("a list without its closing '}'")


def _key(raw: str) -> Key:
    """`a.b\\.c[0][1].d` -> ["a", "b.c", 0, 1, "d"]."""
    key: Key = []
    name = ""
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\" and i + 1 < len(raw):
            name += raw[i + 1]
            i += 2
            continue
        if ch == ".":
            if name:
                key.append(name)
            elif not key or not isinstance(key[-1], int):
                raise SetSyntax(f"key {raw!r} has an empty part")
            name = ""
        elif ch == "[":
            end = raw.find("]", i)
            index = raw[i + 1 : end] if end > i else ""
            if not index.isdigit() or (not name and not key):
                raise SetSyntax(f"key {raw!r} has a bad list index")
            if name:
                key.append(name)
                name = ""
            key.append(int(index))
            i = end
        else:
            name += ch
        i += 1
    if name:
        key.append(name)
    if not key or not isinstance(key[0], str):
        raise SetSyntax(f"key {raw!r} is empty")
    return key


def _unescape(text: str) -> str:
    out, i = "", 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            out += text[i + 1]
            i += 2
        else:
            out += text[i]
            i += 1
    return out


def _show(key: Key) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in key).lstrip(".")

"""Reading `policies/health.yaml` into a `Policy`, refusing anything doubtful.

The health service takes nodes out of a cluster, so its thresholds and safety limits are
validated once, at start, before any cluster call. Every mistake is a `PolicyError` whose
text is one line naming the file and the field (`policies/health.yaml:
spec.xid.overrides.79: must be one of quarantine, count, ignore, got 'reboot'`). Unknown
keys are errors too: a misspelt `maxNodes` silently falling back to a default would be a
safety limit nobody set.

`parse_policy` is pure (a YAML-shaped document in, a `Policy` out); `load_policy` only adds
reading the file. Nothing here may touch the cluster.
"""

from __future__ import annotations

import difflib
import math
import re
from pathlib import Path
from typing import TypeGuard, cast

from gridloop.documents import DocumentProblem, read_document
from gridloop.errors import UsageError
from gridloop.health.durations import format_duration, parse_duration
from gridloop.health.policy import Limits, Policy, QuotaLimits, Signals, Threshold, XidAction

API_VERSION = "gridloop.io/v1alpha1"
KIND = "HealthPolicy"

_SPEC_KEYS = (
    *("dryRun", "scrapeInterval", "xid", "signals", "release", "quarantine", "limits"),
    "quotas",
)
_SIGNAL_KEYS = (
    *("eccDoubleBitVolatile", "rowRemapFailure", "retiredPagesPending", "vanishedGpu"),
    *("thermalViolation", "powerViolation", "nvlinkErrors", "pcieReplays"),
)
_ACTION_VALUES = tuple(action.value for action in XidAction)
_ACTIONS = ", ".join(_ACTION_VALUES)
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_ABSENT = object()


class PolicyError(UsageError):
    """A health policy that cannot be used; `str()` is one line: `source: path: problem`."""

    def __init__(self, source: str, path: str, problem: str) -> None:
        self.source = source
        self.path = path
        self.problem = problem
        super().__init__(f"{source}: {path}: {problem}" if path else f"{source}: {problem}")


def load_policy(path: str | Path) -> Policy:
    """Read and validate a policy file; unreadable files and bad YAML are PolicyErrors too."""
    source = str(path)
    try:
        data = read_document(path, "health policy")
    except DocumentProblem as err:
        raise PolicyError(source, "", str(err)) from err
    return parse_policy(data, source)


def parse_policy(data: object, source: str = "health policy") -> Policy:
    """Validate a policy document (the YAML-shaped dict) and build the `Policy`."""
    top = _Fields(data, "", source, ("apiVersion", "kind", "metadata", "spec"))
    for key, expected in (("apiVersion", API_VERSION), ("kind", KIND)):
        value = top.get(key)
        if value != expected:
            raise top.error(key, f"must be {expected}, got {_show(value)}")
    metadata = top.section("metadata", ("name",))
    name = metadata.get("name", "default")
    if not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        raise metadata.error("name", f"must be a DNS-1123 subdomain, got {_show(name)}")
    if "spec" not in top.raw:
        raise top.error("spec", "required field is missing (use 'spec: {}' for the defaults)")
    spec = top.section("spec", _SPEC_KEYS)
    xid = spec.section("xid", ("quarantine", "count", "overrides", "repeat"))
    repeat = xid.section("repeat", ("count", "window"))
    release = spec.section("release", ("holdDown",))
    quarantine = spec.section("quarantine", ("noExecute", "drain", "optOutLabel"))
    quotas = spec.section("quotas", ("enabled", "maxRemoved"))
    default = Policy()
    return Policy(
        xid=_xid_table(xid),
        xid_repeat_count=repeat.integer("count", default.xid_repeat_count, minimum=1),
        xid_repeat_window_s=repeat.duration("window", default.xid_repeat_window_s),
        signals=_signals(spec.section("signals", _SIGNAL_KEYS)),
        hold_down_s=release.duration("holdDown", default.hold_down_s),
        taint_no_execute=quarantine.boolean("noExecute", default.taint_no_execute),
        drain=quarantine.boolean("drain", default.drain),
        opt_out_label=quarantine.label_key("optOutLabel", default.opt_out_label),
        limits=_limits(spec.section("limits", ("fleet", "pool", "window", "countCordoned"))),
        scrape_interval_s=spec.duration("scrapeInterval", default.scrape_interval_s),
        dry_run=spec.boolean("dryRun", default.dry_run),
        rebalance_quotas=quotas.boolean("enabled", default.rebalance_quotas),
        quota_limits=_quota_limits(quotas.section("maxRemoved", ("gpus", "percent", "window"))),
    )


def _xid_table(xid: _Fields) -> dict[int, XidAction]:
    """Quarantine and count lists (each replacing its default), then per-code overrides."""
    default = Policy().xid
    lists: dict[str, list[int]] = {}
    for key, action in (("quarantine", XidAction.QUARANTINE), ("count", XidAction.COUNT)):
        defaults = [code for code, act in default.items() if act is action]
        lists[key] = xid.codes(key) if key in xid.raw else defaults
    for key, other in (("count", "quarantine"), ("quarantine", "count")):
        clash = [i for i, code in enumerate(lists[key]) if code in lists[other]]
        if key in xid.raw and clash:
            code = lists[key][clash[0]]
            whose = "" if other in xid.raw else " (the default list)"
            problem = (
                f"XID {code} is also in {xid.at(other)}{whose}; give each code one action, "
                f"or change one code with {xid.at('overrides')}"
            )
            raise PolicyError(xid.source, f"{xid.at(key)}[{clash[0]}]", problem)
    table = {code: XidAction.QUARANTINE for code in lists["quarantine"]}
    table.update({code: XidAction.COUNT for code in lists["count"]})
    overrides = xid.section("overrides", None)
    seen: set[int] = set()
    for written, value in overrides.raw.items():
        code = _xid_code(written, overrides.at(written), xid.source)
        if code in seen:
            raise overrides.error(written, f"XID {code} is given twice")
        seen.add(code)
        if value not in _ACTION_VALUES:
            raise overrides.error(written, f"must be one of {_ACTIONS}, got {_show(value)}")
        # An explicit 'ignore' stays in the table, so the decision is visible in status.
        table[code] = XidAction(value)
    return table


def _signals(signals: _Fields) -> Signals:
    d = Signals()
    return Signals(
        ecc_dbe_volatile=signals.boolean("eccDoubleBitVolatile", d.ecc_dbe_volatile),
        row_remap_failure=signals.boolean("rowRemapFailure", d.row_remap_failure),
        retired_pages_pending=signals.boolean("retiredPagesPending", d.retired_pages_pending),
        vanished_gpu=signals.boolean("vanishedGpu", d.vanished_gpu),
        thermal_violation=_threshold(signals, "thermalViolation", "fraction", d.thermal_violation),
        power_violation=_threshold(signals, "powerViolation", "fraction", d.power_violation),
        nvlink_errors=_threshold(signals, "nvlinkErrors", "perSecond", d.nvlink_errors),
        pcie_replays=_threshold(signals, "pcieReplays", "perSecond", d.pcie_replays),
    )


def _threshold(
    signals: _Fields, key: str, unit: str, default: Threshold | None
) -> Threshold | None:
    """A `{unit: n, window: d}` mapping; null or false turns the signal off."""
    raw = signals.raw.get(key, _ABSENT)
    if raw is _ABSENT:
        return default
    if raw is None or raw is False:
        return None
    if not isinstance(raw, dict):
        problem = f"must be {{{unit}: ..., window: ...}}, or null/false to disable"
        raise signals.error(key, f"{problem}, got {_show(raw)}")
    fields = signals.section(key, (unit, "window"))
    if default is None:  # off by default: there is no value to fall back on
        for needed in (unit, "window"):
            if needed not in fields.raw:
                raise fields.error(needed, f"required field is missing ({key} is off by default)")
    value, window = (None, None) if default is None else (default.value, default.window_s)
    high = 1.0 if unit == "fraction" else math.inf
    return Threshold(fields.number(unit, value, 0, high), fields.duration("window", window))


def _limits(limits: _Fields) -> Limits:
    d = Limits()
    fleet = limits.section("fleet", ("maxNodes", "maxPercent"))
    pool = limits.section("pool", ("maxNodes", "maxPercent"))
    return Limits(
        fleet_max_nodes=fleet.integer("maxNodes", d.fleet_max_nodes, minimum=0),
        fleet_max_percent=fleet.number("maxPercent", d.fleet_max_percent, 0, 100, above=True),
        pool_max_nodes=pool.integer("maxNodes", d.pool_max_nodes, minimum=0),
        pool_max_percent=pool.number("maxPercent", d.pool_max_percent, 0, 100, above=True),
        window_s=limits.duration("window", d.window_s),
        count_cordoned=limits.boolean("countCordoned", d.count_cordoned),
    )


def _quota_limits(removed: _Fields) -> QuotaLimits:
    d = QuotaLimits()
    return QuotaLimits(
        max_removed_gpus=removed.integer("gpus", d.max_removed_gpus, minimum=0),
        max_removed_percent=removed.number("percent", d.max_removed_percent, 0, 100),
        window_s=removed.duration("window", d.window_s),
    )


class _Fields:
    """One YAML mapping being read: it knows its path, refuses unknown keys, names fields."""

    def __init__(
        self, data: object, path: str, source: str, allowed: tuple[str, ...] | None
    ) -> None:
        self.path = path
        self.source = source
        if not isinstance(data, dict):
            raise PolicyError(source, path, f"must be a mapping, got {_show(data)}")
        self.raw = cast(dict[object, object], data)
        for key in self.raw:
            if allowed is not None and key not in allowed:
                raise self.error(key, f"unknown field{_did_you_mean(key, allowed)}")

    def at(self, key: object) -> str:
        return f"{self.path}.{key}" if self.path else str(key)

    def error(self, key: object, problem: str) -> PolicyError:
        return PolicyError(self.source, self.at(key), problem)

    def get(self, key: str, default: object = None) -> object:
        if key in self.raw:
            return self.raw[key]
        if default is None:
            raise self.error(key, "required field is missing")
        return default

    def section(self, key: str, allowed: tuple[str, ...] | None) -> _Fields:
        """The mapping under `key`; an absent one reads as empty, so every default applies."""
        return _Fields(self.raw.get(key, {}), self.at(key), self.source, allowed)

    def boolean(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {_show(value)}")
        return value

    def integer(self, key: str, default: int, minimum: int) -> int:
        value = self.get(key, default)
        if not _is_int(value) or value < minimum:
            raise self.error(key, f"must be an integer >= {minimum}, got {_show(value)}")
        return value

    def number(
        self, key: str, default: float | None, low: float, high: float, above: bool = False
    ) -> float:
        """A finite number from `low` (or `above` it) up to `high`; booleans are refused."""
        value = self.get(key, default)
        if (
            _is_number(value)
            and math.isfinite(value)
            and low <= value <= high
            and not (above and value == low)
        ):
            return float(value)
        rule = f"> {low:g}" if above else f">= {low:g}"
        rule += f" and <= {high:g}" if high < math.inf else ""
        raise self.error(key, f"must be a number {rule}, got {_show(value)}")

    def duration(self, key: str, default: float | None) -> float:
        if key not in self.raw and default is not None:
            return default  # already in seconds
        value = self.get(key)
        try:
            return parse_duration(value if isinstance(value, str) else "")
        except ValueError:
            problem = "must be a positive duration such as 500ms, 15s, 10m or 1h"
            raise self.error(key, f"{problem}, got {_show(value)}") from None

    def label_key(self, key: str, default: str) -> str:
        value = self.get(key, default)
        if not isinstance(value, str) or not _is_label_key(value):
            problem = (
                "must be a Kubernetes label key: an optional DNS prefix and '/', then a name of "
                "at most 63 letters, digits, '-', '_', '.', starting and ending alphanumeric"
            )
            raise self.error(key, f"{problem}, got {_show(value)}")
        return value

    def codes(self, key: str) -> list[int]:
        value = self.raw[key]
        if not isinstance(value, list):
            raise self.error(key, f"must be a list of XID codes, got {_show(value)}")
        codes: list[int] = []
        for i, item in enumerate(value):
            code = _xid_code(item, f"{self.at(key)}[{i}]", self.source)
            if code in codes:
                raise self.error(f"{key}[{i}]", f"XID {code} is listed twice")
            codes.append(code)
        return codes


def _xid_code(value: object, path: str, source: str) -> int:
    # YAML gives `79:` as an int key and `"79":` as a string key; both mean XID 79.
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)
    if not _is_int(value) or value < 1:
        raise PolicyError(source, path, f"must be a positive XID code, got {_show(value)}")
    return value


def _is_label_key(value: str) -> bool:
    prefix, slash, name = value.rpartition("/")
    if slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(name) <= 63 and _LABEL_NAME.fullmatch(name) is not None


def _is_int(value: object) -> TypeGuard[int]:
    # YAML 'true' is a bool, and bool is an int in Python: never accept it as a count.
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _did_you_mean(key: object, allowed: tuple[str, ...]) -> str:
    text = str(key)
    same = [name for name in allowed if name.lower() == text.replace("_", "").lower()]
    close = same or difflib.get_close_matches(text, allowed, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f" (allowed: {', '.join(allowed)}){hint}"


def _show(value: object) -> str:
    """A value as the user wrote it in YAML, kept to one short line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return "a mapping" if isinstance(value, dict) else "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def dump_default_policy() -> str:
    """The defaults as a commented YAML document; `parse_policy` reads it back as `Policy()`."""
    p, dur = Policy(), format_duration
    s, lim, q = p.signals, p.limits, p.quota_limits

    def codes(action: XidAction, suffix: str = "") -> str:
        return ", ".join(f"{c}{suffix}" for c in sorted(c for c, a in p.xid.items() if a is action))

    def threshold(t: Threshold | None, unit: str) -> str:
        return "null" if t is None else f"{{{unit}: {_yaml(t.value)}, window: {dur(t.window_s)}}}"

    return f"""\
# gridloop health policy: the defaults. Every key under spec is optional.
apiVersion: {API_VERSION}
kind: {KIND}
metadata: {{name: default}}
spec:
  dryRun: {_yaml(p.dry_run)}  # true: decide and report, change nothing on the cluster
  scrapeInterval: {dur(p.scrape_interval_s)}  # answers older than two intervals are stale
  xid:  # NVIDIA XID codes; a code in neither list is ignored
    quarantine: [{codes(XidAction.QUARANTINE)}]  # reset/reboot class
    count: [{codes(XidAction.COUNT)}]  # application class: only repeats count
    overrides: {{{codes(XidAction.IGNORE, ": ignore")}}}  # code: {"|".join(_ACTION_VALUES)}
    repeat: {{count: {p.xid_repeat_count}, window: {dur(p.xid_repeat_window_s)}}}
  signals:  # null or false turns a threshold off
    eccDoubleBitVolatile: {_yaml(s.ecc_dbe_volatile)}
    rowRemapFailure: {_yaml(s.row_remap_failure)}
    retiredPagesPending: {_yaml(s.retired_pages_pending)}
    vanishedGpu: {_yaml(s.vanished_gpu)}
    thermalViolation: {threshold(s.thermal_violation, "fraction")}
    powerViolation: {threshold(s.power_violation, "fraction")}
    nvlinkErrors: {threshold(s.nvlink_errors, "perSecond")}
    pcieReplays: {threshold(s.pcie_replays, "perSecond")}
  release: {{holdDown: {dur(p.hold_down_s)}}}  # healthy this long before release
  quarantine:
    noExecute: {_yaml(p.taint_no_execute)}  # true also evicts running pods
    drain: {_yaml(p.drain)}
    optOutLabel: {p.opt_out_label}  # nodes with this label are never touched
  limits:  # nodes out at once, and quarantines per window (one more trips the breaker)
    fleet: {{maxNodes: {lim.fleet_max_nodes}, maxPercent: {_yaml(lim.fleet_max_percent)}}}
    pool: {{maxNodes: {lim.pool_max_nodes}, maxPercent: {_yaml(lim.pool_max_percent)}}}
    window: {dur(lim.window_s)}  # the breaker trips at a limit's quarantines in a window
    countCordoned: {_yaml(lim.count_cordoned)}  # nodes cordoned by others count as out
  quotas:  # Kueue GPU quota follows healthy capacity
    enabled: {_yaml(p.rebalance_quotas)}
    maxRemoved: {{gpus: {q.max_removed_gpus}, percent: {_yaml(q.max_removed_percent)}, \
window: {dur(q.window_s)}}}  # per window; restoring is never limited
"""


def _yaml(value: float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(int(value)) if value == int(value) else repr(value)

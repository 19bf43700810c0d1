"""The health policy is validated once, and every mistake names the file and the field."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gridloop.errors import UsageError
from gridloop.health.durations import format_duration, parse_duration
from gridloop.health.policy import Limits, Policy, Signals, Threshold, XidAction
from gridloop.health.policy_loading import (
    PolicyError,
    dump_default_policy,
    load_policy,
    parse_policy,
)

REPO = Path(__file__).parents[2]
SHIPPED = REPO / "policies" / "health.yaml"
SOURCE = "test.yaml"
_MISSING = object()


def policy_doc(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gridloop.io/v1alpha1",
        "kind": "HealthPolicy",
        "metadata": {"name": "default"},
        "spec": spec,
    }


def full_doc() -> dict[str, Any]:
    """A document with every section present, so any field can be changed in place."""
    return policy_doc(
        dryRun=False,
        scrapeInterval="15s",
        xid={
            "quarantine": [48, 79],
            "count": [13, 31],
            "overrides": {79: "ignore"},
            "repeat": {"count": 3, "window": "10m"},
        },
        signals={
            "eccDoubleBitVolatile": True,
            "thermalViolation": {"fraction": 0.5, "window": "5m"},
            "powerViolation": None,
            "nvlinkErrors": {"perSecond": 1, "window": "5m"},
            "pcieReplays": {"perSecond": 10, "window": "5m"},
        },
        release={"holdDown": "10m"},
        quarantine={"noExecute": False, "drain": False, "optOutLabel": "gridloop.io/opt-out"},
        limits={
            "fleet": {"maxNodes": 10, "maxPercent": 10},
            "pool": {"maxNodes": 4, "maxPercent": 25},
            "window": "1h",
        },
    )


def changed(keys: tuple[Any, ...], value: object) -> dict[str, Any]:
    """``full_doc()`` with the field at ``keys`` set to ``value`` (or removed)."""
    doc = full_doc()
    parent = doc
    for key in keys[:-1]:
        parent = parent[key]
    if value is _MISSING:
        del parent[keys[-1]]
    else:
        parent[keys[-1]] = value
    return doc


def error_of(data: object) -> PolicyError:
    with pytest.raises(PolicyError) as caught:
        parse_policy(data, SOURCE)
    return caught.value


def test_shipped_policy_is_the_safe_default() -> None:
    policy = load_policy(SHIPPED)
    assert policy == Policy()
    assert not policy.taint_no_execute and not policy.drain
    assert policy.limits.fleet_max_nodes > 0 and policy.limits.pool_max_percent < 100


def test_every_key_in_the_shipped_policy_has_a_comment_above_it() -> None:
    lines = SHIPPED.read_text(encoding="utf-8").splitlines()
    key_line = re.compile(r"\s*[A-Za-z]+:")
    for i, line in enumerate(lines):
        if key_line.match(line):
            assert lines[i - 1].strip().startswith("#"), f"no comment above {line.strip()!r}"


@pytest.mark.parametrize(
    "phrase",
    [
        "NVIDIA's XID catalogue",
        "reset/reboot class",
        "application class",
        "stops all new quarantines",
        "until a person runs `gridloop health reset-breaker`",
        "changes nothing on the cluster",
    ],
)
def test_shipped_policy_explains_what_it_does(phrase: str) -> None:
    lines = SHIPPED.read_text(encoding="utf-8").splitlines()
    comments = [line.split("#", 1)[1] for line in lines if "#" in line]
    assert phrase.lower() in " ".join(" ".join(comments).split()).lower()


def test_empty_spec_gives_defaults() -> None:
    assert parse_policy(policy_doc(), SOURCE) == Policy()


def test_dumped_defaults_parse_back_to_the_defaults() -> None:
    text = dump_default_policy()
    assert text.startswith("#")
    assert parse_policy(yaml.safe_load(text), SOURCE) == Policy()


def test_every_field_is_read_from_camel_case() -> None:
    doc = policy_doc(
        dryRun=True,
        scrapeInterval="30s",
        xid={
            "quarantine": [79],
            "count": [13],
            "overrides": {"13": "quarantine", 31: "count"},
            "repeat": {"count": 5, "window": "1h"},
        },
        signals={
            "eccDoubleBitVolatile": False,
            "rowRemapFailure": False,
            "retiredPagesPending": False,
            "vanishedGpu": False,
            "thermalViolation": False,
            "powerViolation": {"fraction": 0.25, "window": "1m"},
            "nvlinkErrors": None,
            "pcieReplays": {"perSecond": 0, "window": "500ms"},
        },
        release={"holdDown": "30m"},
        quarantine={"noExecute": True, "drain": True, "optOutLabel": "skip-me"},
        limits={
            "fleet": {"maxNodes": 0, "maxPercent": 2.5},
            "pool": {"maxNodes": 1, "maxPercent": 100},
            "window": "2h",
        },
    )
    assert parse_policy(doc, SOURCE) == Policy(
        xid={79: XidAction.QUARANTINE, 13: XidAction.QUARANTINE, 31: XidAction.COUNT},
        xid_repeat_count=5,
        xid_repeat_window_s=3600.0,
        signals=Signals(
            ecc_dbe_volatile=False,
            row_remap_failure=False,
            retired_pages_pending=False,
            vanished_gpu=False,
            thermal_violation=None,
            power_violation=Threshold(0.25, 60.0),
            nvlink_errors=None,
            pcie_replays=Threshold(0.0, 0.5),
        ),
        hold_down_s=1800.0,
        taint_no_execute=True,
        drain=True,
        opt_out_label="skip-me",
        limits=Limits(
            fleet_max_nodes=0,
            fleet_max_percent=2.5,
            pool_max_nodes=1,
            pool_max_percent=100.0,
            window_s=7200.0,
        ),
        scrape_interval_s=30.0,
        dry_run=True,
    )


def test_override_turns_an_xid_off() -> None:
    policy = parse_policy(policy_doc(xid={"overrides": {79: "ignore"}}), SOURCE)
    assert policy.xid_action(79) is XidAction.IGNORE
    assert policy.xid_action(48) is XidAction.QUARANTINE
    assert policy.xid_action(13) is XidAction.COUNT


@pytest.mark.parametrize(
    ("overrides", "code", "action"),
    [
        ({13: "quarantine"}, 13, XidAction.QUARANTINE),
        ({"13": "quarantine"}, 13, XidAction.QUARANTINE),
        ({79: "count"}, 79, XidAction.COUNT),
        ({63: "quarantine"}, 63, XidAction.QUARANTINE),
        ({"999": "ignore"}, 999, XidAction.IGNORE),
    ],
    ids=["promote", "string-key", "demote", "new-code", "unknown-code"],
)
def test_override_sets_one_code_and_keeps_the_rest(
    overrides: dict[object, str], code: int, action: XidAction
) -> None:
    policy = parse_policy(policy_doc(xid={"overrides": overrides}), SOURCE)
    assert policy.xid_action(code) is action
    assert {c: a for c, a in policy.xid.items() if c != code} == {
        c: a for c, a in Policy().xid.items() if c != code
    }


def test_a_list_replaces_its_default_list_only() -> None:
    policy = parse_policy(policy_doc(xid={"quarantine": [79, "94"]}), SOURCE)
    assert policy.xid_action(79) is XidAction.QUARANTINE
    assert policy.xid_action(94) is XidAction.QUARANTINE
    assert policy.xid_action(48) is XidAction.IGNORE
    assert policy.xid_action(13) is XidAction.COUNT


def test_empty_lists_quarantine_on_no_xid() -> None:
    policy = parse_policy(policy_doc(xid={"quarantine": [], "count": []}), SOURCE)
    assert policy.xid == {}


@pytest.mark.parametrize(
    ("xid", "field", "code"),
    [
        ({"quarantine": [48, 79], "count": [13, 79]}, "spec.xid.count[1]", 79),
        ({"count": [13, 48]}, "spec.xid.count[1]", 48),
        ({"quarantine": [79, 31]}, "spec.xid.quarantine[1]", 31),
        ({"quarantine": [79, "31"], "count": [31]}, "spec.xid.count[0]", 31),
    ],
    ids=["both-given", "count-against-default", "quarantine-against-default", "string-code"],
)
def test_code_in_both_lists_is_rejected(xid: dict[str, Any], field: str, code: int) -> None:
    message = str(error_of(policy_doc(xid=xid)))
    assert message.startswith(f"{SOURCE}: {field}: XID {code} is also in ")
    assert "spec.xid.overrides" in message


@pytest.mark.parametrize(
    ("keys", "value", "field"),
    [
        (("apiVersion",), "v1", "apiVersion"),
        (("kind",), "Policy", "kind"),
        (("spec",), _MISSING, "spec"),
        (("spec",), None, "spec"),
        (("metadata",), "default", "metadata"),
        (("metadata", "name"), "Not_A_Name", "metadata.name"),
        (("spec", "dry_run"), True, "spec.dry_run"),
        (("spec", "dryRun"), "yes please", "spec.dryRun"),
        (("spec", "scrapeInterval"), "5", "spec.scrapeInterval"),
        (("spec", "scrapeInterval"), "-5s", "spec.scrapeInterval"),
        (("spec", "scrapeInterval"), 15, "spec.scrapeInterval"),
        (("spec", "xid"), None, "spec.xid"),
        (("spec", "xid", "quarantine"), "48", "spec.xid.quarantine"),
        (("spec", "xid", "quarantine"), [48, "abc"], "spec.xid.quarantine[1]"),
        (("spec", "xid", "quarantine"), [48, 0], "spec.xid.quarantine[1]"),
        (("spec", "xid", "count"), [13, True], "spec.xid.count[1]"),
        (("spec", "xid", "count"), [13, 13], "spec.xid.count[1]"),
        (("spec", "xid", "overrides", 79), "reboot", "spec.xid.overrides.79"),
        (("spec", "xid", "overrides", "abc"), "ignore", "spec.xid.overrides.abc"),
        (("spec", "xid", "overrides", -3), "ignore", "spec.xid.overrides.-3"),
        (("spec", "xid", "overrides", "79"), "count", "spec.xid.overrides.79"),
        (("spec", "xid", "overrides"), [79], "spec.xid.overrides"),
        (("spec", "xid", "repeat", "count"), 0, "spec.xid.repeat.count"),
        (("spec", "xid", "repeat", "window"), "five minutes", "spec.xid.repeat.window"),
        (("spec", "xid", "repeat", "every"), "1m", "spec.xid.repeat.every"),
        (("spec", "signals", "eccDoubleBitVolatile"), "true", "spec.signals.eccDoubleBitVolatile"),
        (("spec", "signals", "gpuOnFire"), True, "spec.signals.gpuOnFire"),
        (("spec", "signals", "thermalViolation"), True, "spec.signals.thermalViolation"),
        (
            ("spec", "signals", "thermalViolation", "fraction"),
            1.5,
            "spec.signals.thermalViolation.fraction",
        ),
        (
            ("spec", "signals", "thermalViolation", "fraction"),
            float("nan"),
            "spec.signals.thermalViolation.fraction",
        ),
        (
            ("spec", "signals", "thermalViolation", "percent"),
            50,
            "spec.signals.thermalViolation.percent",
        ),
        (
            ("spec", "signals", "powerViolation"),
            {"fraction": 0.5},
            "spec.signals.powerViolation.window",
        ),
        (
            ("spec", "signals", "nvlinkErrors", "perSecond"),
            -1,
            "spec.signals.nvlinkErrors.perSecond",
        ),
        (("spec", "signals", "pcieReplays", "window"), 0, "spec.signals.pcieReplays.window"),
        (
            ("spec", "signals", "pcieReplays", "perSecond"),
            float("inf"),
            "spec.signals.pcieReplays.perSecond",
        ),
        (("spec", "release", "holdDown"), "0s", "spec.release.holdDown"),
        (("spec", "quarantine", "noExecute"), 1, "spec.quarantine.noExecute"),
        (("spec", "quarantine", "optOutLabel"), "-bad", "spec.quarantine.optOutLabel"),
        (("spec", "quarantine", "optOutLabel"), "Gridloop.io/x", "spec.quarantine.optOutLabel"),
        (("spec", "quarantine", "optOutLabel"), "a" * 64, "spec.quarantine.optOutLabel"),
        (("spec", "quarantine", "optOutLabel"), "", "spec.quarantine.optOutLabel"),
        (("spec", "limits", "fleet"), "10", "spec.limits.fleet"),
        (("spec", "limits", "fleet", "maxNodes"), True, "spec.limits.fleet.maxNodes"),
        (("spec", "limits", "fleet", "maxNodes"), -1, "spec.limits.fleet.maxNodes"),
        (("spec", "limits", "fleet", "maxNodes"), 2.5, "spec.limits.fleet.maxNodes"),
        (("spec", "limits", "pool", "maxPercent"), 0, "spec.limits.pool.maxPercent"),
        (("spec", "limits", "pool", "maxPercent"), 150, "spec.limits.pool.maxPercent"),
        (("spec", "limits", "pool", "maxPercent"), "25%", "spec.limits.pool.maxPercent"),
        (("spec", "limits", "window"), "1d", "spec.limits.window"),
    ],
)
def test_every_bad_input_names_its_field(keys: tuple[Any, ...], value: object, field: str) -> None:
    error = error_of(changed(keys, value))
    message = str(error)
    assert message.startswith(f"{SOURCE}: {field}: "), message
    assert "\n" not in message
    assert isinstance(error, UsageError) and error.exit_code == 2


def test_bad_override_says_what_is_allowed() -> None:
    message = str(error_of(changed(("spec", "xid", "overrides", 79), "reboot")))
    assert message == (
        f"{SOURCE}: spec.xid.overrides.79: must be one of quarantine, count, ignore, got 'reboot'"
    )


def test_a_threshold_off_by_default_needs_both_keys() -> None:
    doc = policy_doc(signals={"powerViolation": {"fraction": 0.5}})
    assert str(error_of(doc)).startswith(f"{SOURCE}: spec.signals.powerViolation.window: ")


def test_a_threshold_on_by_default_keeps_its_other_key() -> None:
    doc = policy_doc(signals={"thermalViolation": {"fraction": 0.7}, "nvlinkErrors": {}})
    signals = parse_policy(doc, SOURCE).signals
    assert signals.thermal_violation == Threshold(0.7, 300.0)
    assert signals.nvlink_errors == Signals().nvlink_errors


@pytest.mark.parametrize("off", [None, False])
def test_null_or_false_turns_a_threshold_off(off: object) -> None:
    doc = policy_doc(signals={"thermalViolation": off, "pcieReplays": off})
    signals = parse_policy(doc, SOURCE).signals
    assert signals.thermal_violation is None and signals.pcie_replays is None


@pytest.mark.parametrize(
    ("keys", "right"),
    [
        (("spec", "dry_run"), "dryRun"),
        (("spec", "limits", "fleet", "max_nodes"), "maxNodes"),
        (("spec", "scrapeInterwal"), "scrapeInterval"),
        (("spec", "signals", "pcieReplay"), "pcieReplays"),
    ],
)
def test_unknown_key_suggests_the_right_spelling(keys: tuple[str, ...], right: str) -> None:
    message = str(error_of(changed(keys, 1)))
    assert message.startswith(f"{SOURCE}: {'.'.join(keys)}: unknown field")
    assert message.endswith(f"did you mean {right}?")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("15s", 15.0),
        ("10m", 600.0),
        ("1h", 3600.0),
        ("1.5m", 90.0),
        ("2h", 7200.0),
        ("90s", 90.0),
        ("1ms", 0.001),
    ],
)
def test_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    [
        "-5s",
        "5",
        "five minutes",
        "0s",
        "0ms",
        "0.0h",
        "",
        "1d",
        "15 s",
        " 15s",
        "1h30m",
        "s",
        "1e3s",
    ],
)
def test_bad_durations_are_rejected(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)
    message = str(error_of(policy_doc(scrapeInterval=text)))
    assert message.startswith(f"{SOURCE}: spec.scrapeInterval: must be a positive duration")


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.5, "500ms"), (15, "15s"), (300, "5m"), (600, "10m"), (3600, "1h")]
)
def test_durations_are_written_in_the_largest_whole_unit(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_stale_after_is_two_scrape_intervals() -> None:
    assert parse_policy(policy_doc(scrapeInterval="30s"), SOURCE).stale_after_s == 60.0
    assert Policy().stale_after_s == 2 * Policy().scrape_interval_s


@pytest.mark.parametrize(
    "label",
    ["gridloop.io/health-opt-out", "opt-out", "a", "example.com/A_b.c", "x" * 63, "a.b-c/Z9"],
)
def test_valid_label_keys_are_accepted(label: str) -> None:
    doc = policy_doc(quarantine={"optOutLabel": label})
    assert parse_policy(doc, SOURCE).opt_out_label == label


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("missing", None, "cannot read health policy"),
        ("syntax", "spec: [unclosed\n", "invalid YAML"),
        ("duplicate-key", "apiVersion: a\napiVersion: b\n", "duplicate key 'apiVersion'"),
        ("duplicate-nested", "spec:\n  limits: {}\n  limits: {}\n", "duplicate key 'limits'"),
        ("empty", "", "must be a mapping, got null"),
        ("not-utf8", b"\xff\xfe", "cannot read health policy"),
    ],
)
def test_unreadable_files_are_policy_errors(
    tmp_path: Path, name: str, text: str | bytes | None, problem: str
) -> None:
    path = tmp_path / f"{name}.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text, encoding="utf-8")
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert problem in message
    assert "\n" not in message


def test_load_names_the_file_and_the_field(tmp_path: Path) -> None:
    path = tmp_path / "health.yaml"
    text = SHIPPED.read_text(encoding="utf-8").replace("overrides: {}", "overrides: {79: reboot}")
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PolicyError) as caught:
        load_policy(str(path))
    assert str(caught.value) == (
        f"{path}: spec.xid.overrides.79: must be one of quarantine, count, ignore, got 'reboot'"
    )

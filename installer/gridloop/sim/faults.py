"""The faults in force on the simulated fleet, as one immutable value.

A ``FaultSet`` maps (node, GPU index or None for every GPU of the node) to a ``Fault``.
``inject`` and ``clear`` return a new set; the command line saves it as JSON and the
exporter server re-reads it, so the two processes share nothing but a file.

Rate faults (thermal throttling, NVLink errors, PCIe replays) are ``Ramp``s that start
growing when injected, not from some earlier epoch: Prometheus must see the counter rise
at the injected rate from then on, never a jump. Changing a rate folds what has built up
into the ramp's base first, so a counter never falls while a fault is in force. Clearing a
fault is a GPU reset: its counters return to their healthy value of 0, which Prometheus
reads as a counter reset and which adds no spurious increase.

Pure: no files, no clock (callers pass ``now``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from gridloop.errors import UsageError
from gridloop.sim.injections import FAULT_FLAGS, Injection, check_target, show_value, validate

FaultKey = tuple[str, int | None]
THERMAL_US_PER_S = 1_000_000.0  # a throttled GPU accrues one second of violation per second
JSON_VERSION = 1


@dataclass(frozen=True)
class Ramp:
    """A counter growing at ``rate`` per second since ``since``, on top of ``base``."""

    base: float = 0.0
    rate: float = 0.0
    since: float = 0.0

    def at(self, now: float) -> float:
        if not self.rate:
            return self.base
        return self.base + self.rate * max(0.0, now - self.since)

    def retuned(self, rate: float, now: float) -> Ramp:
        return Ramp(self.at(now), rate, now)


STILL = Ramp()


@dataclass(frozen=True)
class Fault:
    """Everything injected into one GPU, or into every GPU of a node when ``gpu`` is None."""

    node: str
    gpu: int | None = None
    xid: int = 0  # the last XID code; 0 is none
    ecc_dbe_count: int = 0  # double-bit errors added, one per injection
    row_remap_failure: bool = False
    row_remap_pending: bool = False
    retired_pending: bool = False
    temp: float | None = None  # overrides the GPU temperature
    vanish: bool = False  # the GPU's series disappear
    exporter_down: bool = False  # node-level: the scrape fails with 503
    thermal: Ramp = STILL  # microseconds of thermal violation
    nvlink: Ramp = STILL  # NVLink CRC flit errors
    pcie: Ramp = STILL  # PCIe replays

    @property
    def key(self) -> FaultKey:
        return (self.node, self.gpu)

    @property
    def ecc_dbe(self) -> bool:
        return self.ecc_dbe_count > 0

    @property
    def thermal_violation(self) -> bool:
        return self.thermal.rate > 0

    @property
    def nvlink_errors_per_s(self) -> float:
        return self.nvlink.rate

    @property
    def pcie_replays_per_s(self) -> float:
        return self.pcie.rate

    def summary(self) -> dict[str, int | float | bool]:
        """The faults in force, keyed by their flag names: ``{"xid": 79, "vanish": True}``."""
        values: dict[str, int | float | bool | None] = {
            "xid": self.xid or None,
            "ecc-dbe": self.ecc_dbe_count or None,
            "row-remap-failure": self.row_remap_failure,
            "row-remap-pending": self.row_remap_pending,
            "retired-pending": self.retired_pending,
            "temp": self.temp,
            "vanish": self.vanish,
            "exporter-down": self.exporter_down,
            "thermal-violation": self.thermal_violation,
            "nvlink-errors": self.nvlink_errors_per_s or None,
            "pcie-replays": self.pcie_replays_per_s or None,
        }
        return {k: v for k, v in values.items() if v is not None and v is not False}

    def describe(self) -> str:
        """One line for a table: ``xid 79, ecc-dbe 1, nvlink-errors 2/s``."""
        fields = {flag.removeprefix("--"): field for field, flag in FAULT_FLAGS}
        parts = []
        for name, value in self.summary().items():
            shown = name if value is True else f"{name} {show_value(fields[name], value)}"
            parts.append(shown)
        return ", ".join(parts)


@dataclass(frozen=True)
class GpuEffect:
    """What the node-wide and per-GPU faults together do to one GPU at one instant."""

    xid: int
    ecc_dbe: int
    row_remap_failure: bool
    row_remap_pending: bool
    retired_pending: bool
    temp: float | None
    vanish: bool
    thermal_us: float
    nvlink_errors: float
    pcie_replays: float


def _effect(faults: list[Fault], now: float) -> GpuEffect:
    """Merge node-wide then per-GPU faults: the more specific xid and temp win."""
    xid = next((f.xid for f in reversed(faults) if f.xid), 0)
    temp = next((f.temp for f in reversed(faults) if f.temp is not None), None)
    return GpuEffect(
        xid=xid,
        ecc_dbe=sum(f.ecc_dbe_count for f in faults),
        row_remap_failure=any(f.row_remap_failure for f in faults),
        row_remap_pending=any(f.row_remap_pending for f in faults),
        retired_pending=any(f.retired_pending for f in faults),
        temp=temp,
        vanish=any(f.vanish for f in faults),
        thermal_us=sum(f.thermal.at(now) for f in faults),
        nvlink_errors=sum(f.nvlink.at(now) for f in faults),
        pcie_replays=sum(f.pcie.at(now) for f in faults),
    )


def _applied(fault: Fault, inj: Injection, now: float) -> Fault:
    def ramp(current: Ramp, rate: float | None) -> Ramp:
        return current if rate is None or rate == current.rate else current.retuned(rate, now)

    return replace(
        fault,
        xid=inj.xid if inj.xid is not None else fault.xid,
        ecc_dbe_count=fault.ecc_dbe_count + (1 if inj.ecc_dbe else 0),
        row_remap_failure=fault.row_remap_failure or inj.row_remap_failure,
        row_remap_pending=fault.row_remap_pending or inj.row_remap_pending,
        retired_pending=fault.retired_pending or inj.retired_pending,
        temp=inj.temp if inj.temp is not None else fault.temp,
        vanish=fault.vanish or inj.vanish,
        exporter_down=fault.exporter_down or inj.exporter_down,
        thermal=ramp(fault.thermal, THERMAL_US_PER_S if inj.thermal_violation else None),
        nvlink=ramp(fault.nvlink, inj.nvlink_errors_per_s),
        pcie=ramp(fault.pcie, inj.pcie_replays_per_s),
    )


def _sort_key(key: FaultKey) -> tuple[str, int]:
    return (key[0], -1 if key[1] is None else key[1])


class FaultSet(Mapping[FaultKey, Fault]):
    """An immutable mapping (node, gpu or None) -> Fault, in node then GPU order."""

    __slots__ = ("_faults",)

    def __init__(self, faults: Mapping[FaultKey, Fault] | None = None) -> None:
        items = dict(faults or {})
        self._faults = {k: items[k] for k in sorted(items, key=_sort_key)}

    def __getitem__(self, key: FaultKey) -> Fault:
        return self._faults[key]

    def __iter__(self) -> Iterator[FaultKey]:
        return iter(self._faults)

    def __len__(self) -> int:
        return len(self._faults)

    def __repr__(self) -> str:
        return f"FaultSet({list(self._faults.values())!r})"

    def inject(self, gpus_by_node: Mapping[str, int], injection: Injection, now: float) -> FaultSet:
        """A new set with ``injection`` added; UsageError naming the flag if it is invalid."""
        validate(injection, gpus_by_node)
        key = (injection.node, injection.gpu)
        current = self._faults.get(key) or Fault(node=injection.node, gpu=injection.gpu)
        return FaultSet({**self._faults, key: _applied(current, injection, now)})

    def matching(self, node: str | None = None, gpu: int | None = None) -> list[Fault]:
        """The faults ``clear(node, gpu)`` removes: all, a node's, or one GPU's own."""
        if node is None:
            check_target({}, node, gpu)  # refuses a GPU index without a node
        return [
            f
            for f in self._faults.values()
            if node is None or (f.node == node and (gpu is None or f.gpu == gpu))
        ]

    def clear(self, node: str | None = None, gpu: int | None = None) -> FaultSet:
        """A new set without ``matching(node, gpu)``; node-wide faults stay when a GPU is named."""
        gone = {f.key for f in self.matching(node, gpu)}
        return FaultSet({k: f for k, f in self._faults.items() if k not in gone})

    def exporter_down(self, node: str) -> bool:
        fault = self._faults.get((node, None))
        return fault is not None and fault.exporter_down

    def effect(self, node: str, gpu: int, now: float) -> GpuEffect | None:
        """The faults acting on one GPU at ``now``, or None (the fast path) when there are none."""
        found = [f for f in (self._faults.get((node, None)), self._faults.get((node, gpu))) if f]
        return _effect(found, now) if found else None

    def to_json(self) -> str:
        return json.dumps(
            {"version": JSON_VERSION, "faults": [_encode(f) for f in self._faults.values()]},
            indent=2,
        )

    @classmethod
    def from_json(cls, text: str, source: str = "faults file") -> FaultSet:
        """Parse ``to_json`` output; anything else is a one-line UsageError naming ``source``."""
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("version") != JSON_VERSION:
                raise ValueError(f"expected an object with version {JSON_VERSION}")
            faults = [_decode(raw) for raw in data["faults"]]
        except (ValueError, KeyError, TypeError) as err:
            raise UsageError(f"{source}: not a gridloop faults file: {err}") from err
        return cls({f.key: f for f in faults})


_RAMPS = ("thermal", "nvlink", "pcie")
_TYPES: dict[str, tuple[type, ...]] = {
    "node": (str,),
    "gpu": (int, type(None)),
    "xid": (int,),
    "ecc_dbe_count": (int,),
    "row_remap_failure": (bool,),
    "row_remap_pending": (bool,),
    "retired_pending": (bool,),
    "temp": (int, float, type(None)),
    "vanish": (bool,),
    "exporter_down": (bool,),
}


def _encode(fault: Fault) -> dict[str, Any]:
    """Only the fields that differ from a fresh Fault: the file stays readable by eye."""
    blank = Fault(node=fault.node, gpu=fault.gpu)
    out: dict[str, Any] = {"node": fault.node, "gpu": fault.gpu}
    for name in (*_TYPES, *_RAMPS):
        value = getattr(fault, name)
        if value != getattr(blank, name):
            out[name] = vars(value) if isinstance(value, Ramp) else value
    return out


def _decode(raw: object) -> Fault:
    if not isinstance(raw, dict):
        raise ValueError(f"a fault must be an object, got {raw!r}")
    unknown = set(raw) - set(_TYPES) - set(_RAMPS)
    if unknown:
        raise ValueError(f"unknown fault field {sorted(unknown)[0]!r}")
    fields: dict[str, Any] = {}
    for name, value in raw.items():
        if name in _RAMPS:
            fields[name] = Ramp(**{k: float(v) for k, v in dict(value).items()})
        elif isinstance(value, bool) and bool not in _TYPES[name]:
            raise ValueError(f"{name}: expected a number, got {value!r}")
        elif not isinstance(value, _TYPES[name]):
            raise ValueError(f"{name}: unexpected value {value!r}")
        elif name == "temp" and isinstance(value, int | float):
            fields[name] = float(value)
        else:
            fields[name] = value
    if "node" not in fields:
        raise ValueError("a fault without a node")
    return Fault(**fields)

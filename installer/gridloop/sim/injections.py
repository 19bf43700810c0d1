"""What one `gridloop sim inject` asks for, and the checks it must pass first.

An ``Injection`` is the request as plain data (node, optional GPU, the faults to add); a
``Fault`` (in ``faults.py``) is what is in force afterwards. Keeping them apart lets the
command line, tests and any future API build the same request and get the same checks.

Every refusal is a ``UsageError`` whose one line starts with the flag at fault
(``--gpu 9: node us-east-h100-000 has GPUs 0-7``), because a person typed it. Flag names
live here, once. Pure: no files, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from gridloop.errors import UsageError

XID_MIN, XID_MAX = 1, 999
TEMP_MAX_C = 200.0  # far above any real shutdown temperature, below nonsense

# Every fault an injection can carry: (field, flag). The flag names are also the fault
# names shown by `gridloop sim list` and used as keys of `metrics.FAULT_METRICS`.
FAULT_FLAGS: tuple[tuple[str, str], ...] = (
    ("xid", "--xid"),
    ("ecc_dbe", "--ecc-dbe"),
    ("row_remap_failure", "--row-remap-failure"),
    ("row_remap_pending", "--row-remap-pending"),
    ("retired_pending", "--retired-pending"),
    ("temp", "--temp"),
    ("vanish", "--vanish"),
    ("exporter_down", "--exporter-down"),
    ("thermal_violation", "--thermal-violation"),
    ("nvlink_errors_per_s", "--nvlink-errors"),
    ("pcie_replays_per_s", "--pcie-replays"),
)


@dataclass(frozen=True)
class Injection:
    """Faults to add to one GPU of a node, or to every GPU of it when ``gpu`` is None.

    ``None`` and ``False`` mean "leave as is"; a rate of 0 stops a running rate fault.
    """

    node: str
    gpu: int | None = None
    xid: int | None = None
    ecc_dbe: bool = False
    row_remap_failure: bool = False
    row_remap_pending: bool = False
    retired_pending: bool = False
    temp: float | None = None
    vanish: bool = False
    exporter_down: bool = False
    thermal_violation: bool = False
    nvlink_errors_per_s: float | None = None
    pcie_replays_per_s: float | None = None

    def changes(self) -> list[str]:
        """Each requested fault as ``<name>[ <value>]``, in flag order: ``xid 79``."""
        out: list[str] = []
        for field, flag in FAULT_FLAGS:
            value = getattr(self, field)
            if value is None or value is False:
                continue
            name = flag.removeprefix("--")
            out.append(name if value is True else f"{name} {show_value(field, value)}")
        return out

    def target(self) -> str:
        return target_name(self.node, self.gpu)


def target_name(node: str, gpu: int | None) -> str:
    """How change lines name a GPU, or a whole node."""
    return f"{node} GPU {gpu}" if gpu is not None else f"{node} (all GPUs)"


def show_value(field: str, value: object) -> str:
    """A fault value as a person would type it back: ``95``, ``2.5/s``."""
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return f"{text}/s" if field.endswith("_per_s") else text


def check_target(gpus_by_node: Mapping[str, int], node: str | None, gpu: int | None) -> None:
    """The node exists in the fleet and the GPU index is one of its GPUs."""
    if node is None:
        if gpu is not None:
            raise UsageError(f"--gpu {gpu}: needs --node to say which node's GPU")
        return
    if node not in gpus_by_node:
        example = next(iter(gpus_by_node), None)
        hint = f" (e.g. {example})" if example else " (the fleet has no nodes)"
        raise UsageError(f"--node {node}: no such node in the fleet{hint}")
    count = gpus_by_node[node]
    if gpu is not None and not 0 <= gpu < count:
        raise UsageError(f"--gpu {gpu}: node {node} has GPUs 0-{count - 1}")


def validate(injection: Injection, gpus_by_node: Mapping[str, int]) -> None:
    """Refuse an injection that names no fault, a bad target or an impossible value."""
    check_target(gpus_by_node, injection.node, injection.gpu)
    if not injection.changes():
        flags = ", ".join(flag for _, flag in FAULT_FLAGS)
        raise UsageError(f"--node {injection.node}: nothing to inject; give one of {flags}")
    xid = injection.xid
    if xid is not None and not XID_MIN <= xid <= XID_MAX:
        raise UsageError(f"--xid {xid}: must be an XID code from {XID_MIN} to {XID_MAX}")
    temp = injection.temp
    if temp is not None and not (math.isfinite(temp) and 0.0 <= temp <= TEMP_MAX_C):
        raise UsageError(f"--temp {temp:g}: must be a temperature from 0 to {TEMP_MAX_C:g} C")
    for field, flag in (
        ("nvlink_errors_per_s", "--nvlink-errors"),
        ("pcie_replays_per_s", "--pcie-replays"),
    ):
        rate = getattr(injection, field)
        if rate is not None and not (math.isfinite(rate) and rate >= 0.0):
            raise UsageError(f"{flag} {rate:g}: must be a non-negative rate per second")
    if injection.exporter_down and injection.gpu is not None:
        raise UsageError(
            f"--exporter-down: takes down the whole node's exporter; drop --gpu {injection.gpu}"
        )

"""GPU fleet health: every GPU's vitals and faults, per site, pool and node.

DCGM series are selected by the dashboard's site, pool and node variables. dcgm-exporter
has spelt its host label both ``Hostname`` and ``hostname`` over its releases, so every
selector asks for both spellings and joins them, and ``label_replace`` copies whichever
is present into ``host`` for the legends. ``site`` and ``pool`` are target labels the
scrape config adds from the node's ``gridloop.io/site`` and ``gridloop.io/pool`` labels;
where they are missing, the default (All) still matches.

Faults are drawn as the ten worst GPUs (``topk``) so a fleet of thousands stays readable
and a panel is never blank merely because nothing is broken.
"""

from __future__ import annotations

from gridloop import dcgm
from gridloop.dashboards.panels import RATE, Board, Panel, graph, q, single

UID = "gridloop-gpu-fleet-health"
FILTER = 'site=~"$site",pool=~"$pool"'
GPU_LEGEND = "{{host}} GPU {{gpu}}"
EXPORTER_JOB = "dcgm-exporter"
TOP = 10


def either_host(metric: str, range_fn: str = "") -> str:
    """``metric`` under both host spellings; with ``range_fn`` (e.g. ``rate``), over
    ``$__rate_interval``."""

    def one(label: str) -> str:
        selector = f'{metric}{{{label}=~"$node",{FILTER}}}'
        return f"{range_fn}({selector}[{RATE}])" if range_fn else selector

    return f"({one('Hostname')} or {one('hostname')})"


def per_gpu(metric: str, range_fn: str = "") -> str:
    """``either_host`` with the host copied into a ``host`` label for legends."""
    inner = either_host(metric, range_fn)
    hostname = f'label_replace({inner}, "host", "$1", "Hostname", "(.+)")'
    return f'label_replace({hostname}, "host", "$1", "hostname", "(.+)")'


def _worst(metric: str, range_fn: str = "") -> str:
    return f"topk({TOP}, {per_gpu(metric, range_fn)})"


def _ecc(title: str, what: str, double_bit: str, single_bit: str) -> Panel:
    return graph(
        title,
        f"{what}; the {TOP} GPUs with the most.",
        "none",
        [
            q(_worst(double_bit), f"{GPU_LEGEND} double-bit"),
            q(_worst(single_bit), f"{GPU_LEGEND} single-bit"),
        ],
    )


def build() -> Board:
    board = (
        Board(
            UID,
            "gridloop / GPU fleet health",
            "Every GPU's temperature, power, utilisation, memory and faults (DCGM), per "
            "site, pool and node, with the GPU health service's quarantines and breaker.",
            ["gpu", "dcgm"],
        )
        .variable(
            "site",
            "Site",
            f'label_values(up{{job="{EXPORTER_JOB}"}}, site)',
            "The fleet's sites (gridloop.io/site).",
        )
        .variable(
            "pool",
            "Pool",
            f'label_values(up{{job="{EXPORTER_JOB}",site=~"$site"}}, pool)',
            "The site's GPU pools (gridloop.io/pool).",
        )
        .variable(
            "node",
            "Node",
            f'label_values(up{{job="{EXPORTER_JOB}",{FILTER}}}, node)',
            "Nodes with a DCGM exporter.",
        )
        .annotation(
            "quarantines",
            "changes(gridloop_health_quarantined_nodes[1m]) > 0",
            "red",
            "quarantined nodes changed",
        )
    )
    board.row("Fleet").add(
        single(
            "GPUs reporting",
            "GPUs with a current DCGM sample.",
            q(f"count({either_host(dcgm.GPU_TEMP)})", instant=True),
        ),
        single(
            "Exporters down",
            "DCGM exporters Prometheus cannot scrape: their GPUs are unseen.",
            q(
                f'sum(1 - up{{job="{EXPORTER_JOB}",{FILTER},node=~"$node"}})',
                instant=True,
            ),
        ),
        single(
            "Nodes quarantined",
            "Nodes the GPU health service has taken out (taint and cordon).",
            q("max(gridloop_health_quarantined_nodes)", instant=True),
        ),
        single(
            "Circuit breaker",
            "Tripped: no new quarantines until `gridloop health reset-breaker`.",
            q("max(gridloop_health_breaker_tripped)", instant=True),
            mapping={"0": "closed", "1": "TRIPPED"},
        ),
    )
    board.row("Per GPU").add(
        graph(
            "Temperature",
            "GPU die temperature.",
            "celsius",
            [q(per_gpu(dcgm.GPU_TEMP), GPU_LEGEND)],
        ),
        graph("Power", "Power draw.", "watt", [q(per_gpu(dcgm.POWER_USAGE), GPU_LEGEND)]),
        graph(
            "Utilisation",
            "Time the GPU was busy.",
            "percent",
            [q(per_gpu(dcgm.GPU_UTIL), GPU_LEGEND)],
        ),
        graph(
            "Framebuffer used",
            "GPU memory in use, of used + free.",
            "percentunit",
            [
                q(
                    f"{per_gpu(dcgm.FB_USED)}"
                    f" / ({per_gpu(dcgm.FB_USED)} + {per_gpu(dcgm.FB_FREE)})",
                    GPU_LEGEND,
                )
            ],
        ),
    )
    board.row("Faults").add(
        graph(
            "XID errors",
            "The last XID each GPU reported (0: none). Reset-class XIDs (79, 94, ...) "
            "quarantine the node.",
            "none",
            [q(f"{per_gpu(dcgm.XID_ERRORS)} != 0", GPU_LEGEND)],
        ),
        _ecc(
            "ECC errors, volatile (since boot)",
            "Single-bit (corrected) and double-bit (uncorrectable) ECC errors since the "
            "last reboot",
            dcgm.ECC_DBE_VOL,
            dcgm.ECC_SBE_VOL,
        ),
        _ecc(
            "ECC errors, aggregate (lifetime)",
            "ECC errors over the GPU's lifetime",
            dcgm.ECC_DBE_AGG,
            dcgm.ECC_SBE_AGG,
        ),
        graph(
            "Row remapping",
            "GPUs with a remap pending (needs a reset) or failed (needs replacing), and "
            "the GPUs with the most remapped rows.",
            "none",
            [
                q(f"sum({either_host(dcgm.ROW_REMAP_PENDING)})", "GPUs with a remap pending"),
                q(f"sum({either_host(dcgm.ROW_REMAP_FAILURE)})", "GPUs with a failed remap"),
                q(_worst(dcgm.UNCORRECTABLE_REMAPPED_ROWS), f"{GPU_LEGEND} uncorrectable rows"),
            ],
        ),
        graph(
            "NVLink errors",
            f"NVLink CRC (flow control and data), replay and recovery errors per second; "
            f"the {TOP} worst GPUs.",
            "ops",
            [
                q(_worst(dcgm.NVLINK_CRC_FLIT, "rate"), f"{GPU_LEGEND} CRC flit"),
                q(_worst(dcgm.NVLINK_CRC_DATA, "rate"), f"{GPU_LEGEND} CRC data"),
                q(_worst(dcgm.NVLINK_REPLAY, "rate"), f"{GPU_LEGEND} replay"),
                q(_worst(dcgm.NVLINK_RECOVERY, "rate"), f"{GPU_LEGEND} recovery"),
            ],
        ),
        graph(
            "PCIe replays",
            f"PCIe retries per second; the {TOP} worst GPUs.",
            "ops",
            [q(_worst(dcgm.PCIE_REPLAY, "rate"), GPU_LEGEND)],
        ),
    )
    board.row("Quarantine").add(
        graph(
            "Nodes quarantined and breaker",
            "Nodes quarantined by the GPU health service, and its circuit breaker (1: tripped).",
            "none",
            [
                q("max(gridloop_health_quarantined_nodes)", "quarantined nodes"),
                q("max(gridloop_health_breaker_tripped)", "breaker tripped"),
            ],
            width=24,
        ),
    )
    return board

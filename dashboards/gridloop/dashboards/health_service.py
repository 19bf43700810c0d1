"""Health service: what the GPU health service decided, how fast, and on what data.

Its own metrics (``gridloop_health_*``, health/gridloop/health/metrics.py): cycles and the
decisions in them, cycle time by phase, how old the DCGM data it read was, actions by type
and outcome (``planned`` is what dry-run would have done), leadership.
"""

from __future__ import annotations

from gridloop.dashboards.panels import RATE, Board, graph, q, quantiles, single

UID = "gridloop-health-service"
CYCLES = f"sum(rate(gridloop_health_cycle_seconds_count[{RATE}]))"


def build() -> Board:
    board = Board(
        UID,
        "gridloop / Health service",
        "The GPU health service: decisions per cycle, cycle time, Prometheus staleness, "
        "actions by type and outcome, dry-run, leadership.",
        ["gpu", "health"],
    )
    board.row("Now").add(
        single(
            "Leading replica",
            "Replicas holding the Lease (exactly one should).",
            q("sum(gridloop_health_leader)", instant=True),
        ),
        single(
            "Dry-run",
            "1: the service decides and publishes but changes nothing.",
            q("max(gridloop_health_dry_run)", instant=True),
            mapping={"0": "off", "1": "DRY-RUN"},
        ),
        single(
            "DCGM data age",
            "Age of the newest DCGM sample the last cycle read (-1: none).",
            q("max(gridloop_health_prometheus_staleness_seconds)", instant=True),
            unit="s",
        ),
        single(
            "Nodes quarantined",
            "Nodes the service has taken out.",
            q("max(gridloop_health_quarantined_nodes)", instant=True),
        ),
    )
    board.row("Cycles").add(
        graph(
            "Decisions per cycle",
            "Actions planned per cycle, by type (cycles per second for scale).",
            "none",
            [
                q(
                    f"sum by (action) (rate(gridloop_health_actions_total[{RATE}])) "
                    f"/ scalar({CYCLES})",
                    "{{action}}",
                ),
                q(CYCLES, "cycles per second"),
            ],
        ),
        graph(
            "Cycle time",
            "Wall time of one cycle, and the 90th percentile of each phase (read, plan, "
            "act, quota).",
            "s",
            [
                *quantiles("gridloop_health_cycle_seconds", "job", "", "cycle"),
                q(
                    "histogram_quantile(0.9, sum by (le, phase) "
                    f"(rate(gridloop_health_cycle_phase_seconds_bucket[{RATE}])))",
                    "{{phase}} p90",
                ),
            ],
        ),
        graph(
            "Prometheus staleness",
            "Age of the newest DCGM sample each cycle read: past two scrape intervals the "
            "service holds back.",
            "s",
            [q("max(gridloop_health_prometheus_staleness_seconds)", "newest sample age")],
        ),
        graph(
            "Actions by type",
            "Node actions per second, by type and outcome (applied, planned, failed).",
            "ops",
            [
                q(
                    f"sum by (action, outcome) (rate(gridloop_health_actions_total[{RATE}]))",
                    "{{action}} {{outcome}}",
                )
            ],
        ),
        graph(
            "Dry-run: what would have been done",
            "Node actions planned but not applied (dry-run), in total. Holds and warnings "
            "are never applied, so they are left out.",
            "none",
            [
                q(
                    "sum by (action) (gridloop_health_actions_total"
                    '{outcome="planned",action!~"Hold|Warn"})',
                    "{{action}}",
                ),
                q("max(gridloop_health_dry_run)", "dry-run on"),
            ],
            width=24,
        ),
    )
    return board

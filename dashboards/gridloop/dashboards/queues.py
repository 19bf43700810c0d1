"""Queues: Kueue's ClusterQueues per flavor, and the GPU quota gridloop moved.

Kueue's own metrics (``kueue_*``, from its controller; the per-flavor quota and usage
gauges need ``metrics.enableClusterQueueResources`` in Kueue's configuration) beside the
health service's view of the same quota (``gridloop_health_quota_gpus``): what each team
was configured with, what the rebalancer set it to, and when it did (an annotation).
"""

from __future__ import annotations

from gridloop import names
from gridloop.dashboards.panels import RATE, Board, graph, q, quantiles

UID = "gridloop-queues"
GPU = f'resource="{names.GPU_RESOURCE}"'
CQ = 'cluster_queue=~"$cluster_queue"'
FLAVOR = 'flavor=~"$flavor"'


def build() -> Board:
    board = (
        Board(
            UID,
            "gridloop / Queues",
            "Kueue ClusterQueues per flavor: GPU quota against usage, pending work, "
            "admission wait, admissions and evictions, and the quota changes gridloop's "
            "rebalancer made as healthy GPUs came and went.",
            ["kueue", "queues"],
        )
        .variable(
            "cluster_queue",
            "ClusterQueue",
            "label_values(kueue_pending_workloads, cluster_queue)",
            "Kueue ClusterQueues.",
        )
        .variable(
            "flavor",
            "Flavor",
            f"label_values(kueue_cluster_queue_nominal_quota{{{CQ}}}, flavor)",
            "ResourceFlavors (one per site and pool).",
        )
        .annotation(
            "quota changes",
            f'changes(gridloop_health_quota_gpus{{kind="nominal",{CQ},{FLAVOR}}}[1m]) > 0',
            "orange",
            "GPU quota of {{cluster_queue}} in {{flavor}} changed",
        )
    )
    board.row("Quota").add(
        graph(
            "GPU quota vs usage",
            "Kueue's nominal GPU quota and the GPUs admitted workloads use, per "
            "ClusterQueue and flavor.",
            "none",
            [
                q(
                    f"kueue_cluster_queue_nominal_quota{{{GPU},{CQ},{FLAVOR}}}",
                    "{{cluster_queue}} {{flavor}} quota",
                ),
                q(
                    f"kueue_cluster_queue_resource_usage{{{GPU},{CQ},{FLAVOR}}}",
                    "{{cluster_queue}} {{flavor}} in use",
                ),
            ],
        ),
        graph(
            "Quota set by gridloop",
            "The GPU quota the health service's rebalancer set (nominal) against what the "
            "queue was configured with, and the healthy GPUs behind each flavor.",
            "none",
            [
                q(
                    f"gridloop_health_quota_gpus{{{CQ},{FLAVOR}}}",
                    "{{cluster_queue}} {{flavor}} {{kind}}",
                ),
                q(
                    f'gridloop_health_flavor_gpus{{{FLAVOR},state="healthy"}}',
                    "{{flavor}} healthy GPUs",
                ),
            ],
        ),
        graph(
            "Quota changes by the rebalancer",
            "GPU quota lowered, restored, or a decrease capped by the window limit.",
            "none",
            [
                q(
                    "sum by (change, outcome) "
                    f"(increase(gridloop_health_quota_changes_total[{RATE}]))",
                    "{{change}} ({{outcome}})",
                )
            ],
            width=24,
        ),
    )
    board.row("Workloads").add(
        graph(
            "Pending workloads",
            "Workloads waiting for quota: active (Kueue keeps trying) or inadmissible.",
            "none",
            [
                q(
                    f"sum by (cluster_queue, status) (kueue_pending_workloads{{{CQ}}})",
                    "{{cluster_queue}} {{status}}",
                )
            ],
        ),
        graph(
            "Admission wait time",
            "From a Workload's creation to its admission.",
            "s",
            quantiles(
                "kueue_admission_wait_time_seconds", "cluster_queue", CQ, "{{cluster_queue}}"
            ),
        ),
        graph(
            "Admitted",
            "Workloads admitted per second.",
            "ops",
            [
                q(
                    "sum by (cluster_queue) "
                    f"(rate(kueue_admitted_workloads_total{{{CQ}}}[{RATE}]))",
                    "{{cluster_queue}}",
                )
            ],
        ),
        graph(
            "Evicted",
            "Workloads evicted per second, by reason (preempted, ClusterQueue stopped, ...).",
            "ops",
            [
                q(
                    f"sum by (cluster_queue, reason) "
                    f"(rate(kueue_evicted_workloads_total{{{CQ}}}[{RATE}]))",
                    "{{cluster_queue}} {{reason}}",
                )
            ],
        ),
    )
    return board

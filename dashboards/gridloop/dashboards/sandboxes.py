"""Sandboxes: agent-sandbox warm pools against claims, claim-to-ready time, runtimes.

agent-sandbox's controller metrics (``agent_sandbox_*``, ``agent_sandboxes``) and
kube-state-metrics' ``kube_pod_runtimeclass_name_info`` for the sandbox pods' runtime
class (gVisor, Kata).
"""

from __future__ import annotations

from gridloop.dashboards.panels import RATE, Board, graph, q, quantiles

UID = "gridloop-sandboxes"
NS = 'namespace=~"$namespace"'


def build() -> Board:
    board = Board(
        UID,
        "gridloop / Sandboxes",
        "Agent sandboxes: warm pool size against claims, claim-to-ready latency, sandboxes "
        "by runtime class.",
        ["sandboxes", "agents"],
    ).variable(
        "namespace",
        "Namespace",
        "label_values(agent_sandbox_warmpool_size, namespace)",
        "Sandbox namespaces.",
    )
    board.row("Warm pools").add(
        graph(
            "Warm pool size vs claims",
            "Sandboxes waiting in each warm pool, by status, and the sandboxes claimed "
            "(warm: taken from a pool; cold: created on demand).",
            "none",
            [
                q(
                    f"sum by (warmpool_name, sandbox_status) (agent_sandbox_warmpool_size{{{NS}}})",
                    "{{warmpool_name}} {{sandbox_status}}",
                ),
                q(
                    f"sum by (launch_type) (agent_sandboxes{{{NS}}})",
                    "claimed ({{launch_type}})",
                ),
            ],
        ),
        graph(
            "Claims",
            "SandboxClaims created per second, warm or cold.",
            "ops",
            [
                q(
                    f"sum by (launch_type) "
                    f"(rate(agent_sandbox_claim_creation_total{{{NS}}}[{RATE}]))",
                    "{{launch_type}}",
                )
            ],
        ),
        graph(
            "Claim to ready",
            "From a SandboxClaim's creation to its pod Ready.",
            "ms",
            quantiles(
                "agent_sandbox_claim_startup_latency_ms", "launch_type", "", "{{launch_type}}"
            ),
        ),
        graph(
            "Sandboxes by runtime class",
            "Sandbox pods by RuntimeClass (gvisor, kata); none may run without one.",
            "none",
            [
                q(
                    f"count by (runtimeclass_name) (kube_pod_runtimeclass_name_info{{{NS}}})",
                    "{{runtimeclass_name}}",
                )
            ],
        ),
    )
    return board

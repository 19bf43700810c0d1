"""The GPU health service (gridloop.health).

Reads DCGM exporter metrics through Prometheus, decides per GPU and per node
in a pure core, quarantines failing nodes and rebalances Kueue quotas to the
healthy capacity, within hard safety limits. Its source root is `health/`, so
it installs as `gridloop.health` and never as a top-level `health` module.

A pure core decides (`policy`, `observed`, `signals`, `plan`, `breaker`, `patches`,
`capacity`, `quotas`, `actions`: data in, data out); a shell acts (`reading` and
`refreshing` ask Prometheus, `listing` and `watching` mirror the nodes, `acting` and
`quota_acting` patch, `rebalancing` and `service` run the cycle, `leadership` holds the
Lease, `status_configmap` writes the status ConfigMap, `commands` is `gridloop health`).
"""

"""The GPU health service (gridloop.health).

Reads DCGM exporter metrics through Prometheus, decides per GPU and per node
in a pure core, quarantines failing nodes and rebalances Kueue quotas to the
healthy capacity, within hard safety limits. Its source root is `health/`, so
it installs as `gridloop.health` and never as a top-level `health` module.

Not built yet: this package holds only its place in the layout (issues 4, 5).
"""

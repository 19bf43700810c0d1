"""On a `gridloop local` cluster, the chart's fleet defaults to the one the cluster runs.

The fleet file is the one place a GPU fleet is described (docs/local-cluster.md), and
the chart derives its Kueue flavors and quotas from the same schema. When the
kubeconfig is a local cluster's (its state folder is beside it) and no values layer
names a fleet, install and doctor take the cluster's own `fleet.yaml` as the first
values file, so `gridloop install --profile local` gets queues that match the nodes.
A fleet given in values (-f or --set fleet...) always wins.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from gridloop.chart import locating
from gridloop.chart.rendering import Request
from gridloop.local import state as local_state

VALUES_FILE = "chart-fleet-values.yaml"  # written in the local cluster's state folder


def names_fleet(request: Request) -> bool:
    """Whether the profile, a values file or a --set gives a fleet."""
    for path in (request.profile, *request.files):
        if path is not None and locating.values_file(path).get("fleet"):
            return True
    return any(s.split("=", 1)[0].strip().startswith("fleet") for s in request.sets)


def state_fleet(kubeconfig: str) -> Path | None:
    """The fleet file of the local cluster this kubeconfig belongs to, if it is one's."""
    state = local_state.for_kubeconfig(kubeconfig)
    fleet = None if state is None else state.dir / "fleet.yaml"
    return fleet if fleet is not None and fleet.is_file() else None


def with_local_fleet(request: Request, kubeconfig: str) -> tuple[Request, Path | None]:
    """The request, with the local cluster's fleet as its first values file when it
    names none; and that fleet file (None when nothing was added)."""
    fleet = state_fleet(kubeconfig)
    if fleet is None or names_fleet(request):
        return request, None
    values = fleet.parent / VALUES_FILE
    doc = {"fleet": yaml.safe_load(fleet.read_text())}
    values.write_text(
        f"# written by gridloop install from {fleet}: the fleet this local cluster runs\n"
        + yaml.safe_dump(doc, sort_keys=False)
    )
    return dataclasses.replace(request, files=(values, *request.files)), fleet

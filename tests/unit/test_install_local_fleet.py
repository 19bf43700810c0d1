"""Two things a re-run of `gridloop install` on the local cluster relies on: the chart's
fleet defaults to the cluster's own, and a queue whose GPU quota the health service
lowered still counts as holding what the chart configured."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from gridloop.chart import objects
from gridloop.chart.local_fleet import VALUES_FILE, with_local_fleet
from gridloop.chart.rendering import Request
from gridloop.local.ports import Ports
from gridloop.local.state import State

FLEET = {"apiVersion": "gridloop.io/v1alpha1", "kind": "Fleet", "sites": [{"name": "x"}]}


def local_state(tmp: Path) -> Path:
    state = tmp / "state"
    State(dir=state, base_port=36400, ports=Ports.from_base(36400)).save()
    (state / "fleet.yaml").write_text(yaml.safe_dump(FLEET))
    (state / "kubeconfig").write_text("")
    return state


def test_a_local_clusters_fleet_is_the_first_values_file(tmp_path):
    state = local_state(tmp_path)
    mine = tmp_path / "mine.yaml"
    mine.write_text("health: {replicas: 1}\n")
    req, fleet = with_local_fleet(Request(chart=tmp_path, files=(mine,)), str(state / "kubeconfig"))
    assert fleet == state / "fleet.yaml"
    assert req.files == (state / VALUES_FILE, mine)
    assert yaml.safe_load((state / VALUES_FILE).read_text()) == {"fleet": FLEET}


def test_a_fleet_in_values_wins_and_other_clusters_get_none(tmp_path):
    state = local_state(tmp_path)
    named = tmp_path / "fleet-values.yaml"
    named.write_text(yaml.safe_dump({"fleet": FLEET}))
    kubeconfig = str(state / "kubeconfig")
    for req in (Request(chart=tmp_path, files=(named,)),
                Request(chart=tmp_path, sets=("fleet.sites[0].name=y",))):  # fmt: skip
        assert with_local_fleet(req, kubeconfig) == (req, None)
    elsewhere = tmp_path / "kube" / "config"
    elsewhere.parent.mkdir()
    elsewhere.write_text("")
    plain = Request(chart=tmp_path)
    assert with_local_fleet(plain, str(elsewhere)) == (plain, None)


def cluster_queue(nominal: object, record: dict | None) -> dict:
    notes = {"quota.gridloop.io/configured": json.dumps(record)} if record else {}
    return {
        "kind": "ClusterQueue",
        "metadata": {"name": "team", "annotations": notes},
        "spec": {"resourceGroups": [{"flavors": [{"name": "us-east-h100", "resources": [
            {"name": "cpu", "nominalQuota": "100"},
            {"name": "nvidia.com/gpu", "nominalQuota": nominal},
        ]}]}]},
    }  # fmt: skip


def test_a_quota_the_health_service_lowered_reads_as_configured():
    wanted = cluster_queue("64", None)["spec"]
    lowered = cluster_queue("56", {"us-east-h100": {"configured": 64, "set": 56}})
    assert not objects.contains(lowered, {"spec": wanted})
    assert objects.contains(objects.as_configured(lowered), {"spec": wanted})


def test_a_quota_changed_since_by_someone_else_is_not_explained_away():
    wanted = cluster_queue("64", None)["spec"]
    changed = cluster_queue("40", {"us-east-h100": {"configured": 64, "set": 56}})
    assert not objects.contains(objects.as_configured(changed), {"spec": wanted})
    no_record = cluster_queue("56", None)
    assert objects.as_configured(no_record) == no_record

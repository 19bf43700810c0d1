"""Reading Kueue ClusterQueues into quotas, and the patch that changes them (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gridloop.health.queues import (
    CONFIGURED,
    MANUAL,
    QuotaProblem,
    flavor_of,
    parse_manual,
    queue_quotas,
    quota_patch,
)
from gridloop.health.quotas import QueueQuota


def cluster_queue(annotations: dict[str, str] | None = None, **gpus: str) -> dict[str, Any]:
    """A ClusterQueue like the chart's: cpu, memory and GPUs per flavor, in one group."""
    flavors = [
        {
            "name": flavor.replace("_", "-"),
            "resources": [
                {"name": "cpu", "nominalQuota": "96"},
                {"name": "memory", "nominalQuota": "1Ti"},
                {"name": "nvidia.com/gpu", "nominalQuota": quota},
            ],
        }
        for flavor, quota in gpus.items()
    ]
    return {
        "metadata": {"name": "team-a", "resourceVersion": "41", "annotations": annotations or {}},
        "spec": {
            "resourceGroups": [
                {"coveredResources": ["cpu", "memory", "nvidia.com/gpu"], "flavors": flavors}
            ]
        },
    }


def test_a_flavor_is_its_name_and_node_labels() -> None:
    obj = {"metadata": {"name": "us-east-h100"}, "spec": {"nodeLabels": {"site": "us-east"}}}
    flavor = flavor_of(obj)
    assert (flavor.name, dict(flavor.node_labels)) == ("us-east-h100", {"site": "us-east"})
    assert dict(flavor_of({"metadata": {"name": "any"}, "spec": {}}).node_labels) == {}


def test_each_flavor_s_gpu_quota_is_read_with_its_configured_and_manual_quota() -> None:
    obj = cluster_queue(
        {
            CONFIGURED: json.dumps({"us-east-h100": {"configured": 32, "set": 16}}),
            MANUAL: "onprem-a100=8",
        },
        us_east_h100="16",
        eu_west_h100="32",
        onprem_a100="24",
    )
    assert queue_quotas(obj) == [
        QueueQuota("team-a", "us-east-h100", nominal=16, configured=32, manual=None),
        QueueQuota("team-a", "eu-west-h100", nominal=32, configured=32, manual=None),
        QueueQuota("team-a", "onprem-a100", nominal=24, configured=24, manual=8),
    ]


def test_a_queue_without_gpus_has_no_quota_to_rebalance() -> None:
    obj = cluster_queue()
    obj["spec"]["resourceGroups"][0]["flavors"] = [
        {"name": "cpu-only", "resources": [{"name": "cpu", "nominalQuota": "8"}]}
    ]
    assert queue_quotas(obj) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("us-east-h100=24", {"us-east-h100": 24}),
        (" us-east-h100 = 24 , onprem-a100=0 ,", {"us-east-h100": 24, "onprem-a100": 0}),
    ],
)
def test_the_manual_annotation_is_flavor_equals_gpus(text: str, expected: dict[str, int]) -> None:
    assert parse_manual(text, "here") == expected


@pytest.mark.parametrize(
    ("annotations", "quota", "message"),
    [
        ({MANUAL: "us-east-h100"}, "32", "'us-east-h100' is not <flavor>=<GPUs>"),
        ({MANUAL: "us-east-h100=-1"}, "32", "is not <flavor>=<GPUs>"),
        ({MANUAL: "us-east-h100=2.5"}, "32", "is not <flavor>=<GPUs>"),
        ({MANUAL: "us-east-h100=1,us-east-h100=2"}, "32", "flavor us-east-h100 is given twice"),
        ({MANUAL: "eu-west-h100=8"}, "32", "flavor eu-west-h100 has no GPU quota in this queue"),
        ({CONFIGURED: "32"}, "32", f"annotation {CONFIGURED}: not gridloop's record"),
        ({CONFIGURED: '{"us-east-h100": 32}'}, "32", "not gridloop's record"),
        ({CONFIGURED: '{"us-east-h100": {"configured": 32}}'}, "32", "not gridloop's record"),
        ({CONFIGURED: '{"us-east-h100": {"configured": "x", "set": 1}}'}, "32", "record"),
        ({}, "1.5", "nominalQuota: '1.5' is not a whole number of GPUs"),
        ({}, "lots", "nominalQuota: 'lots' is not a quantity"),
    ],
)
def test_a_queue_gridloop_cannot_read_is_one_line_naming_queue_and_field(
    annotations: dict[str, str], quota: str, message: str
) -> None:
    with pytest.raises(QuotaProblem) as err:
        queue_quotas(cluster_queue(annotations, us_east_h100=quota))
    text = str(err.value)
    assert text.startswith("clusterqueue/team-a: ")
    assert message in text
    assert "\n" not in text


def test_lowering_a_quota_records_what_it_was_and_keeps_everything_else() -> None:
    obj = cluster_queue(us_east_h100="32", eu_west_h100="32")
    patch = quota_patch(obj, {"us-east-h100": (16, 32)})
    assert patch["metadata"] == {
        "resourceVersion": "41",
        "annotations": {CONFIGURED: json.dumps({"us-east-h100": {"configured": 32, "set": 16}})},
    }
    flavors = patch["spec"]["resourceGroups"][0]["flavors"]
    assert [r["nominalQuota"] for r in flavors[0]["resources"]] == ["96", "1Ti", "16"]
    assert [r["nominalQuota"] for r in flavors[1]["resources"]] == ["96", "1Ti", "32"]
    # the object read is not changed by building the patch
    assert obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] == "32"


def test_restoring_the_configured_quota_drops_the_record() -> None:
    record = {
        "us-east-h100": {"configured": 32, "set": 16},
        "eu-west-h100": {"configured": 32, "set": 24},
    }
    obj = cluster_queue({CONFIGURED: json.dumps(record)}, us_east_h100="16", eu_west_h100="24")
    patch = quota_patch(obj, {"us-east-h100": (32, 32)})
    assert json.loads(patch["metadata"]["annotations"][CONFIGURED]) == {
        "eu-west-h100": {"configured": 32, "set": 24}
    }
    last = quota_patch(obj, {"us-east-h100": (32, 32), "eu-west-h100": (32, 32)})
    assert last["metadata"]["annotations"] == {CONFIGURED: None}  # null deletes it


def test_a_quota_someone_else_changed_since_is_the_new_configured_quota() -> None:
    # gridloop set 16 (of 32); then `helm upgrade` grew the pool's quota to 40
    record = {"us-east-h100": {"configured": 32, "set": 16}}
    obj = cluster_queue({CONFIGURED: json.dumps(record)}, us_east_h100="40")
    [quota] = queue_quotas(obj)
    assert (quota.nominal, quota.configured) == (40, 40)
    # while the quota is still what gridloop set, the record stands
    [kept] = queue_quotas(cluster_queue({CONFIGURED: json.dumps(record)}, us_east_h100="16"))
    assert (kept.nominal, kept.configured) == (16, 32)

"""A fleet expands into named, zoned nodes that look like real GPU nodes to the scheduler."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gridloop.fleet import (
    CONTAINER_NODE_LABEL,
    LABEL_POOL,
    LABEL_SITE,
    LABEL_ZONE,
    SIMULATED_LABEL,
    ContainerNodes,
    Fleet,
    iter_planned_nodes,
    load_fleet,
    node_manifest,
    parse_fleet,
    planned_container_nodes,
    planned_nodes,
)

REPO = Path(__file__).parents[2]
DEFAULT_FLEET = REPO / "examples" / "fleets" / "default.yaml"


def one_site_fleet(zones: list[str], pools: list[tuple[str, str, int, int]]) -> Fleet:
    """A fleet of one cloud site; pools are (name, gpu, nodes, gpusPerNode)."""
    return parse_fleet(
        {
            "apiVersion": "gridloop.io/v1alpha1",
            "kind": "Fleet",
            "metadata": {"name": "test"},
            "sites": [
                {
                    "name": "lab",
                    "type": "cloud",
                    "region": "us-east-1",
                    "zones": zones,
                    "pools": [
                        {"name": name, "gpu": gpu, "nodes": nodes, "gpusPerNode": per_node}
                        for name, gpu, nodes, per_node in pools
                    ],
                }
            ],
        }
    )


def manifest_of(name: str) -> dict[str, Any]:
    nodes = {node.name: node for node in planned_nodes(load_fleet(DEFAULT_FLEET))}
    return node_manifest(nodes[name])


def test_default_fleet_plans_24_uniquely_named_nodes() -> None:
    nodes = planned_nodes(load_fleet(DEFAULT_FLEET))

    assert len(nodes) == 24
    assert len({node.name for node in nodes}) == 24
    assert nodes[0].name == "us-east-h100-000"
    assert nodes[-1].name == "onprem-fra-a100-007"


def test_fleet_iterator_yields_the_same_nodes_as_the_list() -> None:
    fleet = load_fleet(DEFAULT_FLEET)

    assert list(iter_planned_nodes(fleet)) == planned_nodes(fleet)


@pytest.mark.parametrize(
    ("nodes", "last_name"),
    [(1, "lab-h100-000"), (12, "lab-h100-011"), (1000, "lab-h100-999"), (1001, "lab-h100-1000")],
)
def test_node_index_is_padded_to_three_digits_and_widens_past_999(
    nodes: int, last_name: str
) -> None:
    fleet = one_site_fleet(["a"], [("h100", "H100-80GB", nodes, 8)])

    names = [node.name for node in planned_nodes(fleet)]

    assert names[0] == "lab-h100-000"
    assert names[-1] == last_name


def test_growing_a_pool_keeps_existing_node_names_and_zones() -> None:
    small = one_site_fleet(["a", "b", "c"], [("h100", "H100-80GB", 5, 8), ("l4", "L4", 2, 8)])
    large = one_site_fleet(["a", "b", "c"], [("h100", "H100-80GB", 1200, 8), ("l4", "L4", 2, 8)])

    before = {(node.name, node.zone) for node in planned_nodes(small)}
    after = {(node.name, node.zone) for node in planned_nodes(large)}

    assert before <= after


@pytest.mark.parametrize(
    ("zones", "nodes", "per_zone"),
    [(["a", "b"], 8, {"a": 4, "b": 4}), (["a", "b", "c"], 7, {"a": 3, "b": 2, "c": 2})],
)
def test_nodes_are_spread_round_robin_over_zones(
    zones: list[str], nodes: int, per_zone: dict[str, int]
) -> None:
    fleet = one_site_fleet(zones, [("h100", "H100-80GB", nodes, 8)])

    assert Counter(node.zone for node in planned_nodes(fleet)) == per_zone


def test_single_node_pools_do_not_all_land_in_the_first_zone() -> None:
    pools = [(f"p{i}", "L4", 1, 8) for i in range(3)]
    fleet = one_site_fleet(["a", "b", "c"], pools)

    assert [node.zone for node in planned_nodes(fleet)] == ["a", "b", "c"]


def test_node_carries_gpu_capacity_and_topology_labels() -> None:
    node = manifest_of("eu-west-a100-002")

    assert node["apiVersion"] == "v1"
    assert node["kind"] == "Node"
    assert node["metadata"]["labels"] == {
        "kubernetes.io/hostname": "eu-west-a100-002",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "p4de.24xlarge",
        "topology.kubernetes.io/region": "eu-west-1",
        "topology.kubernetes.io/zone": "eu-west-1b",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.memory": "81920",
        "gridloop.io/site": "eu-west",
        "gridloop.io/site-type": "cloud",
        "gridloop.io/pool": "a100",
        "gridloop.io/simulated": "true",
    }
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"


def test_node_is_marked_for_kwok_and_tainted_as_a_cloud_gpu_node() -> None:
    node = manifest_of("onprem-fra-a100-000")

    assert node["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
    assert node["metadata"]["labels"][SIMULATED_LABEL] == "true"
    assert node["metadata"]["labels"]["gridloop.io/site-type"] == "on-prem"
    assert node["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "dgx-a100"
    # pods that ask for no GPU stay off it, as on GKE's GPU pools
    assert node["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    ]
    assert node["status"]["nodeInfo"] == {"architecture": "amd64", "operatingSystem": "linux"}


def _quantity(value: str) -> float:
    """Enough of the Kubernetes quantity format for what node_manifest emits."""
    for suffix, factor in (("m", 0.001), ("Ki", 1024.0), ("Gi", 1024.0**3)):
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * factor
    return float(value)


@pytest.mark.parametrize("resource", ["cpu", "memory", "ephemeral-storage"])
def test_allocatable_is_slightly_less_than_capacity_like_a_kubelet_reserve(resource: str) -> None:
    status = manifest_of("us-east-h100-000")["status"]

    capacity = _quantity(status["capacity"][resource])
    allocatable = _quantity(status["allocatable"][resource])

    assert 0.85 * capacity < allocatable < capacity


def test_h100_node_has_the_p5_shape() -> None:
    capacity = manifest_of("us-east-h100-000")["status"]["capacity"]

    assert capacity["cpu"] == "192"
    assert _quantity(capacity["memory"]) == 2048 * 1024**3
    assert capacity["pods"] == "110"


@pytest.mark.parametrize(("per_node", "cpu"), [(1, "24"), (4, "96"), (8, "192"), (16, "384")])
def test_cpu_scales_with_gpus_per_node(per_node: int, cpu: str) -> None:
    fleet = one_site_fleet(["a"], [("h100", "H100-80GB", 1, per_node)])

    status = node_manifest(planned_nodes(fleet)[0])["status"]

    assert status["capacity"]["cpu"] == cpu
    assert status["capacity"]["nvidia.com/gpu"] == str(per_node)


def test_site_and_pool_labels_match_the_planned_node() -> None:
    for node in planned_nodes(load_fleet(DEFAULT_FLEET)):
        labels = node_manifest(node)["metadata"]["labels"]
        assert (labels[LABEL_SITE], labels[LABEL_POOL], labels[LABEL_ZONE]) == (
            node.site,
            node.pool,
            node.zone,
        )


# --- container nodes: real kubelets, planned from the fleet's containerNodes ---


def with_container_nodes(fleet: Fleet, nodes: int, pod_subnet: str) -> Fleet:
    return dataclasses.replace(fleet, container_nodes=ContainerNodes(nodes, pod_subnet))


def test_three_container_nodes_get_consecutive_slash_24s_and_their_gateways() -> None:
    fleet = with_container_nodes(load_fleet(DEFAULT_FLEET), 3, "10.200.0.0/16")

    planned = [
        (node.name, node.index, node.pod_cidr, node.node_ip, node.gateway)
        for node in planned_container_nodes(fleet)
    ]

    assert planned == [
        ("system-000", 0, "10.200.0.0/24", "10.200.0.1", "10.200.0.1"),
        ("system-001", 1, "10.200.1.0/24", "10.200.1.1", "10.200.1.1"),
        ("system-002", 2, "10.200.2.0/24", "10.200.2.1", "10.200.2.1"),
    ]


def test_the_narrowest_pod_subnet_still_holds_three_nodes() -> None:
    fleet = with_container_nodes(load_fleet(DEFAULT_FLEET), 3, "172.30.4.0/22")

    cidrs = [node.pod_cidr for node in planned_container_nodes(fleet)]

    assert cidrs == ["172.30.4.0/24", "172.30.5.0/24", "172.30.6.0/24"]


def test_a_fleet_without_container_nodes_plans_none() -> None:
    fleet = one_site_fleet(["a"], [("h100", "H100-80GB", 2, 8)])

    assert planned_container_nodes(fleet) == []


def test_container_nodes_carry_only_labels_a_kubelet_may_set_on_itself() -> None:
    (node,) = planned_container_nodes(load_fleet(DEFAULT_FLEET))

    assert node.labels == {LABEL_POOL: "system", CONTAINER_NODE_LABEL: "true"}
    # NodeRestriction refuses a kubelet's --node-labels in these domains
    for key in node.labels:
        domain = key.split("/")[0]
        assert not domain.endswith(("kubernetes.io", "k8s.io")), key
    assert SIMULATED_LABEL not in node.labels, "kwok must leave a real kubelet's node alone"


def test_container_nodes_do_not_change_the_simulated_nodes() -> None:
    fleet = load_fleet(DEFAULT_FLEET)
    without = dataclasses.replace(fleet, container_nodes=None)

    assert planned_nodes(fleet) == planned_nodes(without)
    assert (fleet.node_count, fleet.gpu_count) == (without.node_count, without.gpu_count)


def test_a_gpu_site_named_system_cannot_take_a_container_node_name() -> None:
    # GPU names are <site>-<pool>-<index>: always one '-' more than system-<index>, so
    # the file needs no rule against this and is accepted.
    doc = {
        "apiVersion": "gridloop.io/v1alpha1",
        "kind": "Fleet",
        "metadata": {"name": "test"},
        "containerNodes": {"nodes": 3},
        "sites": [
            {
                "name": "system",
                "type": "cloud",
                "region": "r",
                "zones": ["z"],
                "pools": [{"name": "000", "gpu": "L4", "nodes": 3, "gpusPerNode": 8}],
            }
        ],
    }
    fleet = parse_fleet(doc)

    gpu_names = {node.name for node in planned_nodes(fleet)}
    container_names = {node.name for node in planned_container_nodes(fleet)}

    assert gpu_names == {"system-000-000", "system-000-001", "system-000-002"}
    assert container_names == {"system-000", "system-001", "system-002"}

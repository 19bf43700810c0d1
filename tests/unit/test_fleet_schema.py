"""The fleet file is validated once, and every mistake names the file and the field."""

from __future__ import annotations

import json
import re
from ipaddress import ip_network
from pathlib import Path
from typing import Any

import pytest
import yaml

from examples import example
from gridloop.fleet import GPU_MODELS, ContainerNodes, FleetError, load_fleet, parse_fleet, schema
from gridloop.fleet.schema import SERVICE_RANGE, SIMULATED_POD_RANGE
from gridloop.local import ports

REPO = Path(__file__).parents[2]
DEFAULT_FLEET = example("fleets/default.yaml")
_MISSING = object()


def fleet_doc() -> dict[str, Any]:
    """A small valid fleet document; each test changes one thing in it."""
    return {
        "apiVersion": "gridloop.io/v1alpha1",
        "kind": "Fleet",
        "metadata": {"name": "test"},
        "sites": [
            {
                "name": "us-east",
                "type": "cloud",
                "region": "us-east-1",
                "zones": ["us-east-1a", "us-east-1b"],
                "pools": [
                    {"name": "h100", "gpu": "H100-80GB", "nodes": 2, "gpusPerNode": 8},
                    {"name": "l4", "gpu": "L4", "nodes": 1, "gpusPerNode": 4},
                ],
            },
            {
                "name": "onprem-fra",
                "type": "on-prem",
                "region": "on-prem-fra",
                "zones": ["rack-a"],
                "pools": [{"name": "a100", "gpu": "A100-80GB", "nodes": 3, "gpusPerNode": 8}],
            },
        ],
    }


def changed(path: str, value: object) -> dict[str, Any]:
    """``fleet_doc()`` with the field at ``path`` (e.g. ``sites[0].zones``) set or removed."""
    doc = fleet_doc()
    parts = [int(p) if p.isdigit() else p for p in re.split(r"\.|\[|\]\.?", path) if p]
    parent: Any = doc
    for part in parts[:-1]:
        parent = parent[part]
    if value is _MISSING:
        del parent[parts[-1]]
    else:
        parent[parts[-1]] = value
    return doc


def test_default_fleet_has_24_nodes_in_three_sites() -> None:
    fleet = load_fleet(DEFAULT_FLEET)

    assert fleet.name == "default"
    assert [site.name for site in fleet.sites] == ["us-east", "eu-west", "onprem-fra"]
    assert [site.type for site in fleet.sites] == ["cloud", "cloud", "on-prem"]
    assert fleet.node_count == 24
    assert fleet.gpu_count == 192
    assert {pool.gpu for site in fleet.sites for pool in site.pools} == {"H100-80GB", "A100-80GB"}


def test_valid_document_becomes_snake_case_dataclasses() -> None:
    fleet = parse_fleet(fleet_doc())

    pool = fleet.sites[0].pools[1]
    assert (pool.name, pool.gpu, pool.nodes, pool.gpus_per_node) == ("l4", "L4", 1, 4)
    assert fleet.sites[1].zones == ("rack-a",)
    assert fleet.node_count == 6
    assert fleet.gpu_count == 2 * 8 + 4 + 3 * 8


@pytest.mark.parametrize(
    ("site", "expected"),
    [(0, "p5.48xlarge"), (1, "dgx-a100")],
    ids=["cloud", "on-prem"],
)
def test_missing_instance_type_defaults_from_catalog_by_site_type(site: int, expected: str) -> None:
    fleet = parse_fleet(fleet_doc())

    assert fleet.sites[site].pools[0].instance_type == expected


def test_explicit_instance_type_is_kept() -> None:
    fleet = parse_fleet(changed("sites[0].pools[0].instanceType", "p5e.48xlarge"))

    assert fleet.sites[0].pools[0].instance_type == "p5e.48xlarge"


def test_pool_of_zero_nodes_is_allowed() -> None:
    fleet = parse_fleet(changed("sites[0].pools[0].nodes", 0))

    assert fleet.sites[0].pools[0].nodes == 0


def test_the_schema_in_the_fleets_readme_is_a_valid_fleet_and_its_errors_are_ours() -> None:
    readme = example("fleets/README.md").read_text()
    blocks = re.findall(r"```(\w*)\n(.*?)```", readme, re.S)
    [documented] = [body for lang, body in blocks if lang == "yaml"]
    fleet = parse_fleet(yaml.safe_load(documented), "README.md")
    assert fleet.sites[0].pools[0].gpu == "H100-80GB"
    # the first bad-file line is word for word what the validator says
    [errors] = [body for lang, body in blocks if lang == "" and "bad.yaml" in body]
    with pytest.raises(FleetError) as caught:
        parse_fleet(changed("sites[1].pools[0].gpu", "H900"), "examples/fleets/bad.yaml")
    assert str(caught.value) == errors.splitlines()[0]


def test_unknown_gpu_model_names_the_field() -> None:
    with pytest.raises(FleetError) as caught:
        parse_fleet(changed("sites[1].pools[0].gpu", "H900"), "examples/fleets/bad.yaml")

    known = ", ".join(sorted(GPU_MODELS))
    assert str(caught.value) == (
        "examples/fleets/bad.yaml: sites[1].pools[0].gpu: "
        f"unknown GPU model 'H900' (known: {known})"
    )


def test_negative_node_count_is_rejected() -> None:
    with pytest.raises(FleetError) as caught:
        parse_fleet(changed("sites[0].pools[1].nodes", -3), "fleet.yaml")

    assert str(caught.value) == (
        "fleet.yaml: sites[0].pools[1].nodes: must be a non-negative integer, got -3"
    )
    assert caught.value.path == "sites[0].pools[1].nodes"


BAD_INPUTS = [
    ("not-a-mapping", None, ["a", "list"], "", "must be a mapping, got a list"),
    ("wrong-api-version", "apiVersion", "v1", "apiVersion", "must be gridloop.io/v1alpha1"),
    ("missing-api-version", "apiVersion", _MISSING, "apiVersion", "required field is missing"),
    ("wrong-kind", "kind", "Cluster", "kind", "must be Fleet, got 'Cluster'"),
    ("missing-metadata", "metadata", _MISSING, "metadata", "required field is missing"),
    ("missing-name", "metadata.name", _MISSING, "metadata.name", "required field is missing"),
    ("unknown-top-key", "spec", {}, "", "unknown field 'spec'"),
    ("unknown-metadata-key", "metadata.labels", {}, "metadata", "unknown field 'labels'"),
    ("unknown-site-key", "sites[0].pool", [], "sites[0]", "unknown field 'pool'"),
    ("unknown-pool-key", "sites[1].pools[0].gpus", 8, "sites[1].pools[0]", "unknown field"),
    ("sites-missing", "sites", _MISSING, "sites", "required field is missing"),
    ("sites-empty", "sites", [], "sites", "must be a non-empty list, got a list"),
    ("sites-a-mapping", "sites", {}, "sites", "must be a non-empty list, got a mapping"),
    ("site-a-string", "sites[0]", "us-east", "sites[0]", "must be a mapping, got 'us-east'"),
    ("site-name-uppercase", "sites[0].name", "US-East", "sites[0].name", "DNS-1123 label"),
    ("site-name-too-long", "sites[0].name", "a" * 64, "sites[0].name", "DNS-1123 label"),
    ("site-type-unknown", "sites[0].type", "edge", "sites[0].type", "must be cloud or on-prem"),
    ("region-missing", "sites[0].region", _MISSING, "sites[0].region", "required"),
    ("region-a-number", "sites[0].region", 1, "sites[0].region", "label value"),
    ("zones-empty", "sites[0].zones", [], "sites[0].zones", "must be a non-empty list"),
    ("zones-a-string", "sites[0].zones", "us-east-1a", "sites[0].zones", "non-empty list"),
    ("zone-not-a-string", "sites[0].zones[1]", 7, "sites[0].zones[1]", "got 7"),
    ("zone-duplicated", "sites[0].zones[1]", "us-east-1a", "sites[0].zones[1]", "duplicate zone"),
    ("pools-empty", "sites[1].pools", [], "sites[1].pools", "must be a non-empty list"),
    ("gpu-missing", "sites[0].pools[0].gpu", _MISSING, "sites[0].pools[0].gpu", "required"),
    ("gpu-a-list", "sites[0].pools[0].gpu", ["L4"], "sites[0].pools[0].gpu", "name, got a list"),
    ("nodes-a-string", "sites[0].pools[0].nodes", "8", "sites[0].pools[0].nodes", "got '8'"),
    ("nodes-a-bool", "sites[0].pools[0].nodes", True, "sites[0].pools[0].nodes", "got true"),
    ("nodes-a-float", "sites[0].pools[0].nodes", 2.0, "sites[0].pools[0].nodes", "got 2.0"),
    ("nodes-null", "sites[0].pools[0].nodes", None, "sites[0].pools[0].nodes", "got null"),
    ("gpus-zero", "sites[0].pools[0].gpusPerNode", 0, "sites[0].pools[0].gpusPerNode", "1 to 16"),
    ("gpus-17", "sites[0].pools[0].gpusPerNode", 17, "sites[0].pools[0].gpusPerNode", "got 17"),
    ("instance-type-bad", "sites[0].pools[0].instanceType", "p5 48x", "instanceType", "label"),
    ("duplicate-site", "sites[1].name", "us-east", "sites[1].name", "duplicate site name"),
    ("duplicate-pool", "sites[0].pools[1].name", "h100", "sites[0].pools[1].name", "duplicate"),
]


@pytest.mark.parametrize(
    ("field", "value", "path", "message"),
    [case[1:] for case in BAD_INPUTS],
    ids=[case[0] for case in BAD_INPUTS],
)
def test_every_bad_input_gives_one_line(
    field: str | None, value: object, path: str, message: str
) -> None:
    doc = value if field is None else changed(field, value)

    with pytest.raises(FleetError) as caught:
        parse_fleet(doc, "fleet.yaml")

    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith("fleet.yaml: ")
    assert path in text
    assert message in text


def test_site_and_pool_names_that_make_the_same_node_names_are_rejected() -> None:
    doc = fleet_doc()
    doc["sites"][0]["name"] = "a-b"
    doc["sites"][0]["pools"][0]["name"] = "c"
    doc["sites"][1]["name"] = "a"
    doc["sites"][1]["pools"][0]["name"] = "b-c"

    with pytest.raises(FleetError, match=r"sites\[1\]\.pools\[0\]\.name: node names a-b-c-NNN"):
        parse_fleet(doc)


@pytest.mark.parametrize(
    ("site_length", "nodes", "accepted"),
    [(56, 1000, True), (56, 1001, False), (57, 1000, False)],
    ids=["fits-exactly", "index-widens-past-63", "site-name-too-long"],
)
def test_node_names_must_fit_in_63_characters(site_length: int, nodes: int, accepted: bool) -> None:
    # "<site>-l4-999" is site_length + 7 characters; index 1000 adds one more.
    doc = changed("sites[0].name", "s" * site_length)
    doc["sites"][0]["pools"] = [{"name": "l4", "gpu": "L4", "nodes": nodes, "gpusPerNode": 8}]

    if accepted:
        assert parse_fleet(doc).node_count == nodes + 3
    else:
        with pytest.raises(
            FleetError, match=r"sites\[0\]\.pools\[0\]\.name: node name .*at most 63"
        ):
            parse_fleet(doc)


def test_load_fleet_names_the_yaml_line_of_a_syntax_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("apiVersion: gridloop.io/v1alpha1\nsites: [unclosed\n")

    with pytest.raises(FleetError) as caught:
        load_fleet(path)

    text = str(caught.value)
    assert text.startswith(f"{path}: line ")
    assert "invalid YAML" in text
    assert "\n" not in text


def test_load_fleet_rejects_duplicate_keys(tmp_path: Path) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text(DEFAULT_FLEET.read_text().replace("kind: Fleet", "kind: Fleet\nkind: Fleet"))

    with pytest.raises(FleetError, match=r"duplicate key 'kind'"):
        load_fleet(path)


def test_missing_fleet_file_is_a_fleet_error(tmp_path: Path) -> None:
    with pytest.raises(FleetError, match=r"nope\.yaml: cannot read fleet file"):
        load_fleet(tmp_path / "nope.yaml")


def test_fleet_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_fleet([])


# --- containerNodes: real CPU nodes beside the simulated GPU fleet ---


def with_container_nodes(block: object) -> dict[str, Any]:
    return {**fleet_doc(), "containerNodes": block}


def test_fleet_without_container_nodes_is_kwok_only() -> None:
    fleet = parse_fleet(fleet_doc())

    assert fleet.container_nodes is None
    assert fleet.container_node_count == 0


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ({}, ContainerNodes(nodes=1, pod_subnet="10.200.0.0/16")),
        ({"nodes": 3}, ContainerNodes(nodes=3, pod_subnet="10.200.0.0/16")),
        ({"podSubnet": "172.30.0.0/22"}, ContainerNodes(nodes=1, pod_subnet="172.30.0.0/22")),
        ({"nodes": 2, "podSubnet": "192.168.0.0/16"}, ContainerNodes(2, "192.168.0.0/16")),
        (
            {"cpuCores": 6, "memoryGi": 20},
            ContainerNodes(nodes=1, pod_subnet="10.200.0.0/16", cpu_cores=6, memory_gi=20),
        ),
    ],
    ids=["empty-block-takes-defaults", "three-nodes", "narrowest-subnet", "both-set", "quota"],
)
def test_container_nodes_fill_in_defaults(block: dict[str, Any], expected: ContainerNodes) -> None:
    fleet = parse_fleet(with_container_nodes(block))

    assert fleet.container_nodes == expected
    assert fleet.container_node_count == expected.nodes


def test_container_nodes_are_not_counted_as_gpu_nodes() -> None:
    fleet = parse_fleet(with_container_nodes({"nodes": 3}))

    assert (fleet.node_count, fleet.gpu_count) == (6, 2 * 8 + 4 + 3 * 8)


def test_default_fleet_has_one_container_node() -> None:
    fleet = load_fleet(DEFAULT_FLEET)

    assert fleet.container_nodes == ContainerNodes(nodes=1, pod_subnet="10.200.0.0/16")


_NODES = "fleet.yaml: containerNodes.nodes: must be an integer from 1 to 3, got"
_SUBNET = "fleet.yaml: containerNodes.podSubnet:"
_NOT_A_CIDR = f"{_SUBNET} must be an IPv4 CIDR such as 10.200.0.0/16, got"
CONTAINER_NODES_BAD_INPUTS = [
    (
        "unknown-key",
        {"foo": 1},
        "fleet.yaml: containerNodes: unknown field 'foo' (allowed: nodes, podSubnet, cpuCores, "
        "memoryGi)",
    ),
    ("null-block", None, "fleet.yaml: containerNodes: must be a mapping, got null"),
    ("zero-nodes", {"nodes": 0}, f"{_NODES} 0"),
    ("four-nodes", {"nodes": 4}, f"{_NODES} 4"),
    ("nodes-a-word", {"nodes": "two"}, f"{_NODES} 'two'"),
    ("nodes-a-bool", {"nodes": True}, f"{_NODES} true"),
    ("subnet-not-an-address", {"podSubnet": "banana/16"}, f"{_NOT_A_CIDR} 'banana/16'"),
    ("subnet-prefix-33", {"podSubnet": "10.200.0.0/33"}, f"{_NOT_A_CIDR} '10.200.0.0/33'"),
    ("subnet-without-prefix", {"podSubnet": "10.200.0.0"}, f"{_NOT_A_CIDR} '10.200.0.0'"),
    ("subnet-a-number", {"podSubnet": 10}, f"{_NOT_A_CIDR} 10"),
    (
        "subnet-ipv6",
        {"podSubnet": "fd00::/64"},
        f"{_SUBNET} must be an IPv4 CIDR, got IPv6 'fd00::/64'",
    ),
    (
        "subnet-too-narrow",
        {"podSubnet": "10.200.0.0/23"},
        f"{_SUBNET} prefix length must be between 8 and 22, got /23",
    ),
    (
        "subnet-too-wide",
        {"podSubnet": "10.0.0.0/7"},
        f"{_SUBNET} prefix length must be between 8 and 22, got /7",
    ),
    (
        "subnet-host-bits-set",
        {"podSubnet": "10.200.0.1/16"},
        f"{_SUBNET} 10.200.0.1/16 is not a network address: use 10.200.0.0/16",
    ),
    (
        "subnet-overlaps-services",
        {"podSubnet": "10.96.0.0/12"},
        f"{_SUBNET} 10.96.0.0/12 overlaps the local cluster's Service range 10.96.0.0/16: "
        "choose another range",
    ),
    (
        "cpu-cores-zero",
        {"cpuCores": 0},
        "fleet.yaml: containerNodes.cpuCores: must be an integer from 1 to 1024, got 0",
    ),
    (
        "cpu-cores-fraction",
        {"cpuCores": 1.5},
        "fleet.yaml: containerNodes.cpuCores: must be an integer from 1 to 1024, got 1.5",
    ),
    (
        "memory-as-quantity",
        {"memoryGi": "8Gi"},
        "fleet.yaml: containerNodes.memoryGi: must be an integer from 1 to 65536, got '8Gi'",
    ),
    (
        "subnet-overlaps-simulated-pods",
        {"podSubnet": "10.244.128.0/20"},
        f"{_SUBNET} 10.244.128.0/20 overlaps the local cluster's simulated pods' range "
        "10.244.0.0/16: choose another range",
    ),
]


@pytest.mark.parametrize(
    ("block", "message"),
    [case[1:] for case in CONTAINER_NODES_BAD_INPUTS],
    ids=[case[0] for case in CONTAINER_NODES_BAD_INPUTS],
)
def test_every_bad_container_nodes_block_gives_exactly_one_line(
    block: object, message: str
) -> None:
    with pytest.raises(FleetError) as caught:
        parse_fleet(with_container_nodes(block), "fleet.yaml")

    assert str(caught.value) == message


def test_ranges_the_pod_subnet_must_avoid_are_the_ones_the_cluster_uses() -> None:
    assert ip_network(SERVICE_RANGE) == ip_network(ports.SERVICE_CIDR)
    assert ip_network(SIMULATED_POD_RANGE) == ip_network(ports.POD_CIDR, strict=False)


def test_the_charts_schema_bounds_the_container_node_quota_as_the_fleet_schema_does() -> None:
    chart_schema = json.loads(
        (Path(__file__).resolve().parents[2] / "charts/gridloop/values.schema.json").read_text()
    )
    block = chart_schema["properties"]["fleet"]["properties"]["containerNodes"]["properties"]
    assert (block["cpuCores"]["minimum"], block["cpuCores"]["maximum"]) == (
        1,
        schema.MAX_CONTAINER_CPU_CORES,
    )
    assert (block["memoryGi"]["minimum"], block["memoryGi"]["maximum"]) == (
        1,
        schema.MAX_CONTAINER_MEMORY_GI,
    )
    fleet_tpl = Path(__file__).resolve().parents[2] / "charts/gridloop/templates/_fleet.tpl"
    text = fleet_tpl.read_text()
    assert f"(.cpuCores | default {schema.DEFAULT_CONTAINER_CPU_CORES})" in text
    assert f"(.memoryGi | default {schema.DEFAULT_CONTAINER_MEMORY_GI})" in text

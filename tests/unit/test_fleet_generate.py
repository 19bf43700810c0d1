"""Generated fleets have exactly the nodes asked for and are ordinary, valid fleet files."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gridloop.fleet import FleetError, dump_fleet, generate_fleet, load_fleet, parse_fleet


@pytest.mark.parametrize("nodes", [1, 7, 24, 5000])
def test_generated_fleet_has_exactly_n_nodes(nodes: int) -> None:
    fleet = parse_fleet(generate_fleet(nodes))

    assert fleet.node_count == nodes
    assert fleet.gpu_count == nodes * 8


def test_generated_fleet_spans_three_regions_and_two_on_prem_sites() -> None:
    fleet = parse_fleet(generate_fleet(1000))

    types = [site.type for site in fleet.sites]
    assert types.count("cloud") == 3
    assert types.count("on-prem") == 2
    assert len({pool.gpu for site in fleet.sites for pool in site.pools}) >= 4


def test_every_pool_gets_nodes_in_a_large_fleet() -> None:
    fleet = parse_fleet(generate_fleet(5000))

    assert all(pool.nodes > 0 for site in fleet.sites for pool in site.pools)


@pytest.mark.parametrize("per_node", [1, 4, 16])
def test_gpus_per_node_applies_to_every_pool(per_node: int) -> None:
    fleet = parse_fleet(generate_fleet(100, gpus_per_node=per_node))

    assert {pool.gpus_per_node for site in fleet.sites for pool in site.pools} == {per_node}
    assert fleet.gpu_count == 100 * per_node


def test_same_arguments_give_the_same_fleet() -> None:
    assert generate_fleet(777, name="scale") == generate_fleet(777, name="scale")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nodes": 0}, "generate_fleet: nodes: must be an integer of at least 1, got 0"),
        ({"nodes": -5}, "generate_fleet: nodes: must be an integer of at least 1, got -5"),
        ({"nodes": True}, "generate_fleet: nodes: must be an integer of at least 1, got True"),
        ({"nodes": 10, "gpus_per_node": 0}, "generate_fleet: gpusPerNode: must be an integer"),
        ({"nodes": 10, "gpus_per_node": 17}, "generate_fleet: gpusPerNode: must be an integer"),
        ({"nodes": 10, "name": "Not_A_Label"}, "generate_fleet: metadata.name: must be a DNS"),
    ],
    ids=["zero", "negative", "bool", "zero-gpus", "too-many-gpus", "bad-name"],
)
def test_impossible_requests_are_fleet_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(FleetError) as caught:
        generate_fleet(**kwargs)  # type: ignore[arg-type]

    assert str(caught.value).startswith(message)


def test_dumped_fleet_round_trips_through_load_fleet(tmp_path: Path) -> None:
    doc = generate_fleet(5000, name="scale")
    path = tmp_path / "scale.yaml"
    path.write_text(dump_fleet(doc))

    fleet = load_fleet(path)

    assert fleet.name == "scale"
    assert fleet.node_count == 5000
    assert yaml.safe_load(path.read_text()) == doc


def test_dumped_fleet_starts_with_a_comment_and_keeps_schema_key_order() -> None:
    text = dump_fleet(generate_fleet(10))

    assert text.startswith("# ")
    body = [line for line in text.splitlines() if not line.startswith("#")]
    assert body[:2] == ["apiVersion: gridloop.io/v1alpha1", "kind: Fleet"]
    assert "gpusPerNode: 8" in text

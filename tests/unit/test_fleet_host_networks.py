"""The container nodes' pod range is checked against the networks this host already uses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gridloop.fleet.host_networks import (
    networks_from_addr_json,
    networks_from_route_json,
    overlap_problem,
    overlapping,
    read_host_networks,
)

HOST = [("lo", "127.0.0.0/8"), ("eth0", "192.0.2.0/24"), ("tun0", "10.8.0.0/16")]


@pytest.mark.parametrize(
    ("pod_subnet", "host", "expected"),
    [
        ("10.200.0.0/16", HOST, None),
        ("192.0.2.0/24", HOST, ("eth0", "192.0.2.0/24")),
        ("192.0.0.0/16", HOST, ("eth0", "192.0.2.0/24")),  # the pod range contains the LAN
        ("10.8.4.0/22", HOST, ("tun0", "10.8.0.0/16")),  # the LAN contains the pod range
        ("10.0.0.0/8", HOST, ("tun0", "10.8.0.0/16")),
        ("127.0.0.0/8", HOST, None),  # loopback never counts
        ("169.254.0.0/16", [("eth0", "169.254.0.0/16")], None),  # nor link-local
        (
            "10.8.0.0/16",
            [("eth0", "not-a-network"), ("tun0", "10.8.0.0/16")],
            ("tun0", "10.8.0.0/16"),
        ),
        ("10.200.0.0/16", [], None),
    ],
    ids=[
        "apart",
        "same-range",
        "pods-contain-host",
        "host-contains-pods",
        "first-overlap-wins",
        "loopback-ignored",
        "link-local-ignored",
        "unreadable-entry-skipped",
        "no-host-networks",
    ],
)
def test_overlapping_finds_the_first_host_network_sharing_an_address(
    pod_subnet: str, host: list[tuple[str, str]], expected: tuple[str, str] | None
) -> None:
    assert overlapping(pod_subnet, host) == expected


def test_overlap_problem_is_one_line_naming_the_field_and_the_interface() -> None:
    problem = overlap_problem("fleet.yaml", "192.0.2.0/24", HOST)

    assert problem == (
        "fleet.yaml: containerNodes.podSubnet: 192.0.2.0/24 overlaps the host's network "
        "192.0.2.0/24 on eth0: choose another range"
    )


def test_no_overlap_is_no_problem() -> None:
    assert overlap_problem("fleet.yaml", "10.200.0.0/16", HOST) is None


ADDR_JSON = json.dumps(
    [
        {
            "ifindex": 1,
            "ifname": "lo",
            "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}],
        },
        {
            "ifindex": 4,
            "ifname": "eth0",
            "addr_info": [
                {"family": "inet", "local": "192.0.2.2", "prefixlen": 24, "scope": "global"},
                {"family": "inet", "local": "198.51.100.7", "prefixlen": 32},
            ],
        },
        {},  # `ip -j -4 addr` prints an empty object for a link without IPv4 addresses
        {
            "ifindex": 9,
            "ifname": "gridloop0",
            "addr_info": [{"family": "inet", "local": "10.200.0.1", "prefixlen": 24}],
        },
        {"ifindex": 10, "ifname": "wg0", "addr_info": [{"family": "inet6", "local": "fd00::1"}]},
    ]
)

ROUTE_JSON = json.dumps(
    [
        {"dst": "default", "gateway": "192.0.2.1", "dev": "eth0", "flags": []},
        {"dst": "192.0.2.0/24", "dev": "eth0", "protocol": "kernel", "scope": "link"},
        {"dst": "10.8.0.0/16", "gateway": "10.8.0.1", "dev": "tun0", "flags": []},
        {"dst": "203.0.113.9", "dev": "tun0", "scope": "link", "flags": []},
        {"type": "blackhole", "dst": "10.66.0.0/16", "flags": []},
        {"dst": "10.200.1.0/24", "dev": "gridloop0", "scope": "link"},
    ]
)


def test_addresses_become_their_networks_and_our_bridge_is_left_out() -> None:
    assert networks_from_addr_json(ADDR_JSON) == [
        ("lo", "127.0.0.0/8"),
        ("eth0", "192.0.2.0/24"),
        ("eth0", "198.51.100.7/32"),
    ]


def test_routes_skip_the_default_route_blackholes_and_our_bridge() -> None:
    assert networks_from_route_json(ROUTE_JSON) == [
        ("eth0", "192.0.2.0/24"),
        ("tun0", "10.8.0.0/16"),
        ("tun0", "203.0.113.9/32"),  # a host route has no prefix
    ]


@pytest.mark.parametrize("text", ["", "not json", "{}", "[1, null]", '[{"ifname": 3}]'])
def test_unreadable_ip_output_gives_no_networks(text: str) -> None:
    assert networks_from_addr_json(text) == []
    assert networks_from_route_json(text) == []


def test_a_host_without_the_ip_command_reports_no_networks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no `ip` to run

    assert read_host_networks() == []

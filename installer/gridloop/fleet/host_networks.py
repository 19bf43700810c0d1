"""Whether the container nodes' pod range collides with a network this host already uses.

The container nodes' pods get addresses from ``containerNodes.podSubnet`` on a local bridge
(``gridloop0``), and the host routes that range to the bridge. If the host already reaches
part of the range elsewhere (a LAN, a VPN, a Docker network), the new route would take
those addresses away from it, or pods would be unreachable. So the range is checked
against the host's IPv4 addresses and routes before anything is created.

``overlapping`` and ``overlap_problem`` decide, and the ``networks_from_*_json`` parsers read
``ip -j`` output; all of them are pure. ``read_host_networks`` only runs ``ip``. Nothing here
may change the host's network or talk to a cluster.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from collections.abc import Sequence

from gridloop.fleet.schema import FleetError

OWN_BRIDGE = "gridloop0"  # the container nodes' bridge: its addresses and routes are ours
_IP_SECONDS = 5.0

Network = tuple[str, str]  # (interface, IPv4 CIDR)


def overlapping(pod_subnet: str, host_networks: Sequence[Network]) -> Network | None:
    """The first (interface, cidr) of the host that overlaps ``pod_subnet`` (a valid IPv4
    CIDR), or None. Loopback and link-local networks never count: every host has them, and
    nothing routes them off the machine."""
    pods = ipaddress.IPv4Network(pod_subnet)
    for interface, cidr in host_networks:
        network = _network(cidr)
        if network is None or network.is_loopback or network.is_link_local:
            continue
        if network.overlaps(pods):
            return interface, cidr
    return None


def overlap_problem(source: str, pod_subnet: str, host_networks: Sequence[Network]) -> str | None:
    """The one line to print when ``pod_subnet`` overlaps a host network, else None."""
    found = overlapping(pod_subnet, host_networks)
    if found is None:
        return None
    interface, cidr = found
    message = (
        f"{pod_subnet} overlaps the host's network {cidr} on {interface}: choose another range"
    )
    return str(FleetError(source, "containerNodes.podSubnet", message))


def networks_from_addr_json(text: str) -> list[Network]:
    """(interface, network) of each IPv4 address in ``ip -j -4 addr`` output, the address
    turned into its network (192.0.2.5/24 is 192.0.2.0/24). Unreadable output is []."""
    found: list[Network] = []
    for link in _objects(text):
        interface = link.get("ifname")
        if not isinstance(interface, str) or interface == OWN_BRIDGE:
            continue
        for info in _list_of_objects(link.get("addr_info")):
            if info.get("family", "inet") != "inet":
                continue
            local, prefix = info.get("local"), info.get("prefixlen")
            network = _network(f"{local}/{prefix}")
            if isinstance(local, str) and isinstance(prefix, int) and network is not None:
                found.append((interface, network.with_prefixlen))
    return found


def networks_from_route_json(text: str) -> list[Network]:
    """(interface, destination) of each IPv4 route in ``ip -j -4 route`` output. The
    default route is left out (it overlaps everything and is replaced by any narrower
    route), and so are routes through no interface (blackhole, unreachable)."""
    found: list[Network] = []
    for route in _objects(text):
        interface, destination = route.get("dev"), route.get("dst")
        if not isinstance(interface, str) or interface == OWN_BRIDGE:
            continue
        if not isinstance(destination, str) or destination == "default":
            continue
        network = _network(destination)  # a host route has no prefix: /32
        if network is not None:
            found.append((interface, network.with_prefixlen))
    return found


def read_host_networks() -> list[Network]:
    """The host's IPv4 networks, from its addresses then its routes, each once. [] when
    ``ip`` is missing or fails: the check is a courtesy, not a gate."""
    addresses = networks_from_addr_json(_ip("addr"))
    routes = networks_from_route_json(_ip("route"))
    return list(dict.fromkeys([*addresses, *routes]))


def _ip(what: str) -> str:
    try:
        done = subprocess.run(
            ["ip", "-j", "-4", what],
            capture_output=True,
            text=True,
            timeout=_IP_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""


def _network(cidr: str) -> ipaddress.IPv4Network | None:
    try:
        return ipaddress.IPv4Network(cidr, strict=False)
    except ValueError:
        return None


def _objects(text: str) -> list[dict[str, object]]:
    try:
        data: object = json.loads(text)
    except ValueError:
        return []
    return _list_of_objects(data)


def _list_of_objects(data: object) -> list[dict[str, object]]:
    if not isinstance(data, list):
        return []
    return [item for item in data if isinstance(item, dict)]

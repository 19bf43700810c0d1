"""The fleet file: its shape as frozen dataclasses, and the validation that builds them.

A fleet file is the one place the GPU fleet is described; the chart's Kueue objects, the
DCGM simulator, dashboards and the simulated nodes are all derived from it. So a mistake
here would spread everywhere, and it is caught here, before anything is rendered: every
error is a ``FleetError`` whose text is one line naming the file and the field path
(``fleet.yaml: sites[1].pools[0].gpu: unknown GPU model 'H900' (known: ...)``), so a
user can go straight to the line to fix.

``parse_fleet`` is pure (a document in, a ``Fleet`` out); ``load_fleet`` only adds reading
the YAML file. Neither may touch the cluster.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeGuard, cast

from gridloop.documents import DocumentProblem, read_document
from gridloop.fleet.catalog import GPU_MODELS, KNOWN_GPU_MODELS, GpuModel

API_VERSION = "gridloop.io/v1alpha1"
KIND = "Fleet"
SITE_TYPES: tuple[str, ...] = ("cloud", "on-prem")
MAX_GPUS_PER_NODE = 16
# Kubernetes object names used as label values (node names, hostname label) stop at 63.
MAX_NODE_NAME = 63

MAX_CONTAINER_NODES = 3
# Kueue's quota for CPU work on each container node (the chart's "system" flavor); the
# chart's values.schema.json gets these bounds from here (python -m gridloop.chart.facts)
DEFAULT_CONTAINER_CPU_CORES = 2
DEFAULT_CONTAINER_MEMORY_GI = 8
MAX_CONTAINER_CPU_CORES = 1024
MAX_CONTAINER_MEMORY_GI = 65536
DEFAULT_POD_SUBNET = "10.200.0.0/16"
# Node i of the container nodes gets the i-th /24 of podSubnet: at most /22 leaves room
# for MAX_CONTAINER_NODES of them, and /8 is as wide as a sensible private range gets.
POD_SUBNET_PREFIXES = (8, 22)
# Ranges the local cluster uses (its API server's service range, kwok's fake pod
# addresses; gridloop.local.flags reads them here): container pods must not overlap them.
SERVICE_RANGE = "10.96.0.0/16"
SIMULATED_POD_RANGE = "10.244.0.0/16"

SiteType = Literal["cloud", "on-prem"]

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")

_TOP_KEYS = ("apiVersion", "kind", "metadata", "sites", "kueue", "containerNodes")
_KUEUE_KEYS = ("enabled",)
_CONTAINER_NODE_KEYS = ("nodes", "podSubnet", "cpuCores", "memoryGi")
_METADATA_KEYS = ("name",)
_SITE_KEYS = ("name", "type", "region", "zones", "pools")
_POOL_KEYS = ("name", "gpu", "nodes", "gpusPerNode", "instanceType")


class FleetError(ValueError):
    """A fleet file that cannot be used; ``str()`` is one line: ``source: path: message``."""

    def __init__(self, source: str, path: str, message: str) -> None:
        self.source = source
        self.path = path
        self.message = message
        where = f"{source}: {path}" if path else source
        super().__init__(f"{where}: {message}")


def node_name(site: str, pool: str, index: int) -> str:
    """The name of a pool's ``index``-th node: stable when the pool grows or shrinks.

    The index is padded to three digits but not to the pool size, so adding the 1001st node
    does not rename the first thousand.
    """
    return f"{site}-{pool}-{index:03d}"


@dataclass(frozen=True)
class Pool:
    """Identical nodes of one GPU model within a site."""

    name: str
    gpu: str
    nodes: int
    gpus_per_node: int
    instance_type: str

    @property
    def model(self) -> GpuModel:
        return GPU_MODELS[self.gpu]

    @property
    def gpu_count(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class Site:
    """A cloud region or an on-prem site; for on-prem sites the zones are racks."""

    name: str
    type: SiteType
    region: str
    zones: tuple[str, ...]
    pools: tuple[Pool, ...]

    @property
    def node_count(self) -> int:
        return sum(pool.nodes for pool in self.pools)

    @property
    def gpu_count(self) -> int:
        return sum(pool.gpu_count for pool in self.pools)


@dataclass(frozen=True)
class KueueOptions:
    """What the fleet asks of Kueue. ``enabled``: `gridloop local up` runs Kueue's controller
    beside the control plane, for a fleet without container nodes, where no pod of it
    could run (the chart installs Kueue by its own ``kueue.enabled``)."""

    enabled: bool = False


@dataclass(frozen=True)
class ContainerNodes:
    """Real CPU nodes beside the simulated GPU fleet: each runs a real kubelet and
    containerd, so pods on them really run. ``pod_subnet`` is an IPv4 CIDR; node ``i``
    gets its ``i``-th /24 (see ``gridloop.fleet.nodes.planned_container_nodes``)."""

    nodes: int = 1
    pod_subnet: str = DEFAULT_POD_SUBNET
    # what Kueue may admit on each node: the chart's CPU flavor "system" has nodes times
    # these as quota (the kubelet reports the host's whole CPU and memory, which the
    # platform's own pods share)
    cpu_cores: int = DEFAULT_CONTAINER_CPU_CORES
    memory_gi: int = DEFAULT_CONTAINER_MEMORY_GI


@dataclass(frozen=True)
class Fleet:
    """The whole fleet, as validated by ``parse_fleet``."""

    name: str
    sites: tuple[Site, ...]
    kueue: KueueOptions = KueueOptions()
    container_nodes: ContainerNodes | None = None

    @property
    def node_count(self) -> int:
        """GPU nodes only: the simulator and Kueue's quotas are sized by these."""
        return sum(site.node_count for site in self.sites)

    @property
    def container_node_count(self) -> int:
        return 0 if self.container_nodes is None else self.container_nodes.nodes

    @property
    def gpu_count(self) -> int:
        return sum(site.gpu_count for site in self.sites)


def load_fleet(path: str | Path) -> Fleet:
    """Read and validate a fleet file; unreadable files and bad YAML are FleetErrors too."""
    source = str(path)
    try:
        data = read_document(path, "fleet file")
    except DocumentProblem as err:
        raise FleetError(source, "", str(err)) from err
    return parse_fleet(data, source)


def parse_fleet(data: object, source: str = "fleet") -> Fleet:
    """Validate a fleet document (the YAML-shaped dict) and build the ``Fleet``."""
    top = _mapping(data, "", source, _TOP_KEYS)
    for key, expected in (("apiVersion", API_VERSION), ("kind", KIND)):
        value = _required(top, key, "", source)
        if value != expected:
            raise FleetError(source, key, f"must be {expected}, got {_show(value)}")
    metadata = _mapping(_required(top, "metadata", "", source), "metadata", source, _METADATA_KEYS)
    name = _dns_label(_required(metadata, "name", "metadata", source), "metadata.name", source)
    raw_sites = _list(_required(top, "sites", "", source), "sites", source)
    sites = tuple(_site(raw, f"sites[{i}]", source) for i, raw in enumerate(raw_sites))
    _check_unique_names(sites, source)
    kueue = _kueue(top.get("kueue", {}), source)
    container_nodes = None
    if "containerNodes" in top:
        container_nodes = _container_nodes(top["containerNodes"], source)
        if kueue.enabled:
            raise FleetError(
                source,
                "kueue.enabled",
                "must be false with containerNodes: Kueue then runs as the chart's own pod "
                "(gridloop install --profile local), not beside the control plane",
            )
    return Fleet(name=name, sites=sites, kueue=kueue, container_nodes=container_nodes)


def _kueue(data: object, source: str) -> KueueOptions:
    raw = _mapping(data, "kueue", source, _KUEUE_KEYS)
    enabled = raw.get("enabled", False)
    if not isinstance(enabled, bool):
        raise FleetError(source, "kueue.enabled", f"must be true or false, got {_show(enabled)}")
    return KueueOptions(enabled=enabled)


def _container_nodes(data: object, source: str) -> ContainerNodes:
    raw = _mapping(data, "containerNodes", source, _CONTAINER_NODE_KEYS)
    nodes = raw.get("nodes", 1)
    if not _is_int(nodes) or not 1 <= nodes <= MAX_CONTAINER_NODES:
        message = f"must be an integer from 1 to {MAX_CONTAINER_NODES}, got {_show(nodes)}"
        raise FleetError(source, "containerNodes.nodes", message)
    subnet = _pod_subnet(raw.get("podSubnet", DEFAULT_POD_SUBNET), source)
    sizes = {}
    for key, default, most in (
        ("cpuCores", DEFAULT_CONTAINER_CPU_CORES, MAX_CONTAINER_CPU_CORES),
        ("memoryGi", DEFAULT_CONTAINER_MEMORY_GI, MAX_CONTAINER_MEMORY_GI),
    ):
        value = raw.get(key, default)
        if not _is_int(value) or not 1 <= value <= most:
            message = f"must be an integer from 1 to {most}, got {_show(value)}"
            raise FleetError(source, f"containerNodes.{key}", message)
        sizes[key] = value
    return ContainerNodes(
        nodes=nodes, pod_subnet=subnet, cpu_cores=sizes["cpuCores"], memory_gi=sizes["memoryGi"]
    )


def _pod_subnet(data: object, source: str) -> str:
    path = "containerNodes.podSubnet"
    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None
    if isinstance(data, str) and "/" in data:
        try:
            network = ipaddress.ip_network(data, strict=False)
        except ValueError:
            network = None
    if network is None:
        message = f"must be an IPv4 CIDR such as {DEFAULT_POD_SUBNET}, got {_show(data)}"
        raise FleetError(source, path, message)
    if network.version != 4:
        raise FleetError(source, path, f"must be an IPv4 CIDR, got IPv6 {_show(data)}")
    low, high = POD_SUBNET_PREFIXES
    if not low <= network.prefixlen <= high:
        message = f"prefix length must be between {low} and {high}, got /{network.prefixlen}"
        raise FleetError(source, path, message)
    if network.with_prefixlen != data:
        raise FleetError(source, path, f"{data} is not a network address: use {network}")
    for used, what in (
        (SERVICE_RANGE, "Service range"),
        (SIMULATED_POD_RANGE, "simulated pods' range"),
    ):
        if network.overlaps(ipaddress.ip_network(used)):
            message = f"{data} overlaps the local cluster's {what} {used}: choose another range"
            raise FleetError(source, path, message)
    return network.with_prefixlen


def _site(data: object, path: str, source: str) -> Site:
    raw = _mapping(data, path, source, _SITE_KEYS)
    name = _dns_label(_required(raw, "name", path, source), f"{path}.name", source)
    raw_type = _required(raw, "type", path, source)
    if raw_type not in SITE_TYPES:
        raise FleetError(source, f"{path}.type", f"must be cloud or on-prem, got {_show(raw_type)}")
    site_type = cast(SiteType, raw_type)
    region = _label_value(_required(raw, "region", path, source), f"{path}.region", source)
    zones_path = f"{path}.zones"
    raw_zones = _list(_required(raw, "zones", path, source), zones_path, source)
    zones = tuple(_label_value(z, f"{zones_path}[{i}]", source) for i, z in enumerate(raw_zones))
    for i, zone in enumerate(zones):
        if zone in zones[:i]:
            raise FleetError(source, f"{zones_path}[{i}]", f"duplicate zone {zone!r}")
    pools_path = f"{path}.pools"
    raw_pools = _list(_required(raw, "pools", path, source), pools_path, source)
    pools = tuple(
        _pool(p, f"{pools_path}[{i}]", source, site_type) for i, p in enumerate(raw_pools)
    )
    return Site(name=name, type=site_type, region=region, zones=zones, pools=pools)


def _pool(data: object, path: str, source: str, site_type: SiteType) -> Pool:
    raw = _mapping(data, path, source, _POOL_KEYS)
    name = _dns_label(_required(raw, "name", path, source), f"{path}.name", source)
    gpu = _required(raw, "gpu", path, source)
    if not isinstance(gpu, str) or gpu not in GPU_MODELS:
        problem = "unknown GPU model" if isinstance(gpu, str) else "must be a GPU model name, got"
        known = ", ".join(KNOWN_GPU_MODELS)
        raise FleetError(source, f"{path}.gpu", f"{problem} {_show(gpu)} (known: {known})")
    nodes = _required(raw, "nodes", path, source)
    if not _is_int(nodes) or nodes < 0:
        raise FleetError(
            source, f"{path}.nodes", f"must be a non-negative integer, got {_show(nodes)}"
        )
    per_node = _required(raw, "gpusPerNode", path, source)
    if not _is_int(per_node) or not 1 <= per_node <= MAX_GPUS_PER_NODE:
        message = f"must be an integer from 1 to {MAX_GPUS_PER_NODE}, got {_show(per_node)}"
        raise FleetError(source, f"{path}.gpusPerNode", message)
    instance_type = raw.get("instanceType")
    if instance_type is None:
        instance_type = GPU_MODELS[gpu].instance_type(site_type)
    instance_type = _label_value(instance_type, f"{path}.instanceType", source)
    return Pool(name, gpu, nodes, per_node, instance_type)


def _check_unique_names(sites: tuple[Site, ...], source: str) -> None:
    """Site names, pool names within a site, and every node name in the fleet are unique.

    Node names join site and pool with '-', so site 'a-b' pool 'c' and site 'a' pool 'b-c'
    would produce the same nodes even though every name is unique where it is declared.
    """
    seen_sites: dict[str, int] = {}
    seen_prefixes: dict[str, str] = {}
    for s, site in enumerate(sites):
        if site.name in seen_sites:
            first = f"sites[{seen_sites[site.name]}]"
            raise FleetError(
                source, f"sites[{s}].name", f"duplicate site name {site.name!r} (also {first})"
            )
        seen_sites[site.name] = s
        seen_pools: dict[str, int] = {}
        for p, pool in enumerate(site.pools):
            path = f"sites[{s}].pools[{p}].name"
            if pool.name in seen_pools:
                first = f"sites[{s}].pools[{seen_pools[pool.name]}]"
                raise FleetError(source, path, f"duplicate pool name {pool.name!r} (also {first})")
            seen_pools[pool.name] = p
            prefix = f"{site.name}-{pool.name}"
            if prefix in seen_prefixes:
                message = f"node names {prefix}-NNN collide with {seen_prefixes[prefix]}"
                raise FleetError(source, path, message)
            seen_prefixes[prefix] = f"sites[{s}].pools[{p}]"
            longest = node_name(site.name, pool.name, max(pool.nodes - 1, 0))
            if len(longest) > MAX_NODE_NAME:
                message = (
                    f"node name {longest!r} would be {len(longest)} characters "
                    f"(at most {MAX_NODE_NAME}); shorten the site or pool name"
                )
                raise FleetError(source, path, message)


# --- small readers: each checks one shape and names the field path when it is wrong ---


def _mapping(data: object, path: str, source: str, allowed: tuple[str, ...]) -> dict[str, object]:
    if not isinstance(data, dict):
        raise FleetError(source, path, f"must be a mapping, got {_show(data)}")
    for key in data:
        if key not in allowed:
            message = f"unknown field {_show(key)} (allowed: {', '.join(allowed)})"
            raise FleetError(source, path, message)
    return cast(dict[str, object], data)


def _required(raw: Mapping[str, object], key: str, path: str, source: str) -> object:
    if key not in raw:
        raise FleetError(source, f"{path}.{key}" if path else key, "required field is missing")
    return raw[key]


def _list(data: object, path: str, source: str) -> list[object]:
    if not isinstance(data, list) or not data:
        raise FleetError(source, path, f"must be a non-empty list, got {_show(data)}")
    return cast(list[object], data)


def _dns_label(data: object, path: str, source: str) -> str:
    if not isinstance(data, str) or len(data) > 63 or not _DNS_LABEL.fullmatch(data):
        message = (
            "must be a DNS-1123 label (lowercase letters, digits and '-', starting and "
            f"ending with a letter or digit, at most 63 characters), got {_show(data)}"
        )
        raise FleetError(source, path, message)
    return data


def _label_value(data: object, path: str, source: str) -> str:
    """Regions, zones and instance types end up as label values, so they must be valid ones."""
    if not isinstance(data, str) or len(data) > 63 or not _LABEL_VALUE.fullmatch(data):
        message = (
            "must be a non-empty string usable as a Kubernetes label value (letters, digits, "
            f"'-', '_', '.', at most 63 characters), got {_show(data)}"
        )
        raise FleetError(source, path, message)
    return data


def _is_int(value: object) -> TypeGuard[int]:
    # YAML 'true' is a bool, and bool is an int in Python: never accept it as a count.
    return isinstance(value, int) and not isinstance(value, bool)


def _show(value: object) -> str:
    """A value as the user wrote it in YAML, kept to one short line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."

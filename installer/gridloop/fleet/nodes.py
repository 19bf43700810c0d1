"""The nodes a fleet describes, and the Kubernetes Node object for each.

The local cluster creates these Nodes and kwok pretends to be their kubelets, so a node
here must look like a real GPU node to everything above it: the well-known topology
labels, the labels NVIDIA GPU Feature Discovery would add, ``nvidia.com/gpu`` capacity,
and an allocatable a little below capacity as a real kubelet reserves. Label keys are
module constants so the chart renderer, the health service and the simulator import them
instead of retyping strings.

The fleet's optional container nodes are the exception: real CPU nodes, each with a real
kubelet and containerd, planned here too (``planned_container_nodes``) so their names,
pod ranges and labels are decided in one place.

Everything here is pure: fleet in, plain data out. Creating the Nodes is someone else's
job, and this module must never talk to the cluster.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gridloop import names
from gridloop.fleet.catalog import GPU_MODELS
from gridloop.fleet.schema import Fleet, SiteType, node_name

LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_OS = "kubernetes.io/os"
LABEL_ARCH = "kubernetes.io/arch"
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_REGION = "topology.kubernetes.io/region"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_GPU_PRESENT = names.GPU_PRESENT_LABEL
LABEL_GPU_PRODUCT = names.GPU_PRODUCT_LABEL
LABEL_GPU_COUNT = names.GPU_COUNT_LABEL
LABEL_GPU_MEMORY = names.GPU_MEMORY_LABEL
LABEL_SITE = names.SITE_LABEL
LABEL_SITE_TYPE = names.SITE_TYPE_LABEL
LABEL_POOL = names.POOL_LABEL
# The kwok controller is started with a node selector on this label: it manages exactly
# the nodes gridloop simulates and leaves any real node alone.
SIMULATED_LABEL = "gridloop.io/simulated"
# On the nodes with a real kubelet (containerNodes). A kubelet sets its own labels with
# --node-labels, and the NodeRestriction admission plugin refuses kubernetes.io and k8s.io
# keys there, so every label a container node gets is in gridloop.io.
CONTAINER_NODE_LABEL = "gridloop.io/container-node"
CONTAINER_NODE_POOL = "system"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
RESOURCE_GPU = names.GPU_RESOURCE
# Every GPU node carries this taint, as the managed clouds' GPU pools do (GKE:
# nvidia.com/gpu=present:NoSchedule): a pod that does not ask for a GPU goes to a CPU node.
# Pods that do ask get the toleration from the API server's ExtendedResourceToleration
# admission plugin; CPU-only pods Kueue admits on a GPU flavor get it from the flavor.
GPU_TAINT = {"key": RESOURCE_GPU, "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": RESOURCE_GPU, "operator": "Exists", "effect": "NoSchedule"}

PODS_PER_NODE = 110
EPHEMERAL_STORAGE_GI = 500

_KI_PER_GI = 1024 * 1024
# Kubelet reserve, as the large managed services size it (GKE's published tiers): a share
# of each successive slice of the node, (slice size or None for the rest, basis points).
_CPU_RESERVE_TIERS: tuple[tuple[int | None, int], ...] = (
    (1000, 600),
    (1000, 100),
    (2000, 50),
    (None, 25),
)
_MEMORY_RESERVE_TIERS: tuple[tuple[int | None, int], ...] = (
    (4 * _KI_PER_GI, 2500),
    (4 * _KI_PER_GI, 2000),
    (8 * _KI_PER_GI, 1000),
    (112 * _KI_PER_GI, 600),
    (None, 200),
)
_MEMORY_EVICTION_KI = 100 * 1024
# The kubelet's default hard eviction threshold nodefs.available<10%.
_EPHEMERAL_ALLOCATABLE_PERCENT = 90


@dataclass(frozen=True)
class PlannedNode:
    """One node of the fleet, with everything needed to render or simulate it."""

    name: str
    site: str
    site_type: SiteType
    region: str
    zone: str
    pool: str
    index: int
    gpu: str
    gpus: int
    instance_type: str
    cpu_cores: int
    memory_gi: int

    @property
    def product(self) -> str:
        return GPU_MODELS[self.gpu].product

    @property
    def gpu_memory_mib(self) -> int:
        return GPU_MODELS[self.gpu].memory_mib

    @property
    def labels(self) -> dict[str, str]:
        return {
            LABEL_HOSTNAME: self.name,
            LABEL_OS: "linux",
            LABEL_ARCH: "amd64",
            LABEL_INSTANCE_TYPE: self.instance_type,
            LABEL_REGION: self.region,
            LABEL_ZONE: self.zone,
            LABEL_GPU_PRESENT: "true",
            LABEL_GPU_PRODUCT: self.product,
            LABEL_GPU_COUNT: str(self.gpus),
            LABEL_GPU_MEMORY: str(self.gpu_memory_mib),
            LABEL_SITE: self.site,
            LABEL_SITE_TYPE: self.site_type,
            LABEL_POOL: self.pool,
            SIMULATED_LABEL: "true",
        }


def iter_planned_nodes(fleet: Fleet) -> Iterator[PlannedNode]:
    """Every node of the fleet, site by site and pool by pool, in file order.

    Node ``i`` of the ``p``-th pool of a site goes to zone ``(p + i) % len(zones)``: each
    pool is spread evenly, pools of one node do not all land in the first zone, and growing
    one pool never moves an existing node (its name and zone stay the same).
    """
    for site in fleet.sites:
        for p, pool in enumerate(site.pools):
            model = GPU_MODELS[pool.gpu]
            for i in range(pool.nodes):
                yield PlannedNode(
                    name=node_name(site.name, pool.name, i),
                    site=site.name,
                    site_type=site.type,
                    region=site.region,
                    zone=site.zones[(p + i) % len(site.zones)],
                    pool=pool.name,
                    index=i,
                    gpu=pool.gpu,
                    gpus=pool.gpus_per_node,
                    instance_type=pool.instance_type,
                    # The catalog sizes an 8-GPU node; other shapes scale with their GPUs.
                    cpu_cores=max(1, model.cpu_cores * pool.gpus_per_node // 8),
                    memory_gi=max(1, model.memory_gi * pool.gpus_per_node // 8),
                )


def planned_nodes(fleet: Fleet) -> list[PlannedNode]:
    """All nodes of the fleet as a list (see ``iter_planned_nodes`` for order and zones)."""
    return list(iter_planned_nodes(fleet))


@dataclass(frozen=True)
class PlannedContainerNode:
    """One real CPU node: its pods get addresses from ``pod_cidr`` on a local bridge whose
    gateway, ``node_ip``, is also the node's InternalIP."""

    name: str
    index: int
    pod_cidr: str
    node_ip: str

    @property
    def gateway(self) -> str:
        return self.node_ip

    @property
    def labels(self) -> dict[str, str]:
        return {LABEL_POOL: CONTAINER_NODE_POOL, CONTAINER_NODE_LABEL: "true"}


def container_node_name(index: int) -> str:
    """``system-000``, ``system-001``, ...: never a GPU node's name, which joins a site and a
    pool with '-' before its index and so has at least two '-' where this has one."""
    return f"{CONTAINER_NODE_POOL}-{index:03d}"


def planned_container_nodes(fleet: Fleet) -> list[PlannedContainerNode]:
    """The fleet's container nodes (none when it has no ``containerNodes``); node ``i``
    gets the ``i``-th /24 of ``podSubnet`` and that range's first host address."""
    if fleet.container_nodes is None:
        return []
    subnet = ipaddress.IPv4Network(fleet.container_nodes.pod_subnet)
    ranges = subnet.subnets(new_prefix=24)
    planned = []
    for index in range(fleet.container_nodes.nodes):
        pod_cidr = next(ranges)
        planned.append(
            PlannedContainerNode(
                name=container_node_name(index),
                index=index,
                pod_cidr=pod_cidr.with_prefixlen,
                node_ip=str(pod_cidr.network_address + 1),
            )
        )
    return planned


def node_manifest(planned: PlannedNode) -> dict[str, Any]:
    """A v1 Node for kwok to manage, as a plain dict ready to create or apply.

    The GPU taint (``GPU_TAINT``) and no kubeletVersion: kwok fills in what a kubelet would
    report.
    """
    memory_ki = planned.memory_gi * _KI_PER_GI
    storage_ki = EPHEMERAL_STORAGE_GI * _KI_PER_GI
    cpu_millis = planned.cpu_cores * 1000
    capacity = {
        "cpu": str(planned.cpu_cores),
        "memory": f"{memory_ki}Ki",
        "pods": str(PODS_PER_NODE),
        "ephemeral-storage": f"{storage_ki}Ki",
        RESOURCE_GPU: str(planned.gpus),
    }
    memory_reserved = _reserve(memory_ki, _MEMORY_RESERVE_TIERS) + _MEMORY_EVICTION_KI
    allocatable = {
        "cpu": f"{cpu_millis - _reserve(cpu_millis, _CPU_RESERVE_TIERS)}m",
        "memory": f"{memory_ki - memory_reserved}Ki",
        "pods": str(PODS_PER_NODE),
        "ephemeral-storage": f"{storage_ki * _EPHEMERAL_ALLOCATABLE_PERCENT // 100}Ki",
        RESOURCE_GPU: str(planned.gpus),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": planned.name,
            "labels": planned.labels,
            "annotations": {KWOK_NODE_ANNOTATION: "fake"},
        },
        "spec": {"taints": [dict(GPU_TAINT)]},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"},
        },
    }


def _reserve(amount: int, tiers: tuple[tuple[int | None, int], ...]) -> int:
    """The part of ``amount`` held back: each tier takes its basis points of its slice."""
    reserved, left = 0, amount
    for size, basis_points in tiers:
        part = left if size is None else min(left, size)
        reserved += part * basis_points // 10_000
        left -= part
    return reserved

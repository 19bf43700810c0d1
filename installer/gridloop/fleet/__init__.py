"""The fleet: the one place the GPU fleet (sites, pools, GPU models) is described.

A fleet file is parsed and validated here (``schema``: ``load_fleet``, ``parse_fleet``),
expanded into the nodes it describes (``nodes``: ``planned_nodes``, and the real CPU nodes
``planned_container_nodes``) and rendered as the Node objects kwok simulates
(``node_manifest``). ``host_networks`` tells whether the container nodes' pod range
overlaps a network of this host. The chart's Kueue objects, the DCGM simulator and the
dashboards derive from the same ``Fleet``, so a GPU model, a label key or a node name is
defined once, here.

This package is a pure core: it reads a file, or the host's addresses and routes
(``host_networks.read_host_networks``), when asked to, and otherwise only turns data into
data. It must never talk to a cluster.
"""

from gridloop.fleet.catalog import GPU_MODELS, KNOWN_GPU_MODELS, GpuModel, gpu_model
from gridloop.fleet.generate import dump_fleet, generate_fleet
from gridloop.fleet.nodes import (
    CONTAINER_NODE_LABEL,
    GPU_TAINT,
    GPU_TOLERATION,
    KWOK_NODE_ANNOTATION,
    LABEL_ARCH,
    LABEL_GPU_COUNT,
    LABEL_GPU_MEMORY,
    LABEL_GPU_PRESENT,
    LABEL_GPU_PRODUCT,
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_OS,
    LABEL_POOL,
    LABEL_REGION,
    LABEL_SITE,
    LABEL_SITE_TYPE,
    LABEL_ZONE,
    RESOURCE_GPU,
    SIMULATED_LABEL,
    PlannedContainerNode,
    PlannedNode,
    container_node_name,
    iter_planned_nodes,
    node_manifest,
    planned_container_nodes,
    planned_nodes,
)
from gridloop.fleet.schema import (
    API_VERSION,
    KIND,
    SITE_TYPES,
    ContainerNodes,
    Fleet,
    FleetError,
    KueueOptions,
    Pool,
    Site,
    SiteType,
    load_fleet,
    node_name,
    parse_fleet,
)

__all__ = [
    "API_VERSION",
    "CONTAINER_NODE_LABEL",
    "GPU_MODELS",
    "GPU_TAINT",
    "GPU_TOLERATION",
    "KIND",
    "KNOWN_GPU_MODELS",
    "KWOK_NODE_ANNOTATION",
    "LABEL_ARCH",
    "LABEL_GPU_COUNT",
    "LABEL_GPU_MEMORY",
    "LABEL_GPU_PRESENT",
    "LABEL_GPU_PRODUCT",
    "LABEL_HOSTNAME",
    "LABEL_INSTANCE_TYPE",
    "LABEL_OS",
    "LABEL_POOL",
    "LABEL_REGION",
    "LABEL_SITE",
    "LABEL_SITE_TYPE",
    "LABEL_ZONE",
    "RESOURCE_GPU",
    "SIMULATED_LABEL",
    "SITE_TYPES",
    "ContainerNodes",
    "Fleet",
    "FleetError",
    "GpuModel",
    "KueueOptions",
    "PlannedContainerNode",
    "PlannedNode",
    "Pool",
    "Site",
    "SiteType",
    "container_node_name",
    "dump_fleet",
    "generate_fleet",
    "gpu_model",
    "iter_planned_nodes",
    "load_fleet",
    "node_manifest",
    "node_name",
    "parse_fleet",
    "planned_container_nodes",
    "planned_nodes",
]

"""The well-known names gridloop's parts agree on, each written once here (as Kubernetes
keeps its well-known labels and taints in one file): the installer's defaults, the local
cluster, the status view, the loop and the health service read them from this module.

Plain constants and nothing else: the health service's image installs gridloop with its
base dependencies only, and imports this module there."""

from __future__ import annotations

# where `gridloop install` puts the release when no --namespace/--release is given
DEFAULT_NAMESPACE = "gridloop-system"
DEFAULT_RELEASE = "gridloop"
# a learning-loop run's name: a path segment in three buckets and a label value (1-40 of
# a-z, 0-9 and '-', a letter or digit at each end); the loop and the store's keys check it
RUN_NAME = r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$"
# the Prometheus job of the DCGM exporters (the chart's ServiceMonitor, the local
# cluster's scrape config): the health service and the status view read its `up`
EXPORTER_JOB = "dcgm-exporter"
# the taint the health service quarantines a GPU node with: no model server or job may
# tolerate it, the DCGM exporter always does (it must see the GPUs to release the node)
QUARANTINE_TAINT_KEY = "gridloop.io/gpu-unhealthy"
# what else of a node the health service owns (the chart's admission policy lets its
# ServiceAccount change on a node only these, the taint and spec.unschedulable): its state
# label and the annotations of its record
HEALTH_STATE_LABEL = "gridloop.io/gpu-health"
HEALTH_ANNOTATION_PREFIX = "health.gridloop.io/"

# the resource and node labels of NVIDIA's device plugin and GPU Feature Discovery, which
# gridloop's simulated nodes carry as real ones do
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
# gridloop's node labels: the fleet file's site, its type (cloud, on-prem) and pool
SITE_LABEL = "gridloop.io/site"
SITE_TYPE_LABEL = "gridloop.io/site-type"
POOL_LABEL = "gridloop.io/pool"
# a node with this label set to "true" is one the health service never quarantines (the
# policy's default opt-out label; policies/health.yaml may name another)
OPT_OUT_LABEL = "gridloop.io/health-opt-out"
# a model server's pods (the chart's pod template) and the revision they serve
MODEL_LABEL = "gridloop.io/model"
MODEL_REVISION = "gridloop.io/model-revision"
# the objects the local cluster makes for itself (DNS, Prometheus, network policy, Kueue)
LOCAL_COMPONENT_LABEL = "gridloop.io/local-component"

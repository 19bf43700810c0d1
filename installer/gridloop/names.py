"""The well-known names gridloop's parts agree on, each written once here (as Kubernetes
keeps its well-known labels and taints in one file): the installer's defaults, the local
cluster, the status view, the loop and the health service read them from this module.

Plain constants and nothing else: the health service's image installs gridloop with its
base dependencies only, and imports this module there."""

from __future__ import annotations

# where `gridloop install` puts the release when no --namespace/--release is given
DEFAULT_NAMESPACE = "gridloop-system"
DEFAULT_RELEASE = "gridloop"
# the Prometheus job of the DCGM exporters (the chart's ServiceMonitor, the local
# cluster's scrape config): the health service and the status view read its `up`
EXPORTER_JOB = "dcgm-exporter"
# the taint the health service quarantines a GPU node with: no model server or job may
# tolerate it, the DCGM exporter always does (it must see the GPUs to release the node)
QUARANTINE_TAINT_KEY = "gridloop.io/gpu-unhealthy"

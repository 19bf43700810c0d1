"""Services in the cluster that lead to processes on the host (pure): a selectorless
Service's EndpointSlice pointing at a bridge address. The container nodes' DNS and
Prometheus (container/addons.py) and the object store use it."""

from __future__ import annotations

from typing import Any


def host_endpoint_slice(
    namespace: str,
    service: str,
    labels: dict[str, str],
    backend: str,
    ports: list[dict[str, Any]],
) -> dict[str, Any]:
    """The EndpointSlice that makes a selectorless Service point at a process on the host
    (`backend`, a bridge address), on `ports`."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{service}-host",
            "namespace": namespace,
            "labels": {
                **labels,
                "kubernetes.io/service-name": service,
                "endpointslice.kubernetes.io/managed-by": "gridloop.io",
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [backend], "conditions": {"ready": True}}],
        "ports": ports,
    }

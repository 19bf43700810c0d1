"""Where Prometheus finds the chart's pods on the local cluster (HTTP service discovery).

An in-cluster Prometheus finds Kueue's and the health service's pods with
`kubernetes_sd_configs`; Debian's Prometheus, the one the local cluster runs, is built
without that discovery. So the local helper server (gridloop.sim.server, with
--kubeconfig) answers Prometheus's `http_sd_configs` at /discovery/<job> from the
cluster's EndpointSlices: one target per ready endpoint on the named port, labelled with
its namespace, pod and Service, as kubernetes_sd relabelling usually labels them.

`targets` decides (pure); `discover` reads the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gridloop import names

SERVICE_NAME = "kubernetes.io/service-name"


@dataclass(frozen=True)
class Job:
    """Pods behind the Services in `namespace` (None: all) matching `selector` (a label
    selector) or named `service`, scraped on their port named `port`."""

    port: str
    namespace: str | None = None
    service: str | None = None
    selector: str | None = None


# the jobs prometheus_config.prometheus_config points at /discovery/<name>
JOBS = {
    "kueue": Job(
        port="https", namespace="kueue-system", service="kueue-controller-manager-metrics-service"
    ),
    "health": Job(port="metrics", selector="app.kubernetes.io/component=health"),
    # the chart's model servers (real vLLM pods on the container nodes): their Services
    # carry gridloop.io/model, and vLLM serves /metrics on the API port
    "vllm": Job(port="http", selector=names.MODEL_LABEL),
}


def targets(
    services: Iterable[tuple[str, str]], slices: Iterable[Mapping[str, Any]], port: str
) -> list[dict[str, Any]]:
    """Prometheus http_sd target groups: one per ready endpoint of a slice of one of
    `services` ((namespace, name) pairs) that has a port named `port`."""
    wanted = set(services)
    groups: list[dict[str, Any]] = []
    for s in slices:
        meta = s.get("metadata") or {}
        namespace = meta.get("namespace", "")
        service = (meta.get("labels") or {}).get(SERVICE_NAME, "")
        numbers = {p.get("name"): p.get("port") for p in s.get("ports") or []}
        if (namespace, service) not in wanted or numbers.get(port) is None:
            continue
        for endpoint in s.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready") is False:
                continue
            ref = endpoint.get("targetRef") or {}
            labels = {"namespace": namespace, "service": service}
            if ref.get("kind") == "Pod":
                labels["pod"] = ref.get("name", "")
            for address in endpoint.get("addresses") or []:
                groups.append({"targets": [f"{address}:{numbers[port]}"], "labels": labels})
    return sorted(groups, key=lambda g: g["targets"][0])


def discover(api: Any, job: Job) -> list[dict[str, Any]]:
    """The target groups of `job` on the cluster `api` (a kubernetes ApiClient) reaches,
    read now."""
    from gridloop.kube import get

    core = f"/api/v1/namespaces/{job.namespace}" if job.namespace else "/api/v1"
    query = {"labelSelector": job.selector} if job.selector else {}
    if job.service:
        query["fieldSelector"] = f"metadata.name={job.service}"
    services = get(api, f"{core}/services", query).get("items") or []
    pairs = [(s["metadata"]["namespace"], s["metadata"]["name"]) for s in services]
    if not pairs:
        return []
    discovery = core.replace("/api/v1", "/apis/discovery.k8s.io/v1")
    slices = get(api, f"{discovery}/endpointslices").get("items") or []
    return targets(pairs, slices, job.port)

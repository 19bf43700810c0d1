"""The local Prometheus' configuration: its scrape jobs (the simulated exporters, Kueue,
the health service, the workloads' pods through the helper's discovery) and the
alerting rules it loads (pure: ports and paths in, a config document out)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gridloop import names
from gridloop.local.ports import LOOPBACK, Ports

SCRAPE_INTERVAL = "5s"
# gridloop.sim.label_shapes: what the chart's exporter at the pinned 4.6.0-4.8.3 writes
# with NODE_NAME (4.8.3 renamed Hostname to hostname; err_code/err_msg on XIDs)
LABEL_SHAPE = "lowercase"
EXPORTER_JOB = names.EXPORTER_JOB
KUEUE_JOB = "kueue"
# the chart's: where a host health process keeps its state
HEALTH_NAMESPACE = names.DEFAULT_NAMESPACE


# the simulated workloads and the health service, each scraped as its own job
HEALTH_JOB = "gridloop-health"
VLLM_JOB = "vllm"
SANDBOX_JOB = "agent-sandbox"
KSM_JOB = "kube-state-metrics"
# alerting rules Prometheus loads (relative to its config file; reloaded on SIGHUP)
RULES_GLOB = "rules/*.yml"


def prometheus_config(
    ports: Ports,
    nodes: list[str],
    kueue_token: Path | None = None,
    ca: Path | None = None,
    places: Mapping[str, tuple[str, str]] | None = None,
    workloads: bool = False,
    pods: bool = False,
    settings: Mapping[str, str] | None = None,
) -> dict[str, object]:
    """Scrape each simulated node's exporter as its own target, labelled with its node
    (and, from `places`, its `site` and `pool`, as the chart's relabelling does);
    with `kueue_token`, also Kueue's HTTPS /metrics with that bearer token, checked
    against the cluster CA `ca` that signed Kueue's serving certificate. With
    `workloads`, also the health service, the simulated vLLM replicas, agent-sandbox
    controller and kube-state-metrics (gridloop.sim.workloads), and the rules in
    RULES_GLOB. With `pods` (container nodes run the chart's pods), Kueue and the
    health service are also found as pods (sim/pod_discovery.py) and scraped at their pod
    addresses on the bridge, as an in-cluster Prometheus would. `settings` go into the
    config's `global` section over the defaults (a benchmark's scrape interval, its query
    log), so Prometheus starts with them: no reload while the cluster is young."""
    where = places or {}
    jobs: list[dict[str, object]] = [
        {
            "job_name": EXPORTER_JOB,
            "static_configs": [
                {
                    "targets": [f"{LOOPBACK}:{ports.dcgm_sim}"],
                    "labels": {
                        "node": node,
                        "instance": node,
                        "__metrics_path__": f"/nodes/{node}/metrics",
                        **(
                            {"site": where[node][0], "pool": where[node][1]}
                            if node in where
                            else {}
                        ),
                    },
                }
                for node in nodes
            ],
        }
    ]
    if pods and kueue_token is not None:
        jobs.append(kueue_pods_job(ports, kueue_token))
    elif kueue_token is not None:
        jobs.append(
            {
                "job_name": KUEUE_JOB,
                "scheme": "https",
                "authorization": {"credentials_file": str(kueue_token)},
                "tls_config": {"ca_file": str(ca)},
                "static_configs": [{"targets": [f"{LOOPBACK}:{ports.kueue_metrics}"]}],
            }
        )
    config: dict[str, object] = {
        "global": {
            "scrape_interval": SCRAPE_INTERVAL,
            "evaluation_interval": SCRAPE_INTERVAL,
            **(settings or {}),
        },
        "scrape_configs": jobs,
    }
    if workloads:
        jobs.extend(_workload_jobs(ports, pods))
        config["rule_files"] = [RULES_GLOB]
    return config


DISCOVERY_REFRESH = "5s"  # how often Prometheus re-reads the pods behind a job


def _discovered(ports: Ports, name: str) -> list[dict[str, object]]:
    """HTTP service discovery of the pods of pod_discovery.JOBS[name], as answered by the
    local helper server (Debian's Prometheus has no kubernetes_sd_configs)."""
    url = f"http://{LOOPBACK}:{ports.dcgm_sim}/discovery/{name}"
    return [{"url": url, "refresh_interval": DISCOVERY_REFRESH}]


def kueue_pods_job(ports: Ports, token: Path) -> dict[str, object]:
    """Kueue's controller pods' HTTPS /metrics, with the scraper's bearer token. Kueue
    serves them with a certificate it signs itself at start, which no CA here knows:
    the connection is encrypted but the server not verified (as kube-prometheus-stack
    does for controller-runtime metrics)."""
    return {
        "job_name": KUEUE_JOB,
        "scheme": "https",
        "authorization": {"credentials_file": str(token)},
        "tls_config": {"insecure_skip_verify": True},
        "http_sd_configs": _discovered(ports, "kueue"),
    }


def _health_job(ports: Ports, pods: bool) -> dict[str, object]:
    """The health service on its loopback port (a host process or a test's), and with
    `pods` every pod behind a Service labelled component=health, on its metrics port."""
    job: dict[str, object] = {
        "job_name": HEALTH_JOB,
        "static_configs": [{"targets": [f"{LOOPBACK}:{ports.health}"]}],
    }
    if pods:
        job["http_sd_configs"] = _discovered(ports, "health")
    return job


def _vllm_job(
    ports: Ports, sim: str, simulated: list[tuple[str, str]], pods: bool
) -> dict[str, object]:
    """vLLM's /metrics: the simulated model servers of the kwok GPU nodes (served by the
    helper server), and with `pods` the real ones the chart runs on the container nodes."""
    job: dict[str, object] = {
        "job_name": VLLM_JOB,
        "static_configs": [
            {
                "targets": [sim],
                "labels": {
                    "namespace": namespace,
                    "pod": pod,
                    "instance": pod,
                    "__metrics_path__": f"/workloads/vllm/{pod}/metrics",
                },
            }
            for namespace, pod in simulated
        ],
    }
    if pods:
        job["http_sd_configs"] = _discovered(ports, "vllm")
    return job


def _workload_jobs(ports: Ports, pods: bool = False) -> list[dict[str, object]]:
    from gridloop.sim.workloads import vllm_pods  # here: `gridloop status` reads Ports only

    sim = f"{LOOPBACK}:{ports.dcgm_sim}"
    return [
        _health_job(ports, pods),
        _vllm_job(ports, sim, vllm_pods(), pods),
        {
            "job_name": SANDBOX_JOB,
            "metrics_path": "/workloads/agent-sandbox/metrics",
            "static_configs": [{"targets": [sim]}],
        },
        {
            "job_name": KSM_JOB,
            "metrics_path": "/workloads/kube-state-metrics/metrics",
            # kube-state-metrics' own namespace/pod labels are the objects', not the target's
            "honor_labels": True,
            "static_configs": [{"targets": [sim]}],
        },
    ]

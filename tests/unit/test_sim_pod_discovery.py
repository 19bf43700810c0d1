"""Prometheus's HTTP service discovery of the chart's pods on the local cluster, and what
the container nodes add to Prometheus and the API server (pure)."""

from __future__ import annotations

from pathlib import Path

from gridloop.chart import readiness
from gridloop.local import flags, prometheus_config
from gridloop.local.container import addons
from gridloop.local.ports import Ports
from gridloop.sim.pod_discovery import JOBS, targets


def _slice(namespace: str, service: str, port: str, *endpoints: dict) -> dict:
    return {
        "metadata": {"namespace": namespace, "labels": {"kubernetes.io/service-name": service}},
        "ports": [{"name": port, "port": 9464}],
        "endpoints": list(endpoints),
    }


def _endpoint(address: str, pod: str, ready: bool = True) -> dict:
    return {
        "addresses": [address],
        "conditions": {"ready": ready},
        "targetRef": {"kind": "Pod", "name": pod},
    }


def test_each_ready_pod_of_a_wanted_service_is_a_target_labelled_with_its_pod() -> None:
    slices = [
        _slice(
            "gl", "gl-health", "metrics", _endpoint("10.200.0.4", "b"), _endpoint("10.200.0.3", "a")
        ),
        _slice("gl", "gl-health", "metrics", _endpoint("10.200.0.9", "starting", ready=False)),
        _slice("other", "gl-health", "metrics", _endpoint("10.200.0.7", "theirs")),
    ]

    found = targets([("gl", "gl-health")], slices, "metrics")

    assert found == [
        {
            "targets": ["10.200.0.3:9464"],
            "labels": {"namespace": "gl", "service": "gl-health", "pod": "a"},
        },
        {
            "targets": ["10.200.0.4:9464"],
            "labels": {"namespace": "gl", "service": "gl-health", "pod": "b"},
        },
    ]


def test_a_slice_without_the_named_port_gives_no_target() -> None:
    slices = [_slice("gl", "gl-health", "http", _endpoint("10.200.0.4", "b"))]

    assert targets([("gl", "gl-health")], slices, "metrics") == []


def test_the_jobs_name_kueues_metrics_service_and_the_charts_health_component() -> None:
    assert JOBS["kueue"].service == "kueue-controller-manager-metrics-service"
    assert JOBS["kueue"].namespace == "kueue-system" and JOBS["kueue"].port == "https"
    assert JOBS["health"].selector == "app.kubernetes.io/component=health"


def test_with_container_nodes_prometheus_finds_kueue_and_health_pods_through_discovery() -> None:
    ports = Ports.from_base(41000)

    config = prometheus_config.prometheus_config(
        ports, ["a-0"], Path("/s/token"), workloads=True, pods=True
    )

    jobs = {j["job_name"]: j for j in config["scrape_configs"]}  # type: ignore[attr-defined]
    sd = f"http://127.0.0.1:{ports.dcgm_sim}/discovery/"
    assert jobs["kueue"]["http_sd_configs"] == [{"url": sd + "kueue", "refresh_interval": "5s"}]
    assert jobs["kueue"]["authorization"] == {"credentials_file": "/s/token"}
    assert jobs["gridloop-health"]["http_sd_configs"][0]["url"] == sd + "health"
    # a health service in this process (the tests') or on the host is still scraped
    assert jobs["gridloop-health"]["static_configs"] == [{"targets": [f"127.0.0.1:{ports.health}"]}]


def test_prometheus_listens_on_every_address_only_for_container_nodes() -> None:
    ports = Ports.from_base(41000)
    alone = flags.prometheus(Path("p"), ports, Path("c"), Path("d"))
    shared = flags.prometheus(Path("p"), ports, Path("c"), Path("d"), every_address=True)

    assert f"--web.listen-address=127.0.0.1:{ports.prometheus}" in alone
    assert f"--web.listen-address=0.0.0.0:{ports.prometheus}" in shared


def test_the_prometheus_service_has_the_name_a_users_url_uses_and_points_at_the_host() -> None:
    namespace, service, endpoints = addons.prometheus_objects("10.200.0.1", 26406)

    assert namespace["metadata"]["name"] == "monitoring"
    assert service["metadata"]["name"] == "kube-prometheus-stack-prometheus"
    assert "selector" not in service["spec"]
    assert service["spec"]["ports"] == [{"name": "http-web", "port": 9090, "protocol": "TCP"}]
    assert (
        endpoints["metadata"]["labels"]["kubernetes.io/service-name"] == service["metadata"]["name"]
    )
    assert endpoints["endpoints"][0]["addresses"] == ["10.200.0.1"]
    assert endpoints["ports"] == [{"name": "http-web", "port": 26406, "protocol": "TCP"}]


def test_the_audit_log_records_service_accounts_changing_nodes_and_cluster_queues() -> None:
    policy = flags.audit_policy()
    argv = flags.apiserver(
        Path("kube-apiserver"), Ports.from_base(41000), Path("/pki"), None, (Path("p"), Path("l"))
    )

    first, last = policy["rules"]  # type: ignore[misc]
    assert first["userGroups"] == ["system:serviceaccounts"]
    assert {"group": "kueue.x-k8s.io", "resources": ["clusterqueues"]} in first["resources"]
    assert last == {"level": "None"}
    assert "--audit-policy-file=p" in argv and "--audit-log-path=l" in argv


def test_a_fail_closed_service_webhook_without_a_ca_bundle_is_named() -> None:
    live = {
        "webhooks": [
            {"name": "a.kb.io", "clientConfig": {"service": {"name": "s"}, "caBundle": "Zm9v"}},
            {"name": "b.kb.io", "clientConfig": {"service": {"name": "s"}}},
            {"name": "c.kb.io", "failurePolicy": "Ignore", "clientConfig": {"service": {}}},
            {"name": "d.kb.io", "clientConfig": {"url": "https://x"}},
        ]
    }

    assert readiness.without_ca(live) == ["b.kb.io"]
    assert readiness.without_ca(None) == ["(not found)"]

"""The local cluster's DNS is a pod the chart's DNS rule selects, run as little as it can."""

from __future__ import annotations

from typing import Any

import yaml
from chart_files import CHART

from gridloop.local.build.images import table
from gridloop.local.container import addons
from gridloop.local.container.configs import CLUSTER_DOMAIN

OBJECTS = addons.dns_objects("10.96.0.0/16", table.coredns_ref(), nodes=1)


def of_kind(kind: str) -> dict[str, Any]:
    (found,) = [o for o in OBJECTS if o["kind"] == kind]
    return found


def test_the_charts_default_dns_rule_selects_the_local_coredns_pod() -> None:
    dns = yaml.safe_load((CHART / "values.yaml").read_text())["agentSandbox"]["network"]["dns"]
    deployment = of_kind("Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["metadata"]["namespace"] == dns["namespace"]
    assert dns["podLabels"].items() <= pod_labels.items()
    ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert {(p["containerPort"], p["protocol"]) for p in ports} == {(53, "UDP"), (53, "TCP")}


def test_the_kube_dns_service_selects_that_pod_on_the_tenth_address() -> None:
    service = of_kind("Service")
    assert service["metadata"]["name"] == "kube-dns"
    assert service["spec"]["clusterIP"] == "10.96.0.10"
    labels = of_kind("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert not [o for o in OBJECTS if o["kind"] == "EndpointSlice"], "no host backend"


def test_coredns_runs_non_root_with_no_capability_and_port_53_by_sysctl() -> None:
    spec = of_kind("Deployment")["spec"]["template"]["spec"]
    pod, (container,) = spec["securityContext"], spec["containers"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] != 0
    assert pod["sysctls"] == [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "53"}]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
    }
    assert container["image"] == table.coredns_ref()
    binding = of_kind("ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}
    ]
    verbs = {v for rule in of_kind("ClusterRole")["rules"] for v in rule["verbs"]}
    assert verbs == {"list", "watch"}


def test_the_corefile_answers_the_cluster_domain_only_and_a_new_one_is_a_new_pod() -> None:
    corefile = of_kind("ConfigMap")["data"]["Corefile"]
    assert f"kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa" in corefile
    assert not [line for line in corefile.splitlines() if line.strip().startswith("forward")]
    annotations = of_kind("Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert set(annotations) == {"gridloop.io/corefile-sha256"}


def test_a_replica_on_each_container_node_so_a_node_lost_leaves_dns() -> None:
    (two,) = [
        o for o in addons.dns_objects("10.96.0.0/16", "x", nodes=2) if o["kind"] == "Deployment"
    ]
    assert two["spec"]["replicas"] == 2
    (spread,) = two["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert (spread["topologyKey"], spread["maxSkew"]) == ("kubernetes.io/hostname", 1)
    assert spread["whenUnsatisfiable"] == "DoNotSchedule"

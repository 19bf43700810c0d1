"""The probe pair doctor --probe-network makes, and what it concludes from its client."""

from __future__ import annotations

import pytest

from gridloop.chart import network_probe
from gridloop.chart.diagnosis import Status

ISSUER = {
    "kind": "Deployment",
    "metadata": {"name": "sandbox-token-issuer"},
    "spec": {
        "template": {
            "spec": {
                "nodeSelector": {"gridloop.io/container-node": "true"},
                "tolerations": [{"key": "system", "operator": "Exists"}],
                "securityContext": {"runAsUser": 65532, "runAsNonRoot": True},
                "containers": [
                    {
                        "name": "issuer",
                        "image": "registry.example/gridloop/gridloop@sha256:abc",
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["gridloop", "sandboxes", "issue-tokens"],
                    }
                ],
            }
        }
    },
}
HEALTH = {**ISSUER, "metadata": {"name": "health"}}


def test_the_pods_run_gridloops_image_where_the_chart_runs_it() -> None:
    template = network_probe.pod_template([{"kind": "Service"}, HEALTH, ISSUER])
    assert template is not None
    server = network_probe.pod(template, "ns", "closed")
    spec = server["spec"]
    (container,) = spec["containers"]
    assert container["image"] == "registry.example/gridloop/gridloop@sha256:abc"
    assert spec["nodeSelector"] == {"gridloop.io/container-node": "true"}
    assert spec["tolerations"] == [{"key": "system", "operator": "Exists"}]
    assert spec["securityContext"]["runAsUser"] == 65532
    assert container["readinessProbe"] == {"tcpSocket": {"port": 8080}, "periodSeconds": 1}
    assert server["metadata"]["labels"] == {network_probe.LABEL: "closed"}
    assert spec["automountServiceAccountToken"] is False


def test_the_client_is_given_the_two_addresses_and_has_no_listener() -> None:
    template = network_probe.pod_template([ISSUER])
    assert template is not None
    client = network_probe.pod(template, "ns", "client", ["10.0.0.5", "10.0.0.6"])
    (container,) = client["spec"]["containers"]
    assert container["command"][-2:] == ["10.0.0.5", "10.0.0.6"]
    assert "readinessProbe" not in container and "ports" not in container


def test_no_deployment_in_gridloops_image_means_no_template() -> None:
    assert network_probe.pod_template([{"kind": "Deployment", "metadata": {"name": "x"}}]) is None


def test_the_policy_denies_every_ingress_to_the_closed_pod_only() -> None:
    policy = network_probe.deny_closed("ns")
    assert policy["spec"] == {
        "podSelector": {"matchLabels": {network_probe.LABEL: "closed"}},
        "policyTypes": ["Ingress"],
    }


@pytest.mark.parametrize(
    ("seen", "status", "says"),
    [
        ({"open": "connected", "closed": "dropped"}, Status.PASS, "enforced"),
        ({"open": "connected", "closed": "refused"}, Status.PASS, "enforced"),
        ({"open": "connected", "closed": "connected"}, Status.FAIL, "not enforced"),
        ({"open": "dropped", "closed": "dropped"}, Status.WARN, "could not tell"),
        ({"open": "error 113", "closed": "connected"}, Status.WARN, "could not tell"),
    ],
)
def test_the_verdict(seen: dict[str, str], status: Status, says: str) -> None:
    found = network_probe.verdict(seen)
    assert (found.name, found.status) == ("network-policy", status)
    assert says in found.detail
    assert bool(found.fix) == (status is not Status.PASS)


def test_only_the_clients_own_line_is_read() -> None:
    assert network_probe.parse('noise\n{"open": "connected", "closed": "dropped"}\n') == {
        "open": "connected",
        "closed": "dropped",
    }
    assert network_probe.parse("") is None
    assert network_probe.parse("Traceback ...") is None
    assert network_probe.parse('{"open": "connected"}') is None

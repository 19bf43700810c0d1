"""Kueue's upstream objects, as the local cluster applies them: webhooks reach loopback."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gridloop import versions
from gridloop.bundle import caching
from gridloop.bundle.manifests import ManifestProblem, parse
from gridloop.bundle.sources import source_for
from gridloop.local.addons import kueue_manifests
from gridloop.local.addons.kueue_manifests import (
    LOCAL_LABEL_KEY,
    controller_config,
    local_objects,
    loopback_client_config,
)
from gridloop.local.ports import Ports

CA = "Q0EK"
PORT = 41009
SERVICE = {"name": "kueue-webhook-service", "namespace": "kueue-system"}


def _crd(name: str, conversion: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"group": "kueue.x-k8s.io", "names": {"plural": name}}
    if conversion:
        spec["conversion"] = {
            "strategy": "Webhook",
            "webhook": {
                "clientConfig": {"service": {**SERVICE, "path": "/convert"}},
                "conversionReviewVersions": ["v1"],
            },
        }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{name}.kueue.x-k8s.io"},
        "spec": spec,
    }


def _webhooks(kind: str, *paths: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {
            "name": f"kueue-{kind.lower()}",
            "labels": {"app.kubernetes.io/name": "kueue"},
        },
        "webhooks": [
            {
                "name": f"{path.strip('/')}.kb.io",
                "clientConfig": {"service": {**SERVICE, "path": path}},
                "failurePolicy": "Fail",
            }
            for path in paths
        ],
    }


def _obj(kind: str, name: str, api: str = "v1") -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name}}


def upstream() -> list[dict[str, Any]]:
    """The shape of Kueue's config/default rendering, in upstream's order."""
    return [
        _obj("Namespace", "kueue-system"),
        _crd("workloads", conversion=True),
        _crd("resourceflavors", conversion=False),
        _obj("ServiceAccount", "kueue-controller-manager"),
        _obj("ClusterRole", "kueue-manager-role", "rbac.authorization.k8s.io/v1"),
        _obj("ClusterRoleBinding", "kueue-manager-rolebinding", "rbac.authorization.k8s.io/v1"),
        _obj("ConfigMap", "kueue-manager-config"),
        _obj("Secret", "kueue-webhook-server-cert"),
        _obj("Service", "kueue-webhook-service"),
        _obj("Deployment", "kueue-controller-manager", "apps/v1"),
        _obj("APIService", "v1beta2.visibility.kueue.x-k8s.io", "apiregistration.k8s.io/v1"),
        _webhooks("MutatingWebhookConfiguration", "/mutate-batch-v1-job"),
        _webhooks("ValidatingWebhookConfiguration", "/validate-batch-v1-job", "/validate-pod"),
    ]


def kinds(docs: list[dict[str, Any]]) -> list[str]:
    return [d["kind"] for d in docs]


def test_only_what_the_api_server_and_rbac_need_is_applied_namespace_first() -> None:
    docs = local_objects(upstream(), PORT, CA)

    assert kinds(docs) == [
        "Namespace",
        "Service",
        "CustomResourceDefinition",
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ]


def _service(path: str) -> dict[str, Any]:
    return {"service": {**SERVICE, "path": path, "port": PORT}, "caBundle": CA}


def test_every_webhook_calls_kueues_loopback_port_and_trusts_the_local_ca() -> None:
    docs = local_objects(upstream(), PORT, CA)

    configs = [
        hook["clientConfig"]
        for d in docs
        if d["kind"].endswith("WebhookConfiguration")
        for hook in d["webhooks"]
    ]
    assert configs == [
        _service("/mutate-batch-v1-job"),
        _service("/validate-batch-v1-job"),
        _service("/validate-pod"),
    ]


def test_the_webhook_service_is_an_external_name_the_api_server_resolves_to_loopback() -> None:
    docs = local_objects(upstream(), PORT, CA)

    [service] = [d for d in docs if d["kind"] == "Service"]
    assert service["metadata"]["name"] == "kueue-webhook-service"
    assert service["metadata"]["namespace"] == "kueue-system"
    assert service["spec"] == {"type": "ExternalName", "externalName": "127.0.0.1"}
    assert kueue_manifests.WEBHOOK_DNS_NAME == "kueue-webhook-service.kueue-system.svc"


def test_crd_conversion_webhook_reaches_loopback_and_crds_without_one_are_unchanged() -> None:
    source = upstream()
    docs = local_objects(source, PORT, CA)

    workloads, flavors = (d for d in docs if d["kind"] == "CustomResourceDefinition")
    assert workloads["spec"]["conversion"]["webhook"]["clientConfig"] == _service("/convert")
    assert workloads["spec"]["conversion"]["webhook"]["conversionReviewVersions"] == ["v1"]
    assert flavors == source[2]


def test_webhook_configurations_are_labelled_so_a_later_up_without_kueue_finds_them() -> None:
    docs = local_objects(upstream(), PORT, CA)

    hooks = [d for d in docs if d["kind"].endswith("WebhookConfiguration")]
    assert all(h["metadata"]["labels"][LOCAL_LABEL_KEY] == "kueue" for h in hooks)
    assert all(h["metadata"]["labels"]["app.kubernetes.io/name"] == "kueue" for h in hooks)
    assert f"{LOCAL_LABEL_KEY}=kueue" == kueue_manifests.LOCAL_LABEL


def test_the_upstream_documents_are_left_as_they_were() -> None:
    source = upstream()
    before = copy.deepcopy(source)

    local_objects(source, PORT, CA)

    assert source == before


@pytest.mark.parametrize("missing", ["MutatingWebhookConfiguration", "CustomResourceDefinition"])
def test_a_rendering_without_crds_or_webhooks_is_refused(missing: str) -> None:
    docs = [d for d in upstream() if d["kind"] != missing]

    with pytest.raises(ManifestProblem, match=f"no {missing} in Kueue's rendering"):
        local_objects(docs, PORT, CA)


def test_a_webhook_without_a_service_is_refused() -> None:
    with pytest.raises(ManifestProblem, match="no service"):
        loopback_client_config({"url": "https://elsewhere"}, PORT, CA)


def test_a_webhook_calling_another_service_is_refused() -> None:
    other = {"service": {"name": "other", "namespace": "kueue-system"}}

    with pytest.raises(ManifestProblem, match="calls Service kueue-system/other"):
        loopback_client_config(other, PORT, CA)


def test_only_fields_are_added_so_reapplying_upstreams_crds_keeps_them_valid() -> None:
    """`gridloop install` applies the chart's CRDs server-side with upstream's clientConfig:
    merged with this one it must still name exactly one of `url` and `service`."""
    upstream_config = {"service": {**SERVICE, "path": "/convert"}}

    local = loopback_client_config(upstream_config, PORT, CA)

    assert "url" not in local
    assert local["service"].items() >= upstream_config["service"].items()


def test_controller_config_puts_every_listener_on_loopback_with_its_own_port() -> None:
    ports = Ports.from_base(41000)

    config = controller_config(ports, "/state/pki/kueue", ("batch/job", "ray.io/rayjob"))

    assert config["webhook"] == {"host": "127.0.0.1", "port": 41009, "certDir": "/state/pki/kueue"}
    assert config["metrics"] == {
        "bindAddress": "127.0.0.1:41010",
        "enableClusterQueueResources": True,
    }
    assert config["health"] == {"healthProbeBindAddress": "127.0.0.1:41008"}
    assert config["visibilityServer"] == {"bindAddress": "127.0.0.1", "bindPort": 41011}


def test_controller_config_uses_gridloop_certificates_one_replica_and_queue_named_jobs() -> None:
    config = controller_config(Ports.from_base(41000), "/c", ("batch/job",))

    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert config["kind"] == "Configuration"
    assert config["namespace"] == "kueue-system"
    assert config["internalCertManagement"] == {"enable": False}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["manageJobsWithoutQueueName"] is False
    assert config["integrations"] == {"frameworks": ["batch/job"]}


def test_prometheus_scrapes_kueue_as_an_account_bound_to_upstreams_metrics_reader() -> None:
    account, binding = kueue_manifests.scraper_objects("gridloop-system")

    assert account["kind"] == "ServiceAccount"
    assert account["metadata"] == {"name": "prometheus", "namespace": "gridloop-system"}
    assert binding["roleRef"]["name"] == "kueue-metrics-reader"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "prometheus", "namespace": "gridloop-system"}
    ]


def test_kueue_authenticates_as_its_upstream_service_account() -> None:
    assert kueue_manifests.USER == "system:serviceaccount:kueue-system:kueue-controller-manager"
    assert "system:serviceaccounts:kueue-system" in kueue_manifests.GROUPS


def test_ca_bundle_is_the_pem_base64_encoded() -> None:
    assert kueue_manifests.ca_bundle(b"CA\n") == CA


def test_upstream_rendering_when_cached_has_every_webhook_on_a_service() -> None:
    """Against the real rendering when `gridloop bundle` or `local up` has cached it."""
    text = caching.read(source_for("kueue"), versions.get("kueue"))
    if text is None:
        pytest.skip("Kueue's rendering is not cached yet")
    docs = local_objects(parse(text, "kueue"), PORT, CA)
    ports = [
        h["clientConfig"]["service"]["port"]
        for d in docs
        if d["kind"].endswith("WebhookConfiguration")
        for h in d["webhooks"]
    ]
    assert ports and set(ports) == {PORT}
    assert "kueue-metrics-reader" in {d["metadata"]["name"] for d in docs}
    assert not {"Deployment", "APIService", "ConfigMap", "Secret"} & set(kinds(docs))
    assert [d["spec"]["type"] for d in docs if d["kind"] == "Service"] == ["ExternalName"]

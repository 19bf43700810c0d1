"""What the local cluster applies for Kueue, and the controller's configuration (pure).

Kueue runs out of the cluster, as a process on 127.0.0.1 (see kueue_running.py).
From upstream's own rendering (config/default, as `gridloop bundle` obtains it)
the local cluster keeps what the API server needs to call Kueue and what Kueue
needs to be allowed to act: the Namespace, the CRDs, the webhook configurations,
and upstream's RBAC unchanged. It leaves out what runs Kueue in a pod (the
Deployment, its ConfigMap and empty certificate Secret, its metrics and
visibility Services) and the visibility APIService.

How the API server reaches the webhooks on 127.0.0.1: a ClusterIP Service
cannot (nothing routes its virtual IP here, and 127.0.0.1 is not a valid
endpoint), so upstream's `kueue-webhook-service` is replaced by an
ExternalName Service naming 127.0.0.1, which the API server resolves itself
(`--enable-aggregator-routing=false`), and every webhook and CRD-conversion
`clientConfig` keeps its `service` reference, gaining only Kueue's loopback
`port` and the local CA as `caBundle`. Rewriting them to a `url`, as
controller-runtime's envtest does, was the first design; but `gridloop install`
re-applies the chart's CRDs server-side with their `service` reference, and a
CRD with both a `url` and a `service` is invalid. Adding fields leaves both
appliers' objects valid. The serving certificate names the Service's DNS name,
which the API server checks.

The manager authenticates with a client certificate named as its upstream
ServiceAccount, so it runs with exactly upstream's RBAC: a missing permission
shows here as it would in a cluster.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterable
from typing import Any

from gridloop import names
from gridloop.bundle.manifests import CRD, Doc, ManifestProblem, name_of
from gridloop.local.ports import LOOPBACK, Ports

NAMESPACE = "kueue-system"
WEBHOOK_SERVICE = "kueue-webhook-service"
# the name the API server checks on the webhook's certificate
WEBHOOK_DNS_NAME = f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc"
SERVICE_ACCOUNT = "kueue-controller-manager"
# the user a token of upstream's ServiceAccount would authenticate as, and its groups
USER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
GROUPS = ("system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}")
CONFIG_API = "config.kueue.x-k8s.io/v1beta2"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
# applied, in this order (a namespace before what lives in it, CRDs before webhooks)
KEPT_KINDS = (
    "Namespace",
    "Service",  # only the ExternalName one made here (webhook_service)
    CRD,
    "ServiceAccount",
    "ClusterRole",
    "Role",
    "ClusterRoleBinding",
    "RoleBinding",
    *WEBHOOK_KINDS,
)
# upstream's ClusterRole allowing GET /metrics, bound to the account Prometheus scrapes with
METRICS_READER_ROLE = "kueue-metrics-reader"
SCRAPER = "prometheus"  # a ServiceAccount in the health namespace
# on the webhook configurations gridloop applied, to find them when Kueue is not wanted
LOCAL_LABEL_KEY = names.LOCAL_COMPONENT_LABEL
LOCAL_LABEL = f"{LOCAL_LABEL_KEY}=kueue"


def ca_bundle(ca_pem: bytes) -> str:
    return base64.b64encode(ca_pem).decode()


def loopback_client_config(client_config: dict[str, Any], port: int, ca: str) -> dict[str, Any]:
    """`clientConfig` calling Kueue's webhook Service on `port`, trusting `ca`."""
    service = client_config.get("service")
    if not isinstance(service, dict):
        raise ManifestProblem("a webhook clientConfig has no service to point at loopback")
    where = (service.get("namespace"), service.get("name"))
    if where != (NAMESPACE, WEBHOOK_SERVICE):
        raise ManifestProblem(
            f"a webhook calls Service {where[0]}/{where[1]}, not {NAMESPACE}/{WEBHOOK_SERVICE}"
        )
    return {"service": {**service, "port": port}, "caBundle": ca}


def webhook_service() -> Doc:
    """The Service the webhooks name, resolved by the API server to 127.0.0.1."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": WEBHOOK_SERVICE,
            "namespace": NAMESPACE,
            "labels": {LOCAL_LABEL_KEY: "kueue"},
        },
        "spec": {"type": "ExternalName", "externalName": LOOPBACK},
    }


def local_objects(docs: Iterable[Doc], webhook_port: int, ca: str) -> list[Doc]:
    """The upstream objects the local cluster applies, every webhook reaching Kueue on
    loopback, and the ExternalName Service that makes it so.

    Fails when upstream no longer ships what the rewrite expects (no CRDs, no
    webhook configurations): Jobs would then silently never be suspended.
    """
    kept: dict[str, list[Doc]] = {kind: [] for kind in KEPT_KINDS}
    kept["Service"].append(webhook_service())
    for doc in docs:
        kind = doc.get("kind")
        if kind not in kept or kind == "Service":
            continue
        doc = copy.deepcopy(doc)
        if kind == CRD:
            webhook = ((doc.get("spec") or {}).get("conversion") or {}).get("webhook")
            if webhook:
                webhook["clientConfig"] = loopback_client_config(
                    webhook.get("clientConfig") or {}, webhook_port, ca
                )
        elif kind in WEBHOOK_KINDS:
            labels = doc.setdefault("metadata", {}).setdefault("labels", {})
            labels[LOCAL_LABEL_KEY] = "kueue"
            for hook in doc.get("webhooks") or []:
                hook["clientConfig"] = loopback_client_config(
                    hook.get("clientConfig") or {}, webhook_port, ca
                )
        kept[str(kind)].append(doc)
    for needed in (CRD, *WEBHOOK_KINDS):
        if not kept[needed]:
            raise ManifestProblem(f"no {needed} in Kueue's rendering")
    return [doc for kind in KEPT_KINDS for doc in kept[kind]]


def crd_names(docs: Iterable[Doc]) -> list[str]:
    return [name_of(doc) for doc in docs if doc.get("kind") == CRD]


def webhook_configurations(docs: Iterable[Doc]) -> list[tuple[str, str]]:
    """(kind, name) of each webhook configuration, to remove when Kueue is not wanted."""
    return [(str(doc["kind"]), name_of(doc)) for doc in docs if doc.get("kind") in WEBHOOK_KINDS]


def controller_config(ports: Ports, cert_dir: str, frameworks: Iterable[str]) -> dict[str, object]:
    """Kueue's Configuration file: every listener on loopback, certificates from `cert_dir`.

    Internal certificate management is off (gridloop's CA signs the serving
    certificate), leader election is off (one replica), and only Jobs carrying
    a queue-name label are managed, as upstream's default.
    """
    return {
        "apiVersion": CONFIG_API,
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "manageJobsWithoutQueueName": False,
        "internalCertManagement": {"enable": False},
        "webhook": {"host": LOOPBACK, "port": ports.kueue_webhook, "certDir": cert_dir},
        # per-flavor quota and usage gauges (kueue_cluster_queue_nominal_quota, ...) for
        # the Queues dashboard; upstream leaves them off
        "metrics": {
            "bindAddress": f"{LOOPBACK}:{ports.kueue_metrics}",
            "enableClusterQueueResources": True,
        },
        "health": {"healthProbeBindAddress": f"{LOOPBACK}:{ports.kueue}"},
        "leaderElection": {"leaderElect": False},
        # upstream binds every interface
        "visibilityServer": {"bindAddress": LOOPBACK, "bindPort": ports.kueue_visibility},
        "integrations": {"frameworks": list(frameworks)},
    }


def scraper_objects(namespace: str) -> list[Doc]:
    """A ServiceAccount for Prometheus, bound to upstream's `kueue-metrics-reader`.

    Kueue's /metrics is HTTPS behind TokenReview and SubjectAccessReview: the
    scraper needs a token whose account may GET /metrics.
    """
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": SCRAPER, "namespace": namespace},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"gridloop-{SCRAPER}-kueue-metrics"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": METRICS_READER_ROLE,
            },
            "subjects": [{"kind": "ServiceAccount", "name": SCRAPER, "namespace": namespace}],
        },
    ]

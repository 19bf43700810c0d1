"""Put Kueue's objects into the local cluster before its controller starts, or take its
webhooks out when the fleet does not ask for Kueue.

The objects come from upstream's own rendering, obtained as `gridloop bundle`
does (the rendering cache, else the Go module and `kubectl kustomize`), and are
applied with the built kubectl's server-side apply, so `up` on an existing
cluster converges to the same objects. Without Kueue, its webhook
configurations must go: they fail closed, so a stale one would refuse every
new pod. Its CRDs stay, with whatever objects users made of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

from gridloop import versions
from gridloop.bundle import caching, fetching, manifests
from gridloop.bundle.manifests import Doc, ManifestProblem
from gridloop.bundle.sources import source_for
from gridloop.errors import BuildError, ClusterError, one_line
from gridloop.local.addons import applying, kueue_manifests
from gridloop.local.addons.kueue_manifests import LOCAL_LABEL

TOKEN_SECONDS = 365 * 24 * 3600  # as long as the local certificates


def upstream_objects() -> list[Doc]:
    """Kueue's rendered config/default, from the rendering cache when it is there."""
    source, comp = source_for("kueue"), versions.get("kueue")
    text = caching.read(source, comp)
    fresh = text is None
    if text is None:
        text = fetching.render(source, comp)
    try:
        docs = manifests.parse(text, f"{comp.name} rendering")
    except ManifestProblem as problem:
        raise BuildError(f"{fetching.label(comp)}: {problem}") from problem
    if fresh:
        caching.write(source, comp, text)
    return docs


def install(kubectl: Path, kubeconfig: Path, folder: Path, webhook_port: int, ca: Path) -> int:
    """Apply the local objects (kueue_manifests.local_objects); return how many, once
    every CRD is Established."""
    comp = versions.get("kueue")
    try:
        docs = kueue_manifests.local_objects(
            upstream_objects(), webhook_port, kueue_manifests.ca_bundle(ca.read_bytes())
        )
    except ManifestProblem as problem:
        raise BuildError(f"{fetching.label(comp)}: {problem}") from problem
    applying.apply_established(
        kubectl,
        kubeconfig,
        folder / "objects.yaml",
        docs,
        kueue_manifests.crd_names(docs),
        "Kueue",
    )
    return len(docs)


def remove_webhooks(api: client.ApiClient) -> int:
    """Delete the webhook configurations an earlier `up` applied for Kueue; return how many."""
    admission = client.AdmissionregistrationV1Api(api)
    removed = 0
    try:
        for hooks in (
            admission.list_mutating_webhook_configuration(label_selector=LOCAL_LABEL).items,
            admission.list_validating_webhook_configuration(label_selector=LOCAL_LABEL).items,
        ):
            removed += len(hooks)
        admission.delete_collection_mutating_webhook_configuration(label_selector=LOCAL_LABEL)
        admission.delete_collection_validating_webhook_configuration(label_selector=LOCAL_LABEL)
    except ApiException as err:
        raise ClusterError(f"removing Kueue's webhook configurations: {one_line(err)}") from err
    return removed


def write_scraper_token(api: client.ApiClient, namespace: str, path: Path) -> None:
    """Create Prometheus' ServiceAccount and binding, and write a token for it to `path`."""
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    account, binding = kueue_manifests.scraper_objects(namespace)
    try:
        _create(lambda: core.create_namespaced_service_account(namespace, account))
        _create(lambda: rbac.create_cluster_role_binding(binding))
        token = core.create_namespaced_service_account_token(
            account["metadata"]["name"],
            namespace,
            {"spec": {"expirationSeconds": TOKEN_SECONDS}},
        ).status.token
    except ApiException as err:
        raise ClusterError(f"a token for Prometheus to scrape Kueue: {one_line(err)}") from err
    path.unlink(missing_ok=True)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as fh:
        fh.write(token)  # created readable by its owner only, never for a moment by others


def _create(call: Callable[[], object]) -> None:
    try:
        call()
    except ApiException as err:
        if err.status != 409:  # already there from an earlier `up`
            raise

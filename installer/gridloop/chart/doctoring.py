"""Read what `gridloop doctor` checks from a cluster, and ask it what the caller may do.

Only reads (and SelfSubjectAccessReviews, which change nothing): the server version,
API discovery for the kinds the chart renders, nodes, RuntimeClasses, Deployments,
webhook configurations, CRD names, the chart's objects that already exist, Helm's
release record and the release namespace. A read the caller may not make is recorded
as refused (checks.py turns it into a warning); a server that does not answer is a
ClusterError. The decisions are all in checks.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.rest import ApiException

from gridloop import toolchain
from gridloop.chart import diagnosis, objects
from gridloop.chart.checks import GPU
from gridloop.chart.objects import Doc
from gridloop.errors import UsageError
from gridloop.kube import get, metadata_list, reached, status_of

# what an install and an upgrade do to each object it renders (helm reads, applies, and
# deletes what a new revision drops); CRDs and Helm's release Secrets on top
VERBS = ("get", "create", "patch", "delete")
CRD_RESOURCE = ("apiextensions.k8s.io", "customresourcedefinitions")
HELM_STORAGE_VERBS = ("get", "list", "create", "patch", "delete")
PARALLEL = 8


@dataclass(frozen=True)
class Resource:
    group: str
    plural: str
    namespaced: bool


def observe(
    api: client.ApiClient,
    crds: Sequence[Doc],
    docs: Sequence[Doc],
    planned: diagnosis.Planned,
    kubeconfig: str | None = None,
) -> diagnosis.Observed:
    """The cluster as doctor reads it; `kubeconfig` picks the kubectl install would run."""
    version = reached(api, lambda: client.VersionApi(api).get_code()).git_version
    refused: dict[str, str] = {}
    resources, unserved = discover(api, crds, docs)

    def read(what: str, path: str, query: dict[str, str] | None = None) -> list[Doc] | None:
        try:
            return list(get(api, path, query).get("items") or [])
        except ApiException as err:
            refused[what] = status_of(err)
            return None

    nodes = read("nodes", "/api/v1/nodes")
    classes = read("runtimeclasses", "/apis/node.k8s.io/v1/runtimeclasses")
    deployments = read("deployments", "/apis/apps/v1/deployments")
    hooks = [
        read("webhook configurations", f"/apis/admissionregistration.k8s.io/v1/{kind}")
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
    ]
    crd_names = _crd_names(api, refused)
    secrets = read(
        "secrets",
        f"/api/v1/namespaces/{planned.namespace}/secrets",
        {"labelSelector": f"owner=helm,name={planned.release}"},
    )
    secrets_found = _secrets_found(api, planned, refused)
    try:
        kubectl, kubectl_problem = toolchain.kubectl_version(kubeconfig), ""
    except UsageError as err:
        kubectl, kubectl_problem = None, str(err)
    return diagnosis.Observed(
        server_version=str(version),
        kubectl=kubectl,
        kubectl_problem=kubectl_problem,
        denied=denied(api, _needed(docs, resources, planned), refused),
        nodes=None if nodes is None else tuple(_node(n) for n in nodes),
        runtime_classes=None
        if classes is None
        else {c["metadata"]["name"]: str(c.get("handler", "")) for c in classes},
        workloads=None if deployments is None else tuple(_workload(d) for d in deployments),
        webhooks=None
        if any(h is None for h in hooks)
        else tuple(h["metadata"]["name"] for found in hooks for h in found or []),
        crds=crd_names,
        existing=_existing(api, docs, resources, planned.namespace, refused),
        unserved=tuple(unserved),
        release=None if secrets is None else latest_release(secrets),
        namespace_phase=_namespace_phase(api, planned.namespace, refused),
        refused=refused,
        secrets_found=secrets_found,
        api_server=_api_server(api, refused) if planned.sandbox_egress == "internet" else (),
        service_cidrs=_service_cidrs(api) if planned.sandbox_egress == "internet" else (),
    )


def _secrets_found(
    api: client.ApiClient, planned: diagnosis.Planned, refused: dict[str, str]
) -> frozenset[str] | None:
    """Which of the Secrets the values name exist: one GET each (their data is not kept)."""
    found = set()
    for name in planned.secrets:
        try:
            get(api, f"/api/v1/namespaces/{planned.namespace}/secrets/{name}")
        except ApiException as err:
            if err.status == 404:
                continue
            refused["secrets"] = status_of(err)
            return None
        found.add(name)
    return frozenset(found)


def discover(
    api: client.ApiClient, crds: Sequence[Doc], docs: Sequence[Doc]
) -> tuple[dict[tuple[str, str], Resource], list[str]]:
    """(apiVersion, kind) -> Resource from API discovery, else the chart's own CRDs;
    and the `Kind (apiVersion)` nothing serves or defines."""
    from_crds = objects.crd_kinds(crds)
    out: dict[tuple[str, str], Resource] = {}
    unserved: list[str] = []
    for api_version in sorted({str(d["apiVersion"]) for d in docs}):
        path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        try:
            listed = get(api, path).get("resources") or []
        except ApiException:
            listed = []
        group = api_version.rpartition("/")[0]
        for r in listed:
            if "/" not in r["name"]:
                out[(api_version, r["kind"])] = Resource(group, r["name"], bool(r["namespaced"]))
        for kind, (crd_group, plural, namespaced) in from_crds.items():
            if crd_group == group and (api_version, kind) not in out:
                out[(api_version, kind)] = Resource(group, plural, namespaced)
    for doc in docs:
        key = (str(doc["apiVersion"]), str(doc["kind"]))
        label = f"{key[1]} ({key[0]})"
        if key not in out and label not in unserved:
            unserved.append(label)
    return out, unserved


def _needed(
    docs: Sequence[Doc], resources: dict[tuple[str, str], Resource], planned: diagnosis.Planned
) -> list[tuple[str, str, str, str]]:
    """(verb, group, plural, namespace) the install needs; namespace "" is cluster-wide."""
    wanted: set[tuple[str, str, str, str]] = set()
    for doc in docs:
        found = resources.get((str(doc["apiVersion"]), str(doc["kind"])))
        if found is None:
            continue
        namespace = (
            ((doc.get("metadata") or {}).get("namespace") or planned.namespace)
            if found.namespaced
            else ""
        )
        wanted |= {(v, found.group, found.plural, namespace) for v in VERBS}
    wanted |= {(v, *CRD_RESOURCE, "") for v in ("get", "create", "patch")}
    wanted |= {(v, "", "secrets", planned.namespace) for v in HELM_STORAGE_VERBS}
    wanted.add(("create", "", "namespaces", ""))
    return sorted(wanted)


def denied(
    api: client.ApiClient, needed: Iterable[tuple[str, str, str, str]], refused: dict[str, str]
) -> tuple[str, ...] | None:
    """Each needed permission the API server's authorizer refuses, as `verb resource`."""
    auth = client.AuthorizationV1Api(api)

    def allowed(item: tuple[str, str, str, str]) -> bool:
        verb, group, plural, namespace = item
        attributes = {"verb": verb, "group": group, "resource": plural}
        if namespace:
            attributes["namespace"] = namespace
        body = {"spec": {"resourceAttributes": attributes}}
        review = reached(api, lambda: auth.create_self_subject_access_review(body))
        return bool(review.status.allowed)

    items = list(needed)
    try:
        with ThreadPoolExecutor(PARALLEL) as pool:
            answers = list(pool.map(allowed, items))
    except ApiException as err:
        refused["selfsubjectaccessreviews"] = status_of(err)
        return None
    return tuple(_permission(i) for i, ok in zip(items, answers, strict=True) if not ok)


def _permission(item: tuple[str, str, str, str]) -> str:
    verb, group, plural, namespace = item
    resource = f"{plural}.{group}" if group else plural
    return f"{verb} {resource}" + (f" in {namespace}" if namespace else "")


def _node(node: Doc) -> diagnosis.Node:
    status = node.get("status") or {}
    raw = (status.get("allocatable") or {}).get(GPU, "0")
    try:
        gpus = int(str(raw))
    except ValueError:
        gpus = 0
    handlers = status.get("runtimeHandlers")
    addresses = tuple(
        str(a.get("address"))
        for a in status.get("addresses") or []
        if a.get("type") in ("InternalIP", "ExternalIP") and a.get("address")
    )
    return diagnosis.Node(
        name=node["metadata"]["name"],
        labels=node["metadata"].get("labels") or {},
        gpus=gpus,
        runtime_handlers=None if handlers is None else tuple(h.get("name", "") for h in handlers),
        addresses=addresses,
        pod_cidrs=tuple(str(c) for c in (node.get("spec") or {}).get("podCIDRs") or ()),
    )


def _api_server(api: client.ApiClient, refused: dict[str, str]) -> tuple[str, ...] | None:
    """The API server's addresses as pods reach it: the kubernetes Service's ClusterIP and
    the endpoints behind it (None: not readable, `refused` says why)."""
    try:
        service = get(api, "/api/v1/namespaces/default/services/kubernetes")
        slices = get(
            api,
            "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices",
            {"labelSelector": "kubernetes.io/service-name=kubernetes"},
        )
    except ApiException as err:
        refused["the kubernetes Service"] = status_of(err)
        return None
    found = [str(ip) for ip in (service.get("spec") or {}).get("clusterIPs") or ()]
    for item in slices.get("items") or []:
        for endpoint in item.get("endpoints") or []:
            found += [str(a) for a in endpoint.get("addresses") or ()]
    return tuple(dict.fromkeys(found))


def _service_cidrs(api: client.ApiClient) -> tuple[str, ...] | None:
    """The cluster's Service ranges (networking.k8s.io/v1 ServiceCIDR, served since
    Kubernetes 1.33); None where the API is not served or not readable."""
    try:
        found = get(api, "/apis/networking.k8s.io/v1/servicecidrs")
    except ApiException:
        return None
    cidrs = [str(c) for item in found.get("items") or [] for c in item["spec"].get("cidrs") or ()]
    return tuple(dict.fromkeys(cidrs))


def _workload(deployment: Doc) -> diagnosis.Workload:
    metadata = deployment["metadata"]
    annotations = metadata.get("annotations") or {}
    pod = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    images = tuple(c.get("image", "") for c in pod.get("containers") or [])
    return diagnosis.Workload(
        namespace=metadata.get("namespace", ""),
        name=metadata["name"],
        images=images,
        release=annotations.get(objects.RELEASE_NAME, ""),
        release_namespace=annotations.get(objects.RELEASE_NAMESPACE, ""),
    )


def _crd_names(api: client.ApiClient, refused: dict[str, str]) -> frozenset[str] | None:
    try:
        listed = metadata_list(api, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
    except ApiException as err:
        refused["customresourcedefinitions"] = status_of(err)
        return None
    return frozenset(item["metadata"]["name"] for item in listed)


def object_path(resource: Resource, api_version: str, namespace: str, name: str) -> str:
    root = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    where = f"/namespaces/{namespace}" if resource.namespaced else ""
    return f"{root}{where}/{resource.plural}/{name}"


def _existing(
    api: client.ApiClient,
    docs: Sequence[Doc],
    resources: dict[tuple[str, str], Resource],
    namespace: str,
    refused: dict[str, str],
) -> tuple[diagnosis.Existing, ...] | None:
    def look(doc: Doc) -> diagnosis.Existing | str | None:
        found = resources.get((str(doc["apiVersion"]), str(doc["kind"])))
        if found is None:
            return None
        ref = objects.ref(doc, namespace, found.namespaced)
        try:
            live = get(api, object_path(found, ref.api_version, ref.namespace, ref.name))
        except ApiException as err:
            return None if err.status == 404 else status_of(err)
        annotations = live.get("metadata", {}).get("annotations") or {}
        return diagnosis.Existing(
            ref.kind,
            ref.namespace,
            ref.name,
            annotations.get(objects.RELEASE_NAME, ""),
            annotations.get(objects.RELEASE_NAMESPACE, ""),
            annotations.get(objects.RESOURCE_POLICY) == "keep",
        )

    with ThreadPoolExecutor(PARALLEL) as pool:
        answers = list(pool.map(look, docs))
    problems = [a for a in answers if isinstance(a, str)]
    if problems:
        refused["the chart's objects"] = problems[0]
        return None
    return tuple(a for a in answers if isinstance(a, diagnosis.Existing))


def latest_release(secrets: Iterable[Doc]) -> diagnosis.Release | None:
    """The newest revision among Helm's release Secrets (labels `version`, `status`)."""
    newest: diagnosis.Release | None = None
    for secret in secrets:
        labels = secret.get("metadata", {}).get("labels") or {}
        try:
            revision = int(labels.get("version", "0"))
        except ValueError:
            continue
        if newest is None or revision > newest.revision:
            newest = diagnosis.Release(revision, str(labels.get("status", "unknown")))
    return newest


def _namespace_phase(api: client.ApiClient, name: str, refused: dict[str, str]) -> str | None:
    try:
        found = get(api, f"/api/v1/namespaces/{name}")
    except ApiException as err:
        if err.status != 404:
            refused["namespaces"] = status_of(err)
        return None
    return str((found.get("status") or {}).get("phase", "Active"))

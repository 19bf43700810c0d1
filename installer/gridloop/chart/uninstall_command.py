"""`gridloop uninstall`: remove the release's workloads, keep CRDs and what users made.

`helm uninstall` deletes what the release rendered (its Deployments, RBAC, its own
ClusterQueues ...) and keeps the CRDs, which Helm never deletes, with every object of
their kinds. `--purge` then deletes the CRDs gridloop applied, after a confirmation
(`--yes` for scripts), and only when no custom resource outside the release is left
(`--force` deletes them too). Every refusal comes before anything is deleted.

The release's own Kueue objects (LocalQueues, ClusterQueues, ResourceFlavors) go first,
while the release's Kueue still runs: Kueue puts a finalizer on each, and only its
controller removes it. A plain `helm uninstall` deletes the controller with them and
leaves them terminating for ever, their names taken. The release's KAITO Workspaces
(models with `runtime: kaito`) go first too, for the same reason (KAITO's finalizer).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from gridloop import kube
from gridloop.chart import (
    connecting,
    exits,
    installing,
    objects,
    preparing,
    purging,
    readiness,
    releases,
)
from gridloop.chart.diagnosis import Existing
from gridloop.errors import ClusterError
from gridloop.kube import get

if TYPE_CHECKING:
    from gridloop.chart.preparing import Sub

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
POLL = 0.5


def register(sub: Sub) -> None:
    p = preparing.cluster_command(
        sub,
        "uninstall",
        "remove gridloop's workloads; keep CRDs and custom resources (unless --purge)",
        "`helm uninstall` the release: its workloads and its own objects go, "
        "the CRDs and every custom resource users made stay. --purge also deletes the CRDs "
        "gridloop applied, after confirmation, and refuses while custom resources outside "
        "the release exist unless --force.",
    )
    preparing.release_flags(p)
    p.add_argument("--purge", action="store_true", help="also delete gridloop's CRDs")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask before --purge")
    p.add_argument(
        "--force",
        action="store_true",
        help="with --purge: delete the CRDs even while custom resources of theirs exist",
    )
    p.add_argument(
        "--timeout",
        default=preparing.DEFAULT_TIMEOUT,
        help=f"how long to wait for deletions (default {preparing.DEFAULT_TIMEOUT})",
    )
    p.set_defaults(func=cmd_uninstall)


def cmd_uninstall(args: argparse.Namespace) -> int:
    start = time.monotonic()
    preparing.check_release(args)
    where = preparing.target(args)
    api = connecting.api_client(where)
    release, namespace = args.release, args.namespace
    crds = purging.gridloops(_crd_managers(api), installing.FIELD_MANAGER)
    left = purging.others(_custom_resources(api, crds), release, namespace)
    if args.purge:
        refused = purging.refusal(crds, left, args.force, confirmed=True)
        if not refused and not args.yes:
            refused = purging.refusal(crds, left, args.force, _ask(len(crds), len(left)))
        if refused:
            raise exits.Refused(refused)

    existing = releases.latest(api, release, namespace)
    kept = _kept_namespaces(api, release, namespace) if existing is not None else []
    if existing is None:
        print(f"  - release {release} is not installed in {namespace}: nothing to uninstall")
    else:
        gone = _delete_kueue_objects(api, release, namespace, readiness.seconds(where.timeout))
        if gone:
            print(f"  ✓ kueue      {gone} queues and flavors of the release deleted first")
        served = _delete_workspaces(api, release, namespace, readiness.seconds(where.timeout))
        if served:
            print(f"  ✓ kaito      {served} Workspaces of the release deleted first")
        installing.uninstall(release, namespace, where)
        print(f"  ✓ release {release} uninstalled (revision {existing.revision}, {namespace})")
        for test_namespace in _delete_test_namespaces(api, release, namespace):
            print(f"  ✓ tests      namespace {test_namespace} of `helm test` deleted")
    if args.purge:
        _delete_crds(api, crds, readiness.seconds(where.timeout))
        forced = f", with {len(left)} custom resources" if left else ""
        print(f"  ✓ CRDs       {len(crds)} deleted{forced}")
    else:
        print(
            f"  ✓ kept       {len(crds)} CRDs and {len(left)} custom resources not from the "
            "release (gridloop uninstall --purge deletes the CRDs)"
        )
    if kept:
        # helm.sh/resource-policy: keep (the chart's team and sandbox namespaces, and the
        # upstream controllers'): deleting one deletes everything people made in it
        print(
            f"  ✓ kept       namespaces {', '.join(kept)} and what is in them "
            f"(kubectl delete namespace NAME removes one)"
        )
    print(f"done in {time.monotonic() - start:.1f}s", file=sys.stderr)
    return 0


KUEUE_KINDS = ("localqueues", "clusterqueues", "resourceflavors")


def _delete_kueue_objects(
    api: client.ApiClient, release: str, namespace: str, timeout: float
) -> int:
    """Delete the release's Kueue objects and wait until their finalizers let them go
    (queue_removal, what the chart's pre-delete hook runs); how many there were. Nothing
    when Kueue's CRDs are not served."""
    from kubernetes import client as k8s
    from kubernetes.client.rest import ApiException

    from gridloop.hooks import queue_removal
    from gridloop.hooks.queue_removal import Queue

    custom = k8s.CustomObjectsApi(api)
    selector = f"app.kubernetes.io/instance={release}"
    queues = []
    for plural in KUEUE_KINDS:
        try:
            found = custom.list_cluster_custom_object(
                queue_removal.GROUP, queue_removal.VERSION, plural, label_selector=selector
            )
        except ApiException as err:
            if err.status == 404:
                continue
            raise
        queues += [
            Queue(plural, o["metadata"]["name"], o["metadata"].get("namespace") or "")
            for o in found.get("items") or []
            if (o["metadata"].get("annotations") or {}).get("meta.helm.sh/release-namespace")
            == namespace
        ]
    left = queue_removal.remove(api, queues, lambda _m: None, timeout)
    if left:
        kinds = sorted({q.plural for q in left}, key=queue_removal.ORDER.index)
        names = ", ".join(q.name for q in left if q.plural == kinds[0])
        raise exits.NotReady(
            f"Kueue {kinds[0]} still terminating after {timeout:.0f}s: {names} "
            "(workloads still admitted in them? kubectl get workloads -A)"
        )
    return len(queues)


KAITO = ("kaito.sh", "v1beta1", "workspaces")


def _delete_workspaces(api: client.ApiClient, release: str, namespace: str, timeout: float) -> int:
    """Delete the release's KAITO Workspaces (its `runtime: kaito` models) and wait until
    they are gone, while the release's KAITO still runs: KAITO puts its finalizer on each
    and only its controller removes it (and the StatefulSet and Services it made). How many
    there were; nothing when KAITO's CRD is not served."""
    group, version, plural = KAITO
    custom = client.CustomObjectsApi(api)
    selector = f"app.kubernetes.io/instance={release}"
    try:
        found = custom.list_namespaced_custom_object(
            group, version, namespace, plural, label_selector=selector
        )
    except ApiException as err:
        if err.status == 404:
            return 0
        raise
    names = [str(o["metadata"]["name"]) for o in found.get("items") or []]
    for name in names:
        try:
            custom.delete_namespaced_custom_object(group, version, namespace, plural, name)
        except ApiException as err:
            if err.status != 404:
                raise
    deadline = time.monotonic() + timeout
    left = list(names)
    while left and time.monotonic() < deadline:
        left = [n for n in left if _workspace_exists(custom, namespace, n)]
        if left:
            time.sleep(POLL)
    if left:
        raise exits.NotReady(
            f"KAITO Workspace still terminating after {timeout:.0f}s: {', '.join(left)} "
            f"(kubectl describe workspace -n {namespace} {left[0]})"
        )
    return len(names)


def _workspace_exists(custom: client.CustomObjectsApi, namespace: str, name: str) -> bool:
    group, version, plural = KAITO
    try:
        custom.get_namespaced_custom_object(group, version, namespace, plural, name)
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


def _delete_test_namespaces(api: client.ApiClient, release: str, namespace: str) -> list[str]:
    """The scratch namespaces the chart's `helm test` hooks leave (a hook Helm does not
    delete on success: see templates/tests/test-policies.yaml), deleted without waiting."""
    from kubernetes import client as k8s
    from kubernetes.client.rest import ApiException

    core = k8s.CoreV1Api(api)
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=tests"
    gone = []
    for item in core.list_namespace(label_selector=selector).items:
        annotations = item.metadata.annotations or {}
        if "helm.sh/hook" not in annotations or item.metadata.deletion_timestamp:
            continue
        try:
            core.delete_namespace(item.metadata.name)
        except ApiException as err:
            if err.status != 404:
                raise
        gone.append(str(item.metadata.name))
    return sorted(gone)


def _kept_namespaces(api: client.ApiClient, release: str, namespace: str) -> list[str]:
    """The release's namespaces that `helm uninstall` leaves in place, sorted."""
    out = []
    for item in _metadata_list(api, "/api/v1/namespaces"):
        annotations = item["metadata"].get("annotations") or {}
        if (
            annotations.get(objects.RESOURCE_POLICY) == "keep"
            and annotations.get(objects.RELEASE_NAME) == release
            and annotations.get(objects.RELEASE_NAMESPACE) == namespace
        ):
            out.append(str(item["metadata"]["name"]))
    return sorted(out)


def _ask(crds: int, left: int) -> bool:
    if not sys.stdin.isatty():
        return False
    extra = f" and {left} custom resources made outside the release" if left else ""
    answer = input(f"delete {crds} CRDs{extra}? every object of their kinds goes too. [yes/N] ")
    return answer.strip().lower() == "yes"


def _crd_managers(api: client.ApiClient) -> dict[str, list[str]]:
    listed = _metadata_list(api, CRDS)
    return {
        item["metadata"]["name"]: [
            m.get("manager", "") for m in item["metadata"].get("managedFields") or []
        ]
        for item in listed
    }


def _metadata_list(api: client.ApiClient, path: str) -> list[dict[str, Any]]:
    try:
        return kube.metadata_list(api, path)
    except ApiException as err:
        raise ClusterError(f"listing {path}: {kube.status_of(err)}") from err


def _custom_resources(api: client.ApiClient, crds: list[str]) -> list[Existing]:
    out = []
    for name in crds:
        crd = get(api, f"{CRDS}/{name}")
        spec = crd["spec"]
        version = next(v["name"] for v in spec["versions"] if v.get("storage"))
        path = f"/apis/{spec['group']}/{version}/{spec['names']['plural']}"
        for item in _metadata_list(api, path):
            metadata = item["metadata"]
            if purging.controlled(metadata):
                continue  # goes with its owner (a warm pool's Sandbox), counted itself
            annotations = metadata.get("annotations") or {}
            out.append(
                Existing(
                    spec["names"]["kind"],
                    metadata.get("namespace", ""),
                    metadata["name"],
                    annotations.get(objects.RELEASE_NAME, ""),
                    annotations.get(objects.RELEASE_NAMESPACE, ""),
                )
            )
    return out


def _delete_crds(api: client.ApiClient, crds: list[str], timeout: float) -> None:
    ext = client.ApiextensionsV1Api(api)
    for name in crds:

        def delete(crd: str = name) -> object:
            return ext.delete_custom_resource_definition(crd)

        try:
            kube.reached(api, delete)
        except ApiException as err:
            if err.status != 404:
                raise ClusterError(f"deleting CRD {name}: {kube.status_of(err)}") from err
    deadline = time.monotonic() + timeout
    while True:
        left = sorted(set(crds) & set(_crd_managers(api)))
        if not left:
            return
        if time.monotonic() >= deadline:
            raise exits.NotReady(
                f"CRDs still being deleted after {timeout:.0f}s: {', '.join(left)}"
            )
        time.sleep(POLL)

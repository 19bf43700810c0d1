"""RayJobs on the shared local cluster, as a user submits them: the objects of a YAML file
created through the API, and what Kueue and KubeRay then make of them (the Workload, the
RayCluster, the pods, the submitter's log)."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import yaml
from container_pods import phase, pod_spec, restricted
from kubernetes import client
from kubernetes.client.rest import ApiException

from examples import example
from gridloop import versions
from gridloop.local.addons import object_store, store_access, store_admin

EXAMPLE = example("training/rayjob.yaml")
TEAM_NAMESPACE = "team-default"  # the local profile's one team
RAY = ("ray.io", "v1")
KUEUE = ("kueue.x-k8s.io", "v1beta2")

Doc = dict[str, Any]


def example() -> tuple[Doc, Doc]:
    """The example's ConfigMap (train.py) and RayJob, as the file has them."""
    config_map, rayjob = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    assert (config_map["kind"], rayjob["kind"]) == ("ConfigMap", "RayJob")
    return config_map, rayjob


def renamed(rayjob: Doc, name: str) -> Doc:
    """The RayJob under another name, writing its checkpoint under that name with the
    keys of that run (the Secret `<name>-s3`: run_keys makes it)."""
    out = copy.deepcopy(rayjob)
    out["metadata"]["name"] = name
    head = out["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    for env in head.get("env", []):
        if env["name"] == "CHECKPOINT_URI":
            env["value"] = f"s3://checkpoints/{name}/"
    for source in head.get("envFrom", []):
        if "secretRef" in source:
            source["secretRef"]["name"] = f"{name}-s3"
    return out


def run_keys(api: client.ApiClient, state_dir: Path, port: int, namespace: str, name: str) -> None:
    """Run `name`'s own store keys (`gridloop local store-key training --run NAME`) as the
    Secret `<name>-s3` its renamed RayJob reads: another run's keys may not write its
    checkpoint."""
    role = store_access.training(name)
    store_admin.mint(state_dir, port, role)
    secret = object_store.secret_object(state_dir, namespace, role, f"{name}-s3")
    core = client.CoreV1Api(api)
    try:
        core.delete_namespaced_secret(secret["metadata"]["name"], namespace)
    except ApiException as err:
        if err.status != 404:
            raise
    core.create_namespaced_secret(namespace, secret)


def apply(api: client.ApiClient, namespace: str, doc: Doc) -> Doc:
    """Create `doc` (a ConfigMap, a RayJob or a RayCluster) in `namespace`, replacing a
    ConfigMap of the same name; the object as the API server stored it."""
    if doc["kind"] == "ConfigMap":
        core = client.CoreV1Api(api)
        try:
            core.delete_namespaced_config_map(doc["metadata"]["name"], namespace)
        except ApiException as err:
            if err.status != 404:
                raise
        return dict(core.create_namespaced_config_map(namespace, doc).to_dict())
    plural = {"RayJob": "rayjobs", "RayCluster": "rayclusters"}[doc["kind"]]
    custom = client.CustomObjectsApi(api)
    created: Doc = custom.create_namespaced_custom_object(*RAY, namespace, plural, doc)
    return created


def rayjob(api: client.ApiClient, namespace: str, name: str) -> Doc:
    found: Doc = client.CustomObjectsApi(api).get_namespaced_custom_object(
        *RAY, namespace, "rayjobs", name
    )
    return found


def delete_rayjob(api: client.ApiClient, namespace: str, name: str, timeout: float = 120) -> None:
    """Delete the RayJob and wait until it is gone: KubeRay's finalizer on it needs the
    operator, so a test must not uninstall the chart while one is still being deleted
    (its namespace would then never go)."""
    custom = client.CustomObjectsApi(api)
    try:
        custom.delete_namespaced_custom_object(
            *RAY, namespace, "rayjobs", name, propagation_policy="Foreground"
        )
    except ApiException as err:
        if err.status != 404:
            raise
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            custom.get_namespaced_custom_object(*RAY, namespace, "rayjobs", name)
        except ApiException as err:
            if err.status == 404:
                return
            raise
        time.sleep(0.5)
    raise AssertionError(f"RayJob {namespace}/{name} still there {timeout:.0f}s after delete")


def workload(api: client.ApiClient, namespace: str, kind: str, name: str) -> Doc | None:
    """The Kueue Workload that stands for the `kind` object `name`, if there is one."""
    listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
        *KUEUE, namespace, "workloads"
    )
    for item in listed["items"]:
        owners = item["metadata"].get("ownerReferences") or []
        if any(o["kind"] == kind and o["name"] == name for o in owners):
            found: Doc = item
            return found
    return None


def condition(doc: Doc | None, kind: str) -> bool:
    """Whether `doc` has the status condition `kind` with status True."""
    if doc is None:
        return False
    conditions = doc.get("status", {}).get("conditions") or []
    return any(c["type"] == kind and c["status"] == "True" for c in conditions)


def admitted(api: client.ApiClient, namespace: str, kind: str, name: str) -> Doc | None:
    """The object's Workload once Kueue admitted it (for `eventually`), else None."""
    found = workload(api, namespace, kind, name)
    return found if condition(found, "Admitted") else None


def flavors(workload_doc: Doc) -> dict[str, set[str]]:
    """Each admitted pod set's flavors, by pod set name."""
    assignments = workload_doc["status"]["admission"]["podSetAssignments"]
    return {a["name"]: set(a.get("flavors", {}).values()) for a in assignments}


def cluster_pods(api: client.ApiClient, namespace: str, cluster_name: str) -> list[Any]:
    """The pods of a Ray cluster (head and workers), not yet being deleted."""
    pods = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"ray.io/cluster={cluster_name}"
    )
    return [p for p in pods.items if p.metadata.deletion_timestamp is None]


def pods_of_rayjob(api: client.ApiClient, namespace: str, name: str) -> list[Any]:
    """Every pod a RayJob made: its cluster's (named after it) and its submitter's."""
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace).items
    return [
        p
        for p in pods
        if (p.metadata.labels or {}).get("ray.io/cluster", "").startswith(f"{name}-")
        or (p.metadata.labels or {}).get("batch.kubernetes.io/job-name") == name
    ]


def submitter_log(api: client.ApiClient, namespace: str, name: str) -> str:
    """What the submitter pod printed: `ray job submit` tails the driver's output."""
    core = client.CoreV1Api(api)
    pods = core.list_namespaced_pod(
        namespace, label_selector=f"batch.kubernetes.io/job-name={name}"
    ).items
    return "\n".join(str(core.read_namespaced_pod_log(p.metadata.name, namespace)) for p in pods)


# run in a pod: what its caller gets from the head's dashboard and Jobs API (8265) and its
# Ray client port (10001), with RAY_AUTH_TOKEN if it has one (10 s for each: a port the
# team's NetworkPolicy closes answers nothing, its packets are dropped). The
# client port is called with gRPC directly (the PING the Ray client starts with), as
# `ray.init("ray://...")` retries for half a minute and then names no cause.
PROBE = """
import os, sys, urllib.error, urllib.request, uuid
import grpc
from ray.core.generated import ray_client_pb2 as pb, ray_client_pb2_grpc as rpc
host, token = sys.argv[1], os.environ.get("RAY_AUTH_TOKEN")
bearer = [("authorization", f"Bearer {token}")] if token else []
request = urllib.request.Request(f"http://{host}:8265/api/jobs/", headers=dict(bearer))
try:
    with urllib.request.urlopen(request, timeout=10) as answer:
        print(f"8265: {answer.status}")
except urllib.error.HTTPError as err:
    print(f"8265: {err.code} {err.read().decode()[:120]}")
except OSError as err:
    print(f"8265: unreachable: {err}")
stub = rpc.RayletDriverStub(grpc.insecure_channel(f"{host}:10001"))
ping = pb.ClusterInfoRequest(type=pb.ClusterInfoType.PING)
try:
    stub.ClusterInfo(ping, timeout=10, metadata=[("client_id", uuid.uuid4().hex), *bearer])
    print("10001: answered")
except grpc.RpcError as err:
    print(f"10001: {err.code().name} {(err.details() or '')[:120]}")
"""


def probe_head(
    api: client.ApiClient, namespace: str, name: str, outside: str, timeout: float = 120
) -> list[str]:
    """PROBE against the head of RayJob `name`'s cluster from three pods of the Ray image,
    side by side: in `namespace`, a plain one (nothing mounted, no token) and one given the
    token from KubeRay's Secret for the cluster (named after it, key `auth_token`) as the
    job's own pods get it; and a plain one in the namespace `outside`. Their outputs, in
    that order."""
    cluster = rayjob(api, namespace, name)["status"]["rayClusterName"]
    core = client.CoreV1Api(api)
    secret = {"secretKeyRef": {"name": cluster, "key": "auth_token"}}
    head = f"{cluster}-head-svc.{namespace}.svc"
    token = [{"name": "RAY_AUTH_TOKEN", "valueFrom": secret}]
    pods = []
    sides = (("plain", namespace, []), ("token", namespace, token), ("outside", outside, []))
    for side, where, env in sides:
        command = ["python", "-c", PROBE, head]
        body = restricted(pod_spec(f"ray-probe-{side}-{cluster}"[:63], command))
        (container,) = body["spec"]["containers"]
        container["image"] = versions.get("ray").image_ref
        container["securityContext"]["runAsUser"] = 1000
        container["env"] = env
        pods.append((where, core.create_namespaced_pod(where, body).metadata.name))
    try:
        deadline = time.monotonic() + timeout
        for where, pod in pods:
            while phase(core, where, pod) not in ("Succeeded", "Failed"):
                assert time.monotonic() < deadline, f"{pod} did not end in {timeout:.0f} s"
                time.sleep(1)
        return [str(core.read_namespaced_pod_log(pod, where)) for where, pod in pods]
    finally:
        for where, pod in pods:
            core.delete_namespaced_pod(pod, where, grace_period_seconds=0)

"""`gridloop install` on the local cluster: the bundled chart, installed, upgraded,
rolled back and uninstalled as a user would, and the state of the world after each.

The bundle is built into a temporary folder without KAITO, which cannot be downloaded
here; the local profile leaves its controller off (and the DCGM exporter, whose GPUs are
simulated here).
One release is installed for the whole module (in its own namespace, under its own
name) with the cluster's fleet as values; the last test upgrades, rolls back and
uninstalls it, and the module's teardown removes whatever a failed test left behind.
CRDs are left in place: keeping them is what is tested.

The chart's controllers (Kueue, KubeRay's operator, agent-sandbox's) and the health
service run as real pods on the container node (the local profile pins them there): the
agent-sandbox controller that fills the warm pool is the chart's own pod. The sandboxes
it makes land on simulated nodes, which kwok marks Running.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException
from platform_install import NAMESPACE, RELEASE, Installed, installed_platform

from gridloop.health.queues import CONFIGURED

pytestmark = pytest.mark.cluster

TEAM = "default"  # values.yaml's one team: ClusterQueue "default" in namespace team-default
TEAM_NAMESPACE = "team-default"
SKIPPED = frozenset({"kaito"})
KUEUE = ("kueue.x-k8s.io", "v1beta2")
KUEUE_CRDS = {
    "clusterqueues.kueue.x-k8s.io",
    "localqueues.kueue.x-k8s.io",
    "resourceflavors.kueue.x-k8s.io",
    "workloads.kueue.x-k8s.io",
    "cohorts.kueue.x-k8s.io",
}
KUBERAY_CRDS = {"rayclusters.ray.io", "rayjobs.ray.io"}
SANDBOX_CRDS = {
    "sandboxes.agents.x-k8s.io",
    "sandboxclaims.extensions.agents.x-k8s.io",
    "sandboxtemplates.extensions.agents.x-k8s.io",
    "sandboxwarmpools.extensions.agents.x-k8s.io",
}
SANDBOXES = ("agents.x-k8s.io", "v1beta1")
SANDBOX_EXTENSIONS = ("extensions.agents.x-k8s.io", "v1beta1")
# on a warm pool's sandboxes (their Sandbox and pod) until a claim takes one
WARM_LABEL = "agents.x-k8s.io/warm-pool-sandbox"
SANDBOX_NAMESPACE = "agents"  # values.yaml's one sandbox namespace
SANDBOX_SYSTEM = "agent-sandbox-system"  # where upstream runs its controller
ROUTER_NAMESPACE = "sandbox-router"  # agentSandbox.router.namespace: the router, its issuer
GRIDLOOP = str(Path(sys.executable).parent / "gridloop")
SANDBOX_MESSAGE = "pods in sandbox namespaces must set spec.runtimeClassName to one of gvisor"
QUEUE_MESSAGE = (
    "GPU jobs in team namespaces must name a Kueue LocalQueue: set label kueue.x-k8s.io/queue-name"
)


@pytest.fixture(scope="module")
def installed(local_cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    with installed_platform(local_cluster, tmp_path_factory.mktemp("chart-install")) as done:
        yield done


def _ignore_missing(call, *args, **kwargs) -> None:
    try:
        call(*args, **kwargs)
    except ApiException as err:
        if err.status != 404:
            raise


def _release_workloads(installed: Installed) -> list[dict[str, Any]]:
    manifest = installed.helm("get", "manifest", RELEASE, "--namespace", NAMESPACE)
    assert manifest.returncode == 0, manifest.stderr
    docs = [d for d in yaml.safe_load_all(manifest.stdout) if d]
    return [d for d in docs if d["kind"] in ("Deployment", "DaemonSet")]


def _ready(apps: client.AppsV1Api, kind: str, name: str, namespace: str) -> bool:
    if kind == "Deployment":
        d = apps.read_namespaced_deployment_status(name, namespace)
        wanted = 1 if d.spec.replicas is None else d.spec.replicas
        return (d.status.ready_replicas or 0) >= wanted
    ds = apps.read_namespaced_daemon_set_status(name, namespace)
    return ds.status.number_ready == ds.status.desired_number_scheduled


def _cluster_queue(local_cluster, name: str = TEAM) -> dict[str, Any]:
    custom = client.CustomObjectsApi(local_cluster.api)
    return custom.get_cluster_custom_object(*KUEUE, "clusterqueues", name)


def _quotas(queue: dict[str, Any], name: str) -> dict[str, str]:
    """flavor -> the queue's nominalQuota of resource `name` in it."""
    quotas = {}
    for group in queue["spec"].get("resourceGroups", []):
        for flavor in group["flavors"]:
            for resource in flavor["resources"]:
                if resource["name"] == name:
                    quotas[flavor["name"]] = str(resource["nominalQuota"])
    return quotas


def _gpu_quotas(queue: dict[str, Any]) -> dict[str, str]:
    return _quotas(queue, "nvidia.com/gpu")


def _pool_gpus(fleet: dict[str, Any]) -> dict[str, str]:
    """flavor -> its GPUs: one per GPU pool, and the container nodes' CPU pool "system"
    (no GPU) when the fleet has containerNodes."""
    cpu_pool = {"system": "0"} if "containerNodes" in fleet else {}
    return cpu_pool | {
        f"{site['name']}-{pool['name']}": str(pool["nodes"] * pool["gpusPerNode"])
        for site in fleet["sites"]
        for pool in site["pools"]
    }


# --- the installed release ---


def test_install_reports_each_step_and_ends_with_the_notes(installed: Installed) -> None:
    out = installed.install_output
    assert "✓ values" in out and "release record ≈" in out
    assert "✓ doctor" in out and "✓ CRDs" in out
    # applied, or found as an install before this module's applied them
    assert "applied server-side, Established" in out or "as applied before, Established" in out
    assert "✓ components" in out
    assert f"✓ release {RELEASE}" in out and "deployed" in out
    assert "\nNOTES:\n" in out and f"is installed as release {RELEASE}" in out


def test_every_workload_of_the_release_and_upstream_becomes_ready(
    installed: Installed, local_cluster, eventually
) -> None:
    apps = client.AppsV1Api(local_cluster.api)
    released = _release_workloads(installed)
    names = {d["metadata"]["name"] for d in released}
    assert {f"{RELEASE}-health", "kuberay-operator"} <= names
    namespaces = {NAMESPACE} | {d["metadata"].get("namespace", NAMESPACE) for d in released}

    workloads = [
        (kind, item.metadata.name, namespace)
        for namespace in sorted(namespaces)
        for kind, items in (
            ("Deployment", apps.list_namespaced_deployment(namespace).items),
            ("DaemonSet", apps.list_namespaced_daemon_set(namespace).items),
        )
        for item in items
    ]

    assert workloads
    for kind, name, namespace in workloads:
        eventually(
            lambda k=kind, n=name, ns=namespace: _ready(apps, k, n, ns),
            f"{kind} {namespace}/{name} to be ready",
            60,
        )


def test_the_controllers_and_the_health_service_run_as_real_containers_on_the_container_node(
    installed: Installed, local_cluster
) -> None:
    """Not kwok's fiction: each pod was started by the kubelet on system-000, through
    containerd, from the image the bundle names, and passed its own readiness probe."""
    wanted = {
        NAMESPACE: {f"{RELEASE}-health", "kuberay-operator"},
        "kueue-system": {"kueue-controller-manager"},
        SANDBOX_SYSTEM: {"agent-sandbox-controller"},
        ROUTER_NAMESPACE: {"sandbox-router", "sandbox-token-issuer"},
    }
    apps = client.AppsV1Api(local_cluster.api)
    for namespace, names in wanted.items():
        for name in names:
            deployment = apps.read_namespaced_deployment(name, namespace)
            selector = ",".join(
                f"{k}={v}" for k, v in deployment.spec.selector.match_labels.items()
            )
            pods = local_cluster.core.list_namespaced_pod(namespace, label_selector=selector).items
            assert pods, f"{namespace}/{name} has pods"
            for pod in pods:
                assert pod.spec.node_name == "system-000", pod.metadata.name
                (status,) = pod.status.container_statuses
                assert status.ready and status.container_id.startswith("containerd://")
                assert status.image_id, "the kubelet pulled a real image"
                assert pod.status.pod_ip.startswith("10.200.0."), pod.status.pod_ip


def test_upstream_crds_are_installed_and_kept(installed: Installed, local_cluster) -> None:
    ext = client.ApiextensionsV1Api(local_cluster.api)
    present = {crd.metadata.name: crd for crd in ext.list_custom_resource_definition().items}

    assert set(present) >= KUEUE_CRDS | KUBERAY_CRDS | SANDBOX_CRDS
    for name in KUEUE_CRDS | KUBERAY_CRDS | SANDBOX_CRDS:
        crd = present[name]
        assert crd.metadata.annotations["helm.sh/resource-policy"] == "keep"
        managers = {m.manager for m in crd.metadata.managed_fields}
        assert "gridloop" in managers, f"{name} is applied server-side by gridloop install"


def test_the_fleet_becomes_one_flavor_per_pool_and_the_team_gets_every_gpu(
    installed: Installed, local_cluster
) -> None:
    custom = client.CustomObjectsApi(local_cluster.api)
    selector = f"app.kubernetes.io/instance={RELEASE}"
    flavors = custom.list_cluster_custom_object(*KUEUE, "resourceflavors", label_selector=selector)
    pools = _pool_gpus(installed.fleet)

    assert {f["metadata"]["name"] for f in flavors["items"]} == set(pools)
    assert _gpu_quotas(_cluster_queue(local_cluster)) == pools


def test_a_raycluster_is_accepted_server_side(installed: Installed, local_cluster, namespace):
    custom = client.CustomObjectsApi(local_cluster.api)
    raycluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "minimal"},
        "spec": {
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {
                    "spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.46.0"}]}
                },
            }
        },
    }

    created = custom.create_namespaced_custom_object(
        "ray.io", "v1", namespace, "rayclusters", raycluster
    )

    assert created["metadata"]["uid"]
    read = custom.get_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", "minimal")
    assert read["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["name"] == "ray-head"


def _pod(name: str, runtime_class: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "agent", "image": "python:3.12-slim"}]}
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _gpu_job(name: str, queue: str | None) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    container = {
        "name": "train",
        "image": "busybox",
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "suspend": True,  # Kueue would start it; nothing needs to run here
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }


def _refusal(create, what: str, eventually) -> ApiException:
    """Poll until `create()` is refused (a new ValidatingAdmissionPolicy takes a moment
    to be loaded); whatever it created meanwhile is deleted by `create` itself."""
    refused: list[ApiException] = []

    def check() -> bool:
        try:
            create()
        except ApiException as err:
            if err.status != 403:  # a ValidatingAdmissionPolicy denial is Forbidden
                raise
            refused.append(err)
            return True
        return False

    eventually(check, what, 30)
    return refused[-1]


def test_sandbox_namespaces_only_admit_gvisor_pods(
    installed: Installed, local_cluster, namespace, eventually
) -> None:
    core = local_cluster.core
    # the chart's RuntimeClass: a pod naming a class that does not exist is refused
    # before the policy looks
    assert client.NodeV1Api(local_cluster.api).read_runtime_class("gvisor").handler == "runsc"
    core.patch_namespace(namespace, {"metadata": {"labels": {"gridloop.io/sandbox": "true"}}})

    def create_plain() -> None:
        name = f"plain-{uuid.uuid4().hex[:5]}"  # an earlier try may still be terminating
        core.create_namespaced_pod(namespace, _pod(name, None))
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)

    refused = _refusal(
        create_plain, "the sandbox policy to refuse a pod without gVisor", eventually
    )

    assert SANDBOX_MESSAGE in refused.body
    created = core.create_namespaced_pod(namespace, _pod("sandboxed", "gvisor"))
    assert created.spec.runtime_class_name == "gvisor"
    core.delete_namespaced_pod("sandboxed", namespace, grace_period_seconds=0)


# --- agent sandboxes: the chart's template and warm pool, filled by the real controller ---


def test_the_sandbox_template_and_warm_pool_are_accepted(installed: Installed, local_cluster):
    custom = client.CustomObjectsApi(local_cluster.api)

    template = custom.get_namespaced_custom_object(
        *SANDBOX_EXTENSIONS, SANDBOX_NAMESPACE, "sandboxtemplates", "default"
    )
    pool = custom.get_namespaced_custom_object(
        *SANDBOX_EXTENSIONS, SANDBOX_NAMESPACE, "sandboxwarmpools", "default"
    )

    pod = template["spec"]["podTemplate"]["spec"]
    assert pod["runtimeClassName"] == "gvisor"
    assert pod["automountServiceAccountToken"] is False
    assert pool["spec"]["sandboxTemplateRef"] == {"name": "default"}
    assert pool["spec"]["replicas"] == 1  # the local profile's size


def _sandbox_pods(local_cluster) -> list[client.V1Pod]:
    return list(local_cluster.core.list_namespaced_pod(SANDBOX_NAMESPACE).items)


def _running(pod: client.V1Pod) -> bool:
    return pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None


def _owner(obj: Any) -> str:
    """`Kind/name` of an object's first owner, a client model or a plain dict."""
    if isinstance(obj, dict):
        owners = obj["metadata"].get("ownerReferences") or []
        return f"{owners[0]['kind']}/{owners[0]['name']}" if owners else ""
    owners = obj.metadata.owner_references or []
    return f"{owners[0].kind}/{owners[0].name}" if owners else ""


def _warm(local_cluster) -> list[client.V1Pod]:
    return [p for p in _sandbox_pods(local_cluster) if WARM_LABEL in (p.metadata.labels or {})]


def test_the_real_controller_fills_the_warm_pool_with_gvisor_pods_the_policy_admits(
    installed: Installed, local_cluster, eventually
) -> None:
    """v1.0.3's warm pool keeps Sandboxes (each owning its pod, named as it)."""
    custom = client.CustomObjectsApi(local_cluster.api)
    eventually(
        lambda: any(_running(p) for p in _warm(local_cluster)),
        "a running warm-pool pod in agents",
        60,
    )

    (pod,) = _warm(local_cluster)
    sandbox = custom.get_namespaced_custom_object(
        *SANDBOXES, SANDBOX_NAMESPACE, "sandboxes", pod.metadata.name
    )
    assert _owner(sandbox) == "SandboxWarmPool/default"
    assert _owner(pod) == f"Sandbox/{pod.metadata.name}"
    assert pod.spec.runtime_class_name == "gvisor"
    assert pod.spec.automount_service_account_token is False
    (container,) = pod.spec.containers
    assert container.security_context.read_only_root_filesystem is True
    assert container.security_context.capabilities.drop == ["ALL"]


def test_a_claim_takes_a_warm_sandbox_and_the_pool_is_refilled(
    installed: Installed, local_cluster, eventually
) -> None:
    custom = client.CustomObjectsApi(local_cluster.api)
    eventually(lambda: bool(_warm(local_cluster)), "the warm pool to hold a pod", 60)
    (warm,) = _warm(local_cluster)
    claim = {
        "apiVersion": "/".join(SANDBOX_EXTENSIONS),
        "kind": "SandboxClaim",
        "metadata": {"name": "agent-run-1"},
        "spec": {"warmPoolRef": {"name": "default"}},
    }

    custom.create_namespaced_custom_object(
        *SANDBOX_EXTENSIONS, SANDBOX_NAMESPACE, "sandboxclaims", claim
    )

    def bound() -> str:
        got = custom.get_namespaced_custom_object(
            *SANDBOX_EXTENSIONS, SANDBOX_NAMESPACE, "sandboxclaims", "agent-run-1"
        )
        status = got.get("status") or {}
        conditions = status.get("conditions") or []
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return str((status.get("sandbox") or {}).get("name", "")) if ready else ""

    eventually(lambda: bool(bound()), "the claim to be Ready", 60)
    assert bound() == warm.metadata.name, "the warm sandbox was handed to the claim"
    sandbox = custom.get_namespaced_custom_object(
        *SANDBOXES, SANDBOX_NAMESPACE, "sandboxes", warm.metadata.name
    )
    assert _owner(sandbox) == "SandboxClaim/agent-run-1"
    eventually(
        lambda: any(
            _running(p) and p.metadata.name != warm.metadata.name for p in _warm(local_cluster)
        ),
        "the warm pool to be refilled",
        60,
    )


def test_a_gpu_job_in_a_team_namespace_never_bypasses_kueue(
    installed: Installed, local_cluster, eventually
) -> None:
    batch, core = client.BatchV1Api(local_cluster.api), local_cluster.core

    # Where the team has its LocalQueue "default", Kueue's webhook (the real controller
    # `gridloop local up` runs) files a queue-less Job there, suspended until admitted.
    created = batch.create_namespaced_job(TEAM_NAMESPACE, _gpu_job("unqueued", None))
    try:
        assert created.metadata.labels["kueue.x-k8s.io/queue-name"] == "default"
        assert created.spec.suspend is True
    finally:
        batch.delete_namespaced_job("unqueued", TEAM_NAMESPACE, propagation_policy="Background")

    # A team namespace with no LocalQueue to default to: the policy refuses the Job.
    bare = f"team-bare-{uuid.uuid4().hex[:5]}"
    core.create_namespace({"metadata": {"name": bare, "labels": {"gridloop.io/team": "bare"}}})
    try:

        def create_unqueued() -> None:
            name = f"unqueued-{uuid.uuid4().hex[:5]}"
            batch.create_namespaced_job(bare, _gpu_job(name, None))
            batch.delete_namespaced_job(name, bare, propagation_policy="Background")

        refused = _refusal(
            create_unqueued, "the queue policy to refuse a queue-less GPU job", eventually
        )
        assert QUEUE_MESSAGE in refused.body
        queued = batch.create_namespaced_job(bare, _gpu_job("queued", "default"))
        assert queued.metadata.labels["kueue.x-k8s.io/queue-name"] == "default"
    finally:
        core.delete_namespace(bare, propagation_policy="Background")


def test_installing_the_same_values_again_changes_nothing(installed: Installed) -> None:
    """On this cluster the real Kueue runs, and its webhook rewrites the queues' memory
    quotas in canonical form (16384Gi as 16Ti) when they are created: still equal."""
    again = installed.install(installed.fleet, "same-fleet-values.yaml")

    assert again.returncode == 0, again.stdout + again.stderr
    said = " ".join(again.stdout.split())
    assert f"✓ release {RELEASE} revision {installed.revision} is up to date: nothing changed" in (
        said
    )
    assert "✓ CRDs" not in said and "✓ ready" in said


# --- upgrade, rollback, uninstall (last: it ends the release) ---


def test_upgrade_rollback_and_uninstall_keep_crds_namespaces_and_user_objects(
    installed: Installed, local_cluster, eventually
) -> None:
    """The grown pool's ninth node exists only in the values, and the health service runs:
    Helm raises the queue's quotas in place, and the health service takes Helm's new GPU
    quota as the configured one but keeps the nominal at the GPUs the pool's nodes have."""
    before = _cluster_queue(local_cluster)
    grown = yaml.safe_load(yaml.safe_dump(installed.fleet))
    site, pool = grown["sites"][0], grown["sites"][0]["pools"][0]
    pool["nodes"] += 1
    flavor = f"{site['name']}-{pool['name']}"
    old_cpu = int(_quotas(before, "cpu")[flavor])
    healthy = _gpu_quotas(before)[flavor]

    upgraded = installed.install(grown, "grown-fleet-values.yaml")

    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
    assert f"revision {installed.revision + 1} deployed" in upgraded.stdout
    after = _cluster_queue(local_cluster)
    assert after["metadata"]["uid"] == before["metadata"]["uid"], "updated in place"
    per_node = old_cpu // (pool["nodes"] - 1)
    assert _quotas(after, "cpu")[flavor] == str(old_cpu + per_node)

    def configured_by_helm_kept_healthy_by_the_service() -> bool:
        queue = _cluster_queue(local_cluster)
        record = json.loads(queue["metadata"].get("annotations", {}).get(CONFIGURED, "{}"))
        configured = record.get(flavor, {}).get("configured")
        return configured == pool["nodes"] * pool["gpusPerNode"] and (
            _gpu_quotas(queue)[flavor] == healthy
        )

    eventually(
        configured_by_helm_kept_healthy_by_the_service,
        f"the health service to keep {flavor} at its {healthy} GPUs, configured by Helm",
        60,
    )

    first = str(installed.revision)
    back = ("rollback", RELEASE, first, "--namespace", NAMESPACE, "--wait")
    # the service now owns the GPU quotas (docs/queues.md, Upgrades): Helm must force
    refused = installed.helm(*back)
    assert refused.returncode != 0
    assert 'conflict with "gridloop-health"' in refused.stderr, refused.stderr
    rolled = installed.helm(*back, "--force-conflicts")

    assert rolled.returncode == 0, rolled.stderr
    restored = _cluster_queue(local_cluster)
    assert restored["metadata"]["uid"] == before["metadata"]["uid"]
    assert _gpu_quotas(restored) == _gpu_quotas(before)

    custom = client.CustomObjectsApi(local_cluster.api)
    mine = f"user-queue-{uuid.uuid4().hex[:5]}"
    user_queue = {
        "apiVersion": "/".join(KUEUE),
        "kind": "ClusterQueue",
        "metadata": {"name": mine},
        "spec": {"namespaceSelector": {}},
    }
    custom.create_cluster_custom_object(*KUEUE, "clusterqueues", user_queue)
    # what users made in the namespaces the chart created for them
    user_template = {
        "apiVersion": "/".join(SANDBOX_EXTENSIONS),
        "kind": "SandboxTemplate",
        "metadata": {"name": mine},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "a", "image": "busybox"}]}}},
    }
    custom.create_namespaced_custom_object(
        *SANDBOX_EXTENSIONS, SANDBOX_NAMESPACE, "sandboxtemplates", user_template
    )
    local_cluster.core.create_namespaced_config_map(
        TEAM_NAMESPACE, {"metadata": {"name": mine}, "data": {"run": "42"}}
    )
    try:
        removed = installed.gridloop("uninstall", *installed.where())

        assert removed.returncode == 0, removed.stderr
        apps = client.AppsV1Api(local_cluster.api)
        for deployment in _deployments_gone(apps):
            eventually(deployment, "the release's Deployments to be deleted", 60)
        ext = client.ApiextensionsV1Api(local_cluster.api)
        left = {crd.metadata.name for crd in ext.list_custom_resource_definition().items}
        assert left >= KUEUE_CRDS | KUBERAY_CRDS | SANDBOX_CRDS, "uninstall keeps the CRDs"
        assert _cluster_queue(local_cluster, mine)["metadata"]["name"] == mine
        for kept in (TEAM_NAMESPACE, SANDBOX_NAMESPACE):
            space = local_cluster.core.read_namespace(kept)
            assert space.metadata.deletion_timestamp is None, f"{kept} is kept"
        assert (
            custom.get_namespaced_custom_object(
                *SANDBOX_EXTENSIONS, SANDBOX_NAMESPACE, "sandboxtemplates", mine
            )["metadata"]["name"]
            == mine
        )
        assert local_cluster.core.read_namespaced_config_map(mine, TEAM_NAMESPACE).data == {
            "run": "42"
        }
        with pytest.raises(ApiException) as gone:
            _cluster_queue(local_cluster, TEAM)
        assert gone.value.status == 404, "the release's own ClusterQueue goes with it"
    finally:
        _ignore_missing(custom.delete_cluster_custom_object, *KUEUE, "clusterqueues", mine)


def _deployments_gone(apps: client.AppsV1Api):
    def gone(name: str, namespace: str):
        def check() -> bool:
            try:
                apps.read_namespaced_deployment(name, namespace)
            except ApiException as err:
                return err.status == 404
            return False

        return check

    return [gone(f"{RELEASE}-health", NAMESPACE), gone("kuberay-operator", NAMESPACE)]


def test_a_plain_helm_install_of_the_bundle_refuses_bad_values_and_readies_every_workload(
    installed: Installed, local_cluster
) -> None:
    """After the module's release is gone: the bundled chart with Helm alone, no gridloop.
    Helm installs crds/ itself (they exist: kept) and takes back the namespaces the
    uninstall kept, since the release has the same name. With Kueue on it goes in two
    steps, as Kueue's own docs ask: Kueue first (`kueue.queues.enabled=false`), then the
    queues, once its webhooks answer: in one step Helm creates the ClusterQueues
    through webhooks that have no server or CA bundle yet, and the install fails."""
    values = ["-f", str(installed.chart / "profiles" / "local.yaml")]
    values += ["-f", str(installed.work / "fleet-values.yaml")]
    where = [RELEASE, str(installed.chart), "--namespace", NAMESPACE]

    bad = installed.helm("install", *where, *values, "--set", "health.replicas=two")

    assert bad.returncode != 0
    # Helm names the key as a JSON pointer
    assert "at '/health/replicas': got string, want integer" in bad.stderr, bad.stderr
    assert installed.helm("status", RELEASE, "--namespace", NAMESPACE).returncode != 0

    first = ["--set", "kueue.queues.enabled=false", "--wait", "--timeout", "2m"]
    good = installed.helm("install", *where, *values, *first)
    try:
        assert good.returncode == 0, good.stderr
        queues = installed.helm("upgrade", *where, *values, "--wait", "--timeout", "2m")
        assert queues.returncode == 0, queues.stderr
        assert _gpu_quotas(_cluster_queue(local_cluster)) == _pool_gpus(installed.fleet)
        apps = client.AppsV1Api(local_cluster.api)
        released = _release_workloads(installed)
        assert {d["metadata"]["name"] for d in released} == {
            f"{RELEASE}-health",
            "kuberay-operator",
            "agent-sandbox-controller",
            "kueue-controller-manager",
            "sandbox-router",
            "sandbox-token-issuer",
        }
        for doc in released:
            kind, name = doc["kind"], doc["metadata"]["name"]
            namespace = doc["metadata"].get("namespace", NAMESPACE)
            assert _ready(apps, kind, name, namespace), f"{kind} {namespace}/{name}"
    finally:
        # not `helm uninstall`: it deletes Kueue with the queues it holds finalizers on
        installed.gridloop("uninstall", *installed.where())

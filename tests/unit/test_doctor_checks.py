"""doctor's decisions, table-driven on plain data: what a cluster looks like in, checks out."""

from __future__ import annotations

import dataclasses

import pytest

from gridloop.chart import checks
from gridloop.chart.diagnosis import (
    Check,
    Existing,
    Node,
    Observed,
    Planned,
    Release,
    Status,
    Workload,
)

H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "gridloop.io/pool": "h100"}
GPU_NODE = Node("gpu-0", H100, gpus=8)
LOCAL_KUEUE_HOOKS = (
    "kueue-mutating-webhook-configuration",
    "kueue-validating-webhook-configuration",
)

HEALTHY = Observed(
    server_version="v1.35.4",
    denied=(),
    nodes=(GPU_NODE, Node("cpu-0", {}, gpus=0)),
    runtime_classes={},
    workloads=(),
    webhooks=(),
    crds=frozenset(),
    existing=(),
    namespace_phase="Active",
    kubectl="v1.35.4",
)
LOCAL = Planned(
    release="gridloop",
    namespace="gridloop-system",
    enabled={"kueue": False, "kuberay": True, "kaito": False, "dcgmExporter": False},
    pinned={"kueue": "v0.17.1", "kuberay": "v1.5.0", "kaito": "v0.10.0"},
    kinds=frozenset({"Deployment", "ClusterQueue", "ResourceFlavor", "LocalQueue"}),
    flavors={"us-east-h100": {"gridloop.io/pool": "h100"}},
)


def check(name: str, observed: Observed = HEALTHY, planned: Planned = LOCAL) -> Check:
    (found,) = [c for c in checks.evaluate(observed, planned) if c.name == name]
    return found


def test_a_healthy_cluster_passes_every_check_but_the_controllerless_kueue_objects() -> None:
    found = checks.evaluate(HEALTHY, LOCAL)

    assert not checks.failed(found)
    assert [c.name for c in found if c.status is Status.WARN] == ["kueue"]
    assert (
        "nothing acts on the ClusterQueue, LocalQueue, ResourceFlavor objects"
        in check("kueue").detail
    )


@pytest.mark.parametrize(
    ("version", "status", "words"),
    [
        ("v1.29.9", Status.FAIL, "older than v1.30.0"),
        ("v1.30.0", Status.PASS, "supported"),
        ("v1.35.4-gke.100", Status.PASS, "supported"),
        ("v1.37.0", Status.WARN, "newer than v1.35.4"),
        ("banana", Status.WARN, "cannot read the server version"),
    ],
)
def test_the_kubernetes_version_must_be_supported(version: str, status: Status, words: str):
    found = check("kubernetes-version", dataclasses.replace(HEALTHY, server_version=version))

    assert found.status is status
    assert words in found.detail
    assert bool(found.fix) == (status is not Status.PASS)


def test_missing_permissions_fail_and_name_the_first_few() -> None:
    denied = tuple(f"create thing{i}" for i in range(6))

    found = check("permissions", dataclasses.replace(HEALTHY, denied=denied))

    assert found.status is Status.FAIL
    assert "missing 6 permissions" in found.detail and "(+2 more)" in found.detail
    assert found.items == denied
    assert "cluster admin" in found.fix


def test_a_cluster_without_gpu_nodes_fails_with_a_fix() -> None:
    found = check("gpu-nodes", dataclasses.replace(HEALTHY, nodes=(Node("cpu-0", {}, 0),)))

    assert found.status is Status.FAIL
    assert found.detail == "no node offers nvidia.com/gpu (1 nodes)"
    assert "device plugin" in found.fix


def test_what_could_not_be_read_is_a_warning_naming_the_refusal() -> None:
    unread = dataclasses.replace(HEALTHY, nodes=None, refused={"nodes": "forbidden"})

    found = check("gpu-nodes", unread)

    assert found.status is Status.WARN
    assert found.detail == "could not check: reading nodes failed (forbidden)"


def test_gpu_nodes_without_the_product_label_or_flavors_without_nodes_warn() -> None:
    bare = dataclasses.replace(HEALTHY, nodes=(Node("gpu-0", {}, 8),))
    elsewhere = dataclasses.replace(LOCAL, flavors={"eu-a100": {"gridloop.io/pool": "a100"}})

    assert "no nvidia.com/gpu.product label: gpu-0" in check("gpu-labels", bare).detail
    assert "eu-a100 (gridloop.io/pool=a100)" in check("gpu-labels", planned=elsewhere).detail
    assert check("gpu-labels").status is Status.PASS


def test_a_runtime_class_with_another_handler_fails_the_install() -> None:
    sandboxes = dataclasses.replace(LOCAL, runtime_classes={"gvisor": "runsc"})
    clash = dataclasses.replace(HEALTHY, runtime_classes={"gvisor": "gvisor-handler"})
    ready = dataclasses.replace(
        HEALTHY, nodes=(dataclasses.replace(GPU_NODE, runtime_handlers=("runc", "runsc")),)
    )

    assert check("runtime-classes", clash, sandboxes).status is Status.FAIL
    assert check("runtime-classes", HEALTHY, sandboxes).status is Status.WARN  # unknown
    assert check("runtime-classes", ready, sandboxes).status is Status.PASS
    assert check("runtime-classes").detail.endswith("(sandboxes off)")


KUEUE_ELSEWHERE = Workload(
    "kueue-system", "kueue-controller-manager", ("registry.k8s.io/kueue/kueue:v0.16.2",)
)


@pytest.mark.parametrize(
    ("workloads", "webhooks", "kueue_on", "status", "words"),
    [
        pytest.param((KUEUE_ELSEWHERE,), (), True, Status.FAIL, "two controllers", id="clash"),
        pytest.param((KUEUE_ELSEWHERE,), (), False, Status.WARN, "v0.17.1's CRDs", id="older"),
        pytest.param((), LOCAL_KUEUE_HOOKS, False, Status.PASS, "leaves it alone", id="local"),
        pytest.param((), (), True, Status.PASS, "installed by this chart", id="ours"),
    ],
)
def test_an_existing_kueue_is_a_clash_only_when_the_chart_brings_its_own(
    workloads, webhooks, kueue_on: bool, status: Status, words: str
) -> None:
    observed = dataclasses.replace(HEALTHY, workloads=workloads, webhooks=webhooks)
    planned = dataclasses.replace(LOCAL, enabled={**LOCAL.enabled, "kueue": kueue_on})

    found = check("kueue", observed, planned)

    assert found.status is status
    assert words in found.detail


def test_a_controller_the_bundle_left_out_is_not_called_installed() -> None:
    why = "cannot download https://example.invalid/kaito.tgz (no route)"
    planned = dataclasses.replace(
        LOCAL, enabled={**LOCAL.enabled, "kaito": True}, left_out={"kaito": why}
    )

    found = check("kaito", HEALTHY, planned)

    assert found.status is Status.WARN
    assert found.detail == f"KAITO is left out of this bundle ({why}) and not installed"
    assert "or set kaito.enabled=false" in (found.fix or "")
    serving = dataclasses.replace(planned, kinds=planned.kinds | {"Workspace"})
    assert "nothing acts on the Workspace objects" in check("kaito", HEALTHY, serving).detail


def test_the_chart_may_adopt_its_own_kuberay_but_not_someone_elses() -> None:
    ours = Workload("default", "kuberay-operator", (), "gridloop", "gridloop-system")
    theirs = dataclasses.replace(ours, release="ray", release_namespace="ray")

    assert check("kuberay", dataclasses.replace(HEALTHY, workloads=(ours,))).status is Status.PASS
    found = check("kuberay", dataclasses.replace(HEALTHY, workloads=(theirs,)))
    assert found.status is Status.FAIL
    assert found.fix == "set kuberay.enabled=false to use that one, or uninstall it first"


def test_a_gpu_operator_with_the_charts_dcgm_exporter_warns_of_two_exporters() -> None:
    operator = Workload("gpu-operator", "gpu-operator", ("nvcr.io/nvidia/gpu-operator:v25.3.0",))
    observed = dataclasses.replace(HEALTHY, workloads=(operator,))
    exporting = dataclasses.replace(LOCAL, enabled={**LOCAL.enabled, "dcgmExporter": True})

    assert check("gpu-operator", observed).status is Status.PASS
    found = check("gpu-operator", observed, exporting)
    assert found.status is Status.WARN
    assert found.fix == "set dcgmExporter.enabled=false"


def test_monitoring_objects_without_the_prometheus_operator_fail() -> None:
    monitoring = dataclasses.replace(LOCAL, kinds=LOCAL.kinds | {"ServiceMonitor"})
    with_crds = dataclasses.replace(
        HEALTHY, crds=frozenset({"servicemonitors.monitoring.coreos.com"})
    )

    found = check("prometheus-operator", HEALTHY, monitoring)
    assert found.status is Status.FAIL
    assert "monitoring.enabled=false" in found.fix
    assert check("prometheus-operator", with_crds, monitoring).status is Status.PASS


def test_a_name_owned_by_another_release_or_nobody_fails_and_says_whose() -> None:
    other = Existing("ConfigMap", "gridloop-system", "gridloop-health", "old", "legacy")
    nobody = Existing("ClusterRole", "", "gridloop-health")
    mine = Existing("Deployment", "gridloop-system", "x", "gridloop", "gridloop-system")

    taken = check("free-names", dataclasses.replace(HEALTHY, existing=(other, mine)))
    adopt = check("free-names", dataclasses.replace(HEALTHY, existing=(nobody,)))

    assert taken.status is Status.FAIL
    assert "ConfigMap gridloop-system/gridloop-health (release old)" in taken.detail
    assert taken.fix == "uninstall release old (namespace legacy), or choose another --release"
    assert adopt.status is Status.FAIL and "meta.helm.sh/release-name" in adopt.fix
    assert check("free-names", dataclasses.replace(HEALTHY, existing=(mine,))).status is (
        Status.PASS
    )


def test_names_an_uninstalled_release_kept_say_how_to_take_them_back() -> None:
    kept = Existing("Namespace", "", "agents", "old", "legacy", kept=True)
    owned = Existing("ConfigMap", "legacy", "x", "old", "legacy")

    left = check("free-names", dataclasses.replace(HEALTHY, existing=(kept,)))
    mixed = check("free-names", dataclasses.replace(HEALTHY, existing=(kept, owned)))

    assert left.status is Status.FAIL
    assert "Namespace agents (release old)" in left.detail
    assert left.fix == (
        "they outlive an uninstall (helm.sh/resource-policy: keep): install as release "
        "old (namespace legacy) to take them back, or delete them"
    )
    assert mixed.fix.startswith("uninstall release old (namespace legacy)")


def test_a_pending_release_warns_and_a_terminating_namespace_fails() -> None:
    pending = dataclasses.replace(HEALTHY, release=Release(3, "pending-upgrade"))
    terminating = dataclasses.replace(HEALTHY, namespace_phase="Terminating")

    assert check("release", pending).status is Status.WARN
    assert "rolls forward" in check("release", pending).fix
    assert check("namespace", terminating).status is Status.FAIL
    assert check("namespace", dataclasses.replace(HEALTHY, namespace_phase=None)).detail == (
        "gridloop-system does not exist yet: created"
    )


def test_summary_counts_each_status_and_json_keeps_the_whole_list() -> None:
    found = checks.evaluate(dataclasses.replace(HEALTHY, denied=("create a", "create b")), LOCAL)

    assert checks.summary(found) == f"{len(found) - 2} pass, 1 warn, 1 fail"
    (permissions,) = [c.as_dict() for c in found if c.name == "permissions"]
    assert permissions["status"] == "fail"
    assert permissions["items"] == ["create a", "create b"]


@pytest.mark.parametrize("client", ["v1.34.2", "v1.35.4", "v1.36.0"])
def test_a_kubectl_within_one_minor_of_the_server_passes(client: str) -> None:
    assert check("kubectl", dataclasses.replace(HEALTHY, kubectl=client)).status is Status.PASS


def test_a_kubectl_outside_the_skew_window_fails_naming_both_versions() -> None:
    found = check("kubectl", dataclasses.replace(HEALTHY, kubectl="v1.28.0"))

    assert found.status is Status.FAIL
    assert found.detail == (
        "kubectl v1.28.0 is outside the skew window of the server v1.35.4 "
        "(one minor version either way)"
    )
    assert found.fix == "use a kubectl 1.34 to 1.36 (--kubectl PATH)"


def test_no_kubectl_fails_with_the_line_that_says_why() -> None:
    missing = "kubectl not found on PATH: install kubectl, or pass --kubectl PATH"
    found = check("kubectl", dataclasses.replace(HEALTHY, kubectl=None, kubectl_problem=missing))

    assert (found.status, found.detail) == (Status.FAIL, missing)


WITH_MODEL = dataclasses.replace(
    LOCAL, secrets={"models-s3": "inference.models[0].credentialsSecret"}
)


def test_a_models_credentials_secret_that_does_not_exist_fails_naming_the_key() -> None:
    missing = check("secrets", dataclasses.replace(HEALTHY, secrets_found=frozenset()), WITH_MODEL)

    assert missing.status is Status.FAIL
    assert missing.detail == (
        "inference.models[0].credentialsSecret: Secret gridloop-system/models-s3 does not exist"
    )
    assert "kubectl -n gridloop-system create secret generic models-s3 --from-env-file=FILE" in (
        missing.fix
    )
    assert "--from-literal" not in missing.fix  # keys on a command line land in shell history


def test_an_existing_secret_or_none_named_passes_and_an_unreadable_one_warns() -> None:
    present = dataclasses.replace(HEALTHY, secrets_found=frozenset({"models-s3"}))
    unreadable = dataclasses.replace(HEALTHY, refused={"secrets": "403 Forbidden"})

    assert check("secrets", present, WITH_MODEL).status is Status.PASS
    assert check("secrets").detail == "the values name no Secret"
    assert check("secrets", unreadable, WITH_MODEL).status is Status.WARN


def test_the_plan_names_each_models_secret_once_by_its_first_key() -> None:
    from gridloop.chart.planning import named_secrets

    models = [
        {"name": "a", "credentialsSecret": "s3-keys"},
        {"name": "b"},
        {"name": "c", "credentialsSecret": "s3-keys"},
    ]
    assert named_secrets({"inference": {"models": models}}) == {
        "s3-keys": "inference.models[0].credentialsSecret"
    }
    assert named_secrets({"inference": {"enabled": False, "models": models}}) == {}


# --- sandbox egress: what `internet` would let a sandbox reach ---

DEFAULT_DENIED = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16")
INTERNET = dataclasses.replace(LOCAL, sandbox_egress="internet", denied_cidrs=DEFAULT_DENIED)
CLUSTER = dataclasses.replace(
    HEALTHY,
    nodes=(Node("n-0", {}, gpus=0, addresses=("10.0.4.7",), pod_cidrs=("10.244.0.0/24",)),),
    api_server=("10.96.0.1", "10.0.0.2"),
    service_cidrs=("10.96.0.0/16",),
)


def test_egress_none_or_dns_needs_no_denied_range() -> None:
    for mode, says in (("none", "reach nothing"), ("dns", "cluster DNS only")):
        planned = dataclasses.replace(INTERNET, sandbox_egress=mode)
        found = check("sandbox-egress", CLUSTER, planned)
        assert found.status is Status.PASS and says in found.detail
    no_sandboxes = check("sandbox-egress", CLUSTER, LOCAL)
    assert no_sandboxes.detail == "the install makes no sandbox namespace"


def test_internet_egress_passes_when_the_denied_ranges_cover_the_cluster() -> None:
    found = check("sandbox-egress", CLUSTER, INTERNET)
    assert found.status is Status.PASS, found.detail
    assert found.detail.endswith("the Service range 10.96.0.0/16")


def test_a_node_that_reports_a_loopback_address_is_no_way_out() -> None:
    """kwok's simulated nodes report 127.0.0.1: from a pod that is the pod itself."""
    simulated = dataclasses.replace(
        CLUSTER,
        nodes=(Node("kwok-0", {}, gpus=8, addresses=("127.0.0.1", "::1"), pod_cidrs=()),),
    )
    assert check("sandbox-egress", simulated, INTERNET).status is Status.PASS


def test_a_service_range_outside_the_denied_ranges_fails_and_an_unread_one_is_said() -> None:
    public = dataclasses.replace(CLUSTER, service_cidrs=("10.96.0.0/16", "100.70.0.0/16"))
    found = check("sandbox-egress", public, INTERNET)
    assert found.status is Status.FAIL
    assert found.items == ("the Service range 100.70.0.0/16",)
    unread = check("sandbox-egress", dataclasses.replace(CLUSTER, service_cidrs=None), INTERNET)
    assert unread.status is Status.PASS
    assert "no ServiceCIDR to read" in unread.detail


def test_internet_egress_fails_naming_each_cluster_address_left_outside() -> None:
    """A public API endpoint and nodes on the carrier-grade NAT range (100.64.0.0/10, which
    RFC 1918 leaves out) are reachable from a sandbox with the default list."""
    cloud = dataclasses.replace(
        CLUSTER,
        nodes=(Node("n-0", {}, gpus=0, addresses=("100.64.3.9",), pod_cidrs=("100.96.0.0/24",)),),
        api_server=("10.96.0.1", "34.120.1.2"),
    )
    found = check("sandbox-egress", cloud, INTERNET)
    assert found.status is Status.FAIL
    assert found.items == (
        "the API server 34.120.1.2",
        "node n-0 100.64.3.9",
        "node n-0's pods 100.96.0.0/24",
    )
    assert "agentSandbox.network.deniedCIDRs" in found.detail and "deniedCIDRs" in found.fix
    wider = dataclasses.replace(
        INTERNET, denied_cidrs=(*DEFAULT_DENIED, "100.64.0.0/10", "34.120.1.2/32")
    )
    assert check("sandbox-egress", cloud, wider).status is Status.PASS


def test_internet_egress_with_the_api_server_unread_warns_naming_the_refusal() -> None:
    unread = dataclasses.replace(
        CLUSTER, api_server=None, refused={"the kubernetes Service": "403 Forbidden"}
    )
    found = check("sandbox-egress", unread, INTERNET)
    assert found.status is Status.WARN and "403 Forbidden" in found.detail


def test_the_plan_reads_the_egress_mode_only_when_sandbox_namespaces_are_made() -> None:
    from gridloop.chart import planning

    on = {"enabled": True, "sandboxes": {"enabled": True}, "namespaces": ["agents"]}
    assert planning.sandbox_egress({"agentSandbox": on}) == "none"
    internet = {**on, "network": {"egress": "internet"}}
    assert planning.sandbox_egress({"agentSandbox": internet}) == "internet"
    assert planning.sandbox_egress({"agentSandbox": {**internet, "enabled": False}}) == ""
    assert planning.sandbox_egress({"agentSandbox": {**internet, "namespaces": []}}) == ""

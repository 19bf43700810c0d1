"""The chart's own DCGM exporter (templates/dcgm-exporter.yaml), rendered by the real helm.

Rendered as test_chart_render.py renders (profiles/minimal.yaml, which leaves the
exporter off, plus dcgmExporter.enabled=true) and asserted on as objects: the pinned
image, the node's name as its host label, pod attribution through the kubelet's
socket, gridloop's counters, the Service the ServiceMonitor scrapes, where it runs and
what it tolerates, and one line naming the value for every combination it refuses.
That the wiring survives a real kubelet is tests/cluster/test_dcgm_exporter_wiring.py.
"""

# The fixtures helm, render and render_error are test_chart_render.py's, imported by name
# (how pytest finds them); each test's parameter of that name then "redefines" them.
# ruff: noqa: F401, F811

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_files import CHART, PROFILE_NAMES, UPSTREAM_OFF
from test_chart_render import (
    DEFAULT_FLEET,
    PROFILES,
    Doc,
    Render,
    helm,
    named,
    of_kind,
    render,
    render_error,
    values_file,
)

from gridloop import versions
from gridloop.bundle import images
from gridloop.fleet import CONTAINER_NODE_LABEL, LABEL_GPU_PRESENT
from gridloop.fleet.nodes import planned_container_nodes, planned_nodes
from gridloop.fleet.schema import load_fleet
from gridloop.health.observed import TAINT_KEY

pytestmark = pytest.mark.needs_binaries("helm")

ON = "dcgmExporter.enabled=true"
NAME = "gridloop-dcgm-exporter"
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())


def exporter(render: Render, *sets: str, files: tuple[Path, ...] = ()) -> list[Doc]:
    return render(*files, sets=(ON, *sets))


def pod_of(docs: list[Doc]) -> Doc:
    spec: Doc = named(docs, "DaemonSet", NAME)["spec"]["template"]["spec"]
    return spec


def container_of(docs: list[Doc]) -> Doc:
    containers: list[Doc] = pod_of(docs)["containers"]
    (container,) = containers
    return container


def env_of(container: Doc) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def mount_of(docs: list[Doc], volume: str) -> tuple[Doc, Doc]:
    """(the container's mount, the pod's volume) of `volume`."""
    (mount,) = [m for m in container_of(docs)["volumeMounts"] if m["name"] == volume]
    (found,) = [v for v in pod_of(docs)["volumes"] if v["name"] == volume]
    return mount, found


def tolerates(tolerations: list[Doc], key: str, value: str, effect: str) -> bool:
    """Whether a taint key=value:effect is tolerated, as the scheduler and kubelet decide."""
    for t in tolerations:
        if t.get("key", "") not in ("", key):
            continue
        if t.get("operator", "Equal") == "Equal" and t.get("value", "") != value:
            continue
        if t.get("effect", "") in ("", effect):
            return True
    return False


# --- the image is the one versions.yaml pins ---


def test_the_default_tag_is_the_dcgm_exporter_version_versions_yaml_pins() -> None:
    pinned = versions.get("dcgm-exporter").version

    assert VALUES["dcgmExporter"]["image"]["tag"] == f"{pinned}-ubuntu22.04"


def test_the_daemonset_runs_the_pinned_image(render: Render) -> None:
    image = container_of(exporter(render))["image"]

    tag = versions.get("dcgm-exporter").version
    assert image == f"nvcr.io/nvidia/k8s/dcgm-exporter:{tag}-ubuntu22.04"


def test_air_gapped_pulls_the_exporter_by_the_name_images_txt_lists(render: Render) -> None:
    image = container_of(exporter(render, "imageRegistry=registry.corp:5000/mirror"))["image"]

    listed = images.in_values(VALUES)
    assert image.removeprefix("registry.corp:5000/mirror/") in listed


# --- what the exporter is told ---


def test_the_host_label_is_the_nodes_name_not_the_pods(render: Render) -> None:
    env = env_of(container_of(exporter(render)))

    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert "DCGM_EXPORTER_NO_HOSTNAME" not in env


def test_pods_are_attributed_through_the_kubelets_socket_mounted_read_only(
    render: Render,
) -> None:
    docs = exporter(render)
    env = env_of(container_of(docs))
    mount, volume = mount_of(docs, "pod-resources")

    assert env["DCGM_EXPORTER_KUBERNETES"] == "true"
    assert env["DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE"] == "uid"
    assert "NVIDIA_RESOURCE_NAMES" not in env
    assert mount == {
        "name": "pod-resources",
        "mountPath": "/var/lib/kubelet/pod-resources",
        "readOnly": True,
    }
    assert env["DCGM_POD_RESOURCES_KUBELET_SOCKET"] == f"{mount['mountPath']}/kubelet.sock"
    assert volume["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}


def test_another_kubelet_root_and_device_plugin_naming_are_values(render: Render) -> None:
    docs = exporter(
        render,
        "dcgmExporter.podResources.hostPath=/var/lib/k0s/kubelet/pod-resources",
        "dcgmExporter.podResources.gpuIdType=device-name",
        "dcgmExporter.podResources.resourceNames={nvidia.com/a100,nvidia.com/h100}",
    )
    env = env_of(container_of(docs))
    mount, volume = mount_of(docs, "pod-resources")

    assert volume["hostPath"]["path"] == "/var/lib/k0s/kubelet/pod-resources"
    assert mount["mountPath"] == "/var/lib/kubelet/pod-resources"  # where the exporter looks
    assert env["DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE"] == "device-name"
    assert env["NVIDIA_RESOURCE_NAMES"] == "nvidia.com/a100,nvidia.com/h100"


def test_the_counters_configmap_is_mounted_and_passed_to_the_exporter(render: Render) -> None:
    docs = exporter(render, "dcgmExporter.counters.configMapName=fleet-counters")
    env = env_of(container_of(docs))
    mount, volume = mount_of(docs, "counters")

    assert volume["configMap"]["name"] == "fleet-counters"
    assert "counters.csv" in named(docs, "ConfigMap", "fleet-counters")["data"]
    assert mount["readOnly"] is True
    # what -f/--collectors reads
    assert env["DCGM_EXPORTER_COLLECTORS"] == f"{mount['mountPath']}/counters.csv"
    assert "args" not in container_of(docs), "no -f flag to contradict the variable"


def test_a_change_to_the_counters_restarts_the_exporter(render: Render) -> None:
    def checksum(*sets: str) -> str:
        template = named(exporter(render, *sets), "DaemonSet", NAME)["spec"]["template"]
        value: str = template["metadata"]["annotations"]["checksum/counters"]
        return value

    before = checksum()

    assert checksum("health.replicas=3") == before
    fan = "dcgmExporter.counters.extra[0]=DCGM_FI_DEV_FAN_SPEED\\, gauge\\, Fan speed"
    assert checksum(fan) != before


def test_extra_environment_is_added_after_the_charts_own(render: Render, tmp_path: Path) -> None:
    extra = [{"name": "DCGM_EXPORTER_INTERVAL", "value": "10000"}]
    values = values_file(tmp_path, {"dcgmExporter": {"extraEnv": extra}})

    env = container_of(exporter(render, files=(values,)))["env"]

    assert env[-1] == extra[0] and env[0]["name"] == "NODE_NAME"


# --- Prometheus finds it ---


@pytest.mark.parametrize(
    "sets",
    [(), ("dcgmExporter.serviceMonitor.selector.team=gpu", "dcgmExporter.serviceMonitor.port=gpu")],
    ids=["defaults", "own-selector-and-port"],
)
def test_the_service_and_the_servicemonitor_select_each_other(
    render: Render, sets: tuple[str, ...]
) -> None:
    docs = exporter(render, *sets)
    service = named(docs, "Service", NAME)
    monitor = named(docs, "ServiceMonitor", NAME)
    template = named(docs, "DaemonSet", NAME)["spec"]["template"]
    (port,) = service["spec"]["ports"]
    (endpoint,) = monitor["spec"]["endpoints"]
    (container_port,) = container_of(docs)["ports"]

    wanted = monitor["spec"]["selector"]["matchLabels"]
    assert wanted.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    assert endpoint["port"] == port["name"]
    assert port["targetPort"] == container_port["name"] == "metrics"
    assert port["port"] == container_port["containerPort"] == 9400
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    assert service["spec"]["clusterIP"] == "None", "each exporter scraped at its own address"


def test_the_default_port_name_is_metrics(render: Render) -> None:
    (port,) = named(exporter(render), "Service", NAME)["spec"]["ports"]

    assert port["name"] == "metrics"


# --- where it runs ---


def test_it_runs_on_every_gpu_node_of_the_fleet_and_on_no_container_node(
    render: Render,
) -> None:
    selector = pod_of(exporter(render))["nodeSelector"]
    fleet = load_fleet(DEFAULT_FLEET)

    assert selector == {LABEL_GPU_PRESENT: "true"}
    for node in planned_nodes(fleet):
        assert selector.items() <= node.labels.items(), node.name
    for container_node in planned_container_nodes(fleet):
        assert not selector.items() <= container_node.labels.items(), container_node.name


def test_the_system_nodes_placement_leaves_the_exporter_on_the_gpu_nodes(
    render: Render,
) -> None:
    pod = pod_of(exporter(render, "systemNodes.nodeSelector.pool=system"))

    assert pod["nodeSelector"] == {LABEL_GPU_PRESENT: "true"}


def test_it_tolerates_the_gpu_taint_and_the_quarantine_with_any_effect(render: Render) -> None:
    tolerations = pod_of(exporter(render))["tolerations"]

    assert tolerates(tolerations, "nvidia.com/gpu", "present", "NoSchedule")
    # a quarantined node must keep reporting, or the health service never releases it
    assert tolerates(tolerations, TAINT_KEY, "true", "NoSchedule")
    assert tolerates(tolerations, TAINT_KEY, "true", "NoExecute")
    assert not tolerates(tolerations, CONTAINER_NODE_LABEL, "true", "NoSchedule")
    assert not tolerates(tolerations, "anything-else", "x", "NoExecute")


def test_a_tolerations_list_of_ones_own_keeps_the_quarantine_toleration(
    render: Render, tmp_path: Path
) -> None:
    mine = [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    values = values_file(tmp_path, {"dcgmExporter": {"tolerations": mine}})

    tolerations = pod_of(exporter(render, files=(values,)))["tolerations"]

    assert tolerates(tolerations, "dedicated", "gpu", "NoSchedule")
    assert not tolerates(tolerations, "nvidia.com/gpu", "present", "NoSchedule")
    assert tolerates(tolerations, TAINT_KEY, "true", "NoExecute")


# --- privileges (docs/security.md) ---


def test_it_runs_as_root_with_no_capability_and_no_api_token(render: Render) -> None:
    docs = exporter(render)
    context = container_of(docs)["securityContext"]

    assert context["runAsUser"] == 0 and context["privileged"] is False
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod_of(docs)["automountServiceAccountToken"] is False
    assert named(docs, "ServiceAccount", NAME)["automountServiceAccountToken"] is False
    assert not [d for d in of_kind(docs, "ClusterRoleBinding") if NAME in str(d)]
    assert not [d for d in of_kind(docs, "RoleBinding") if NAME in str(d)]
    host_paths = [v["hostPath"]["path"] for v in pod_of(docs)["volumes"] if "hostPath" in v]
    assert host_paths == ["/var/lib/kubelet/pod-resources"]


def test_profiling_metrics_add_sys_admin_and_nothing_else(render: Render) -> None:
    docs = exporter(
        render,
        "dcgmExporter.profiling=true",
        "dcgmExporter.counters.extra[0]=DCGM_FI_PROF_SM_ACTIVE\\, gauge\\, SM active",
    )

    assert container_of(docs)["securityContext"]["capabilities"] == {
        "drop": ["ALL"],
        "add": ["SYS_ADMIN"],
    }


# --- on and off ---


def test_disabled_renders_no_exporter_but_keeps_the_counters_and_the_servicemonitor(
    render: Render,
) -> None:
    docs = render()  # profiles/minimal.yaml: dcgmExporter.enabled=false

    assert not [d for d in docs if d["metadata"]["name"] == NAME and d["kind"] != "ServiceMonitor"]
    assert named(docs, "ConfigMap", "gridloop-dcgm-counters")
    assert named(docs, "ServiceMonitor", NAME)


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_the_profiles_run_the_exporter_except_local_and_minimal(
    render: Render, profile: str
) -> None:
    docs = render(PROFILES / f"{profile}.yaml", sets=(UPSTREAM_OFF,), base=())

    running = [d for d in of_kind(docs, "DaemonSet") if d["metadata"]["name"] == NAME]
    # local: its GPUs are kwok's, served by `gridloop local up`'s simulated exporters
    assert bool(running) == (profile not in ("local", "minimal"))


# --- refused values: one line naming the field ---

REFUSED = [
    pytest.param(
        ("dcgmExporter.counters.enabled=false",),
        {},
        "dcgmExporter.enabled is true but dcgmExporter.counters.enabled is false",
        id="counters-off",
    ),
    pytest.param(
        (),
        {"dcgmExporter": {"nodeSelector": {LABEL_GPU_PRESENT: None}}},
        "dcgmExporter.nodeSelector is empty and dcgmExporter.affinity sets nothing",
        id="every-node",
    ),
    pytest.param(
        ("dcgmExporter.serviceMonitor.namespace=gpu-operator",),
        {},
        'dcgmExporter.serviceMonitor.namespace is "gpu-operator", but the chart\'s exporter',
        id="servicemonitor-elsewhere",
    ),
    pytest.param(
        ("dcgmExporter.counters.extra[0]=DCGM_FI_PROF_SM_ACTIVE\\, gauge\\, SM active",),
        {},
        "dcgmExporter.counters.extra[0]: DCGM_FI_PROF_SM_ACTIVE is a profiling metric",
        id="profiling-field-without-profiling",
    ),
    pytest.param(
        ("dcgmExporter.extraEnv[0].name=NODE_NAME", "dcgmExporter.extraEnv[0].value=x"),
        {},
        "dcgmExporter.extraEnv[0].name: NODE_NAME is set by the chart",
        id="extra-env-the-chart-sets",
    ),
    pytest.param(
        ("dcgmExporter.podResources.gpuIdType=pci",),
        {},
        "/dcgmExporter/podResources/gpuIdType",
        id="gpu-id-type",
    ),
    pytest.param(
        ("dcgmExporter.podResources.hostPath=var/lib/kubelet",),
        {},
        "/dcgmExporter/podResources/hostPath",
        id="relative-host-path",
    ),
    pytest.param(("dcgmExporter.image.tag=",), {}, "/dcgmExporter/image/tag", id="empty-tag"),
    pytest.param(
        ("dcgmExporter.tolerations[0].effect=NoScheduled",),
        {},
        "/dcgmExporter/tolerations/0/effect",
        id="toleration-effect",
    ),
    pytest.param(("dcgmExporter.nodeSelectorr.a=b",), {}, "nodeSelectorr", id="misspelt-key"),
]


@pytest.mark.parametrize(("sets", "values", "field"), REFUSED)
def test_a_bad_value_is_refused_in_one_line_naming_it(
    render_error: Callable[..., str],
    tmp_path: Path,
    sets: tuple[str, ...],
    values: dict[str, Any],
    field: str,
) -> None:
    files = (values_file(tmp_path, values),) if values else ()

    error = render_error(*files, sets=(ON, *sets))

    assert len([line for line in error.splitlines() if field in line]) == 1, error

"""The chart's DCGM exporter DaemonSet, run on the real container node with its wiring intact.

The exporter image itself cannot run without a GPU, so the wiring is what is shown. The
chart's DaemonSet is rendered by the real helm and applied as it is, except for three
things: its image becomes the local busybox (a shell that reports what the exporter
would see, and serves /health on the metrics port so the chart's probes pass), and,
since the local cluster's GPU nodes are kwok's (no kubelet runs their pods), its
nodeSelector names the container node (untainted: the tolerations stay the chart's).
The pod-resources folder is the container node's own kubelet's (it runs with its own
--root-dir, set through dcgmExporter.podResources.hostPath); the counters ConfigMap is
the chart's. Everything else (environment, mounts, security context, the
ServiceAccount) reaches the real kubelet and runc as the chart renders it, once as
shipped and once with dcgmExporter.profiling (CAP_SYS_ADMIN).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from chart_template import CHART, helm_template
from container_pods import NODE
from kubernetes import client

from gridloop.fleet import CONTAINER_NODE_LABEL
from gridloop.health.observed import TAINT_KEY
from gridloop.local.build.images import table
from gridloop.local.container.layout import NodeLayout

pytestmark = pytest.mark.cluster

NAME = "gridloop-dcgm-exporter"
# What the busybox stand-in prints: what the exporter would read, then it serves /health.
REPORT = """\
echo "node=$NODE_NAME"
echo "uid=$(id -u)"
grep '^CapEff:' /proc/self/status
test -S "$DCGM_POD_RESOURCES_KUBELET_SOCKET" && echo "socket=present"
touch /var/lib/kubelet/pod-resources/probe 2>/dev/null || echo "pod-resources=read-only"
grep -q '^DCGM_FI_DEV_XID_ERRORS,' "$DCGM_EXPORTER_COLLECTORS" && echo "counters=gridloop's"
mkdir -p /tmp/www && echo ok > /tmp/www/health
exec httpd -f -p 9400 -h /tmp/www
"""


def rendered(
    namespace: str, pod_resources: Path, home: Path, profiling: bool
) -> dict[str, dict[str, Any]]:
    """The exporter's objects and the counters ConfigMap, as `helm template` renders them."""
    docs = helm_template(
        "gridloop",
        namespace,
        home,
        *("-f", str(CHART / "profiles" / "minimal.yaml")),
        "--set",
        f"dcgmExporter.enabled=true,dcgmExporter.podResources.hostPath={pod_resources},"
        f"dcgmExporter.profiling={str(profiling).lower()}",
        *("--show-only", "templates/dcgm-exporter.yaml"),
        *("--show-only", "templates/gpu-metrics.yaml"),
    )
    return {d["kind"]: d for d in docs}


def on_the_container_node(daemonset: dict[str, Any]) -> dict[str, Any]:
    """The DaemonSet with busybox for the exporter and the container node for the GPU nodes."""
    changed = copy.deepcopy(daemonset)
    pod = changed["spec"]["template"]["spec"]
    pod["nodeSelector"] = {CONTAINER_NODE_LABEL: "true"}
    (container,) = pod["containers"]
    container["image"] = table.busybox_ref()
    container["command"] = ["sh", "-c", REPORT]
    return changed


# the effective capability set root gets: none, or CAP_SYS_ADMIN (bit 21) for profiling
CAP_EFF = {False: "0000000000000000", True: f"{1 << 21:016x}"}


@pytest.mark.parametrize("profiling", [False, True], ids=["default", "profiling"])
def test_the_exporter_pod_spec_runs_on_a_real_kubelet_as_the_chart_wires_it(
    local_cluster, namespace, eventually, tmp_path, profiling
):
    pod_resources = NodeLayout.of(local_cluster.state.dir, NODE).kubelet_root / "pod-resources"
    objects = rendered(namespace, pod_resources, tmp_path, profiling)
    chart_pod = objects["DaemonSet"]["spec"]["template"]["spec"]
    core = local_cluster.core
    core.create_namespaced_service_account(namespace, objects["ServiceAccount"])
    core.create_namespaced_config_map(namespace, objects["ConfigMap"])
    apps = client.AppsV1Api(local_cluster.api)
    apps.create_namespaced_daemon_set(namespace, on_the_container_node(objects["DaemonSet"]))
    selector = ",".join(f"{k}={v}" for k, v in objects["Service"]["spec"]["selector"].items())

    def ready_pod() -> Any:
        for pod in core.list_namespaced_pod(namespace, label_selector=selector).items:
            conditions = {c.type: c.status for c in pod.status.conditions or []}
            if conditions.get("Ready") == "True":
                return pod
        return None

    # Ready: the chart's readiness probe (/health on the port named metrics) answered
    pod = eventually(ready_pod, "the exporter's pod to be Ready on the container node", 120)
    log = core.read_namespaced_pod_log(pod.metadata.name, namespace)

    assert pod.spec.node_name == NODE
    assert f"node={NODE}" in log.splitlines(), log  # NODE_NAME is the node, not the pod
    # root, with no capability but SYS_ADMIN when profiling: no_new_privs keeps it
    assert "uid=0" in log and f"CapEff:\t{CAP_EFF[profiling]}" in log, log
    assert "socket=present" in log, log  # the kubelet's own pod-resources socket
    assert "pod-resources=read-only" in log, log
    assert "counters=gridloop's" in log, log

    (live,) = pod.spec.containers
    (chart,) = chart_pod["containers"]
    assert [e.name for e in live.env] == [e["name"] for e in chart["env"]]
    assert {e.name: e.value for e in live.env if e.value} == {
        e["name"]: e["value"] for e in chart["env"] if "value" in e
    }
    # no token mounted beside the chart's two read-only mounts
    assert [(m.name, m.mount_path, m.read_only) for m in live.volume_mounts] == [
        (m["name"], m["mountPath"], m["readOnly"]) for m in chart["volumeMounts"]
    ]
    assert live.security_context.run_as_user == 0
    assert live.security_context.allow_privilege_escalation is False
    assert live.security_context.capabilities.drop == ["ALL"]
    volumes = {v.name: v for v in pod.spec.volumes}
    assert volumes["pod-resources"].host_path.path == str(pod_resources)
    assert volumes["counters"].config_map.name == objects["ConfigMap"]["metadata"]["name"]
    assert pod.spec.service_account_name == NAME
    assert pod.spec.automount_service_account_token is False
    assert any(t.key == TAINT_KEY and t.operator == "Exists" for t in pod.spec.tolerations)

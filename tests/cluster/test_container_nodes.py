"""The container node: a real kubelet with containerd, runc and gVisor, beside the kwok fleet.

Nothing here is simulated: the pods run as real containers (runc on the host kernel,
or gVisor's), their images come from the local registry, and `kubectl logs` and
`kubectl exec` go through the API server to the kubelet. The GPU nodes next to it stay
kwok's (simulated), and kwok must leave this node and its pods alone.
"""

from __future__ import annotations

import ipaddress
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
from container_pods import NODE, kubectl, phase, pod_spec
from kubernetes import client
from kubernetes.client.rest import ApiException

from examples import example
from gridloop import versions
from gridloop.fleet import CONTAINER_NODE_LABEL, KWOK_NODE_ANNOTATION, SIMULATED_LABEL
from gridloop.fleet.nodes import planned_container_nodes
from gridloop.fleet.schema import load_fleet
from gridloop.local.build.images import gridloop_image
from gridloop.local.container import configs, starting
from gridloop.models import rollouts

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def gvisor(local_cluster) -> Iterator[str]:
    """A RuntimeClass for gVisor's handler (`runsc`), this module's own."""
    name = f"gvisor-test-{uuid.uuid4().hex[:5]}"
    node = client.NodeV1Api(local_cluster.api)
    node.create_runtime_class({"metadata": {"name": name}, "handler": "runsc"})
    yield name
    node.delete_runtime_class(name)


def test_the_container_node_is_a_real_kubelet_registered_as_itself(local_cluster):
    fleet = load_fleet(local_cluster.state.dir / "fleet.yaml")
    planned = planned_container_nodes(fleet)[0]

    node = local_cluster.core.read_node(NODE)

    labels = node.metadata.labels
    assert labels[CONTAINER_NODE_LABEL] == "true" and SIMULATED_LABEL not in labels
    assert KWOK_NODE_ANNOTATION not in (node.metadata.annotations or {})
    assert node.status.node_info.kubelet_version == versions.get("kubernetes").version
    containerd = versions.get("containerd").version.lstrip("v")
    assert node.status.node_info.container_runtime_version == f"containerd://{containerd}"
    assert [a.address for a in node.status.addresses if a.type == "InternalIP"] == [planned.node_ip]
    assert {h.name for h in node.status.runtime_handlers or []} >= {"runc", "runsc"}


def test_a_runc_pod_runs_with_a_pod_ip_and_kubectl_logs_and_exec_reach_it(
    local_cluster, namespace, eventually
):
    core = local_cluster.core
    core.create_namespaced_pod(
        namespace, pod_spec("hello", ["sh", "-c", "echo hello from $(hostname); sleep 3600"])
    )

    eventually(lambda: phase(core, namespace, "hello") == "Running", "the pod to run", 90)

    pod = core.read_namespaced_pod("hello", namespace)
    assert pod.spec.node_name == NODE
    fleet = load_fleet(local_cluster.state.dir / "fleet.yaml")
    assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(
        planned_container_nodes(fleet)[0].pod_cidr
    )
    logs = eventually(
        lambda: (
            "hello from hello" in kubectl(local_cluster, "logs", "-n", namespace, "hello").stdout
        ),
        "kubectl logs to show the pod's output",
    )
    assert logs
    kernel = kubectl(local_cluster, "exec", "-n", namespace, "hello", "--", "cat", "/proc/version")
    assert kernel.returncode == 0, kernel.stderr
    with open("/proc/version") as host:
        assert kernel.stdout.strip() == host.read().strip()  # runc: the host's own kernel


def test_a_gvisor_pod_runs_on_gvisors_kernel_not_the_hosts(
    local_cluster, namespace, gvisor, eventually
):
    core = local_cluster.core
    core.create_namespaced_pod(
        namespace, pod_spec("sandboxed", ["sleep", "3600"], runtimeClassName=gvisor)
    )

    eventually(lambda: phase(core, namespace, "sandboxed") == "Running", "the gVisor pod", 90)

    dmesg = kubectl(local_cluster, "exec", "-n", namespace, "sandboxed", "--", "dmesg")
    assert dmesg.returncode == 0, dmesg.stderr
    assert "Starting gVisor" in dmesg.stdout
    kernel = kubectl(local_cluster, "exec", "-n", namespace, "sandboxed", "--", "uname", "-r")
    with open("/proc/sys/kernel/osrelease") as host:
        assert kernel.stdout.strip() != host.read().strip()


def test_a_pod_whose_image_does_not_exist_is_never_ready(local_cluster, namespace, eventually):
    """The fake-ready path is gone: kwok marked every pod Ready, a kubelet pulls the image."""
    apps = client.AppsV1Api(local_cluster.api)
    pod = pod_spec("missing", ["sleep", "3600"])["spec"]
    pod["restartPolicy"] = "Always"
    pod["containers"][0]["image"] = "ghcr.io/gridloop/does-not-exist:0.0.0"
    apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "missing"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "missing"}},
                "template": {"metadata": {"labels": {"app": "missing"}}, "spec": pod},
            },
        },
    )

    def waiting_reason() -> str:
        for p in local_cluster.core.list_namespaced_pod(namespace).items:
            for status in p.status.container_statuses or []:
                if status.state.waiting:
                    return str(status.state.waiting.reason)
        return ""

    reason = eventually(
        lambda: waiting_reason() in ("ErrImagePull", "ImagePullBackOff") and waiting_reason(),
        "the kubelet to fail pulling the image",
        90,
    )
    assert reason in ("ErrImagePull", "ImagePullBackOff")
    # the registry's "no such image" in the kubelet's words is what ends an install's wait
    # at once (models/rollouts.py): pinned here against containerd's real message
    (pod,) = local_cluster.core.list_namespaced_pod(namespace).items
    as_dict = local_cluster.api.sanitize_for_serialization(pod)
    assert rollouts.certain(as_dict), as_dict["status"]["containerStatuses"]
    assert "the registry has no ghcr.io/gridloop/does-not-exist:0.0.0" in rollouts.pod_reason(
        as_dict, ""
    )
    deployment = apps.read_namespaced_deployment("missing", namespace)
    assert not deployment.status.available_replicas
    assert not deployment.status.ready_replicas


def test_a_secret_changed_under_a_running_pod_reaches_its_volume_within_its_sync(
    local_cluster, namespace, eventually
):
    """Kueue writes its webhook certificate into the Secret its own pod mounts, and is not
    ready until the file changes; a kubelet refreshes a mounted Secret at the pod's next
    sync, every 60 to 90 s by default (seen: Kueue unready 97 s on an install). The local
    kubelets sync every `configs.SYNC_FREQUENCY` (10 s, so 10 to 15 s)."""
    core = local_cluster.core
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": "cert"}, "stringData": {"v": "first"}}
    )
    body = pod_spec("reader", ["sh", "-c", "while true; do cat /cert/v; echo; sleep 1; done"])
    body["spec"]["volumes"] = [{"name": "cert", "secret": {"secretName": "cert"}}]
    body["spec"]["containers"][0]["volumeMounts"] = [{"name": "cert", "mountPath": "/cert"}]
    core.create_namespaced_pod(namespace, body)

    def last_line() -> str:
        logs = kubectl(local_cluster, "logs", "-n", namespace, "reader", "--tail=1").stdout
        return logs.strip()

    eventually(lambda: last_line() == "first", "the pod to read the Secret", 90)
    # past the syncs its start brought (its container started, its status written): the
    # change must wait for the periodic one, as Kueue's certificate does when it is late
    time.sleep(5)
    core.patch_namespaced_secret("cert", namespace, {"stringData": {"v": "second"}})

    # 30 s: the sync's 15 s at most, and room for a busy machine; the default takes 60 to 90
    eventually(lambda: last_line() == "second", "the changed Secret in the pod's volume", 30)


def test_the_kubelet_may_change_only_its_own_node(local_cluster):
    """Node authorizer and NodeRestriction: the kubelet's identity is system:node:<name>."""
    kubeconfig = local_cluster.state.dir / "nodes" / NODE / "kubelet.kubeconfig"
    api = _api_for(kubeconfig)
    core = client.CoreV1Api(api)
    simulated = local_cluster.core.list_node(label_selector=f"{SIMULATED_LABEL}=true").items[0]

    with pytest.raises(ApiException) as denied:
        core.patch_node(simulated.metadata.name, {"metadata": {"labels": {"stolen": "yes"}}})
    assert denied.value.status == 403
    with pytest.raises(ApiException) as secrets:
        core.list_secret_for_all_namespaces()
    assert secrets.value.status == 403
    mine = core.patch_node(NODE, {"metadata": {"annotations": {"gridloop.io/test": "ok"}}})
    assert mine.metadata.annotations["gridloop.io/test"] == "ok"


def test_a_clusterip_service_answers_by_its_dns_name(local_cluster, namespace, eventually):
    """kube-proxy programs the Service, CoreDNS answers its name under cluster.local."""
    core, apps = local_cluster.core, client.AppsV1Api(local_cluster.api)
    reply = "printf 'HTTP/1.0 200 OK\\r\\n\\r\\nhi from %s\\n' $(hostname)"
    serve = f"while true; do {reply} | nc -l -p 8080; done"
    server = pod_spec("x", ["sh", "-c", serve])["spec"]
    server["restartPolicy"] = "Always"
    apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": server},
            },
        },
    )
    core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    )
    core.create_namespaced_pod(namespace, pod_spec("client", ["sleep", "3600"]))
    eventually(lambda: phase(core, namespace, "client") == "Running", "the client pod", 90)
    cluster_ip = core.read_namespaced_service("web", namespace).spec.cluster_ip
    name = f"web.{namespace}.svc.cluster.local"

    def lookup() -> str:
        found = kubectl(local_cluster, "exec", "-n", namespace, "client", "--", "nslookup", name)
        return found.stdout if found.returncode == 0 else ""

    answer = str(eventually(lookup, f"CoreDNS to answer {name}", 30))
    assert f"Address: {cluster_ip}" in answer

    def fetch() -> str:
        # busybox's nc, to the address the name gave: kube-proxy's rules take it to the pod
        got = kubectl(
            local_cluster,
            "exec",
            "-n",
            namespace,
            "client",
            "--",
            "sh",
            "-c",
            f"nc -w 3 {cluster_ip} 80 </dev/null",
        )
        return got.stdout if "hi from web-" in got.stdout else ""

    assert "hi from web-" in str(eventually(fetch, "the Service to reach the pod", 60))


IN_CLUSTER = """
from kubernetes import client, config
from kubernetes.client.rest import ApiException
config.load_incluster_config()
print("version", client.VersionApi().get_code().git_version)
try:
    client.CoreV1Api().list_namespaced_secret("kube-system")
except ApiException as err:
    print("secrets", err.status)
"""


def test_gridloops_image_reaches_the_api_server_from_a_pod_as_its_service_account(
    local_cluster, namespace, eventually
):
    """gridloop's own image (built from the Containerfile) runs as its non-root user and
    talks to the API server through the `kubernetes` Service with in-cluster config."""
    spec = pod_spec("in-cluster", ["python3", "-c", IN_CLUSTER])
    container = spec["spec"]["containers"][0]
    container["image"] = gridloop_image.image_ref()
    container["securityContext"]["runAsUser"] = 65532
    core = local_cluster.core
    core.create_namespaced_pod(namespace, spec)

    eventually(
        lambda: phase(core, namespace, "in-cluster") == "Succeeded", "the pod to finish", 120
    )

    logs = core.read_namespaced_pod_log("in-cluster", namespace)
    assert f"version {versions.get('kubernetes').version}" in logs
    assert "secrets 403" in logs  # the default ServiceAccount may not read Secrets


def test_containerd_takes_the_mirrored_registries_from_the_local_one(local_cluster):
    hosts = local_cluster.state.dir / "nodes" / NODE / "certs.d"

    assert sorted(p.name for p in hosts.iterdir()) == sorted(configs.MIRRORED)
    text = (hosts / "registry.k8s.io" / "hosts.toml").read_text()
    assert f"http://127.0.0.1:{local_cluster.state.ports.registry}/v2/registry.k8s.io" in text


def _api_for(kubeconfig) -> client.ApiClient:
    from gridloop import kube

    return kube.api_client(kubeconfig)


def test_a_second_cluster_with_container_nodes_is_refused_while_this_one_runs(
    local_cluster, tmp_path, gridloop
):
    """They would share the host's network namespace and rewrite each other's rules."""
    state = tmp_path / "second"
    fleet = local_cluster.state.dir / "fleet.yaml"

    result = gridloop(
        "local", "up", "--fleet", str(fleet), "--state-dir", str(state), "--base-port", "27800"
    )

    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"local cluster in {local_cluster.state.dir.resolve()}" in lines[0]
    assert not (state / "state.json").exists()


def test_nothing_a_pod_sends_is_routed_off_the_machine(local_cluster, namespace, eventually):
    """No default route in the pod; on the host, bridge traffic bound for another
    interface is dropped, and the API server's port takes only loopback and the bridge.
    (Nothing here can send from another machine: the rules are checked, not crossed.)"""
    core = local_cluster.core
    core.create_namespaced_pod(namespace, pod_spec("routes", ["sleep", "3600"]))
    eventually(lambda: phase(core, namespace, "routes") == "Running", "the pod", 90)

    routes = kubectl(
        local_cluster, "exec", "-n", namespace, "routes", "--", "cat", "/proc/net/route"
    )

    assert routes.returncode == 0, routes.stderr
    destinations = [line.split()[1] for line in routes.stdout.splitlines()[1:]]
    assert destinations and "00000000" not in destinations  # no default route
    rules = subprocess.run(
        ["iptables-save", "-t", "filter"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert "-A FORWARD -i gridloop0 -j GRIDLOOP-ISOLATE" in rules
    assert "-A GRIDLOOP-ISOLATE ! -o gridloop0 -j DROP" in rules
    port = local_cluster.state.ports.apiserver
    assert f"-A INPUT -p tcp -m tcp --dport {port} -j GRIDLOOP-HOST" in rules
    for rule in (
        "-A GRIDLOOP-HOST -i lo -j RETURN",
        "-A GRIDLOOP-HOST -i gridloop0 -j RETURN",
        "-A GRIDLOOP-HOST -j DROP",
    ):
        assert rule in rules


def test_up_drops_the_taint_an_older_gridloop_registered_the_container_node_with(local_cluster):
    core = local_cluster.core
    old = {"key": CONTAINER_NODE_LABEL, "value": "true", "effect": "NoSchedule"}
    mine = {"key": "example.com/keep", "value": "yes", "effect": "PreferNoSchedule"}
    core.patch_node(NODE, {"spec": {"taints": [old, mine]}})
    try:
        assert starting.drop_old_taint(local_cluster.api, [NODE]) == [NODE]
        taints = [(t.key, t.value, t.effect) for t in core.read_node(NODE).spec.taints or []]
        assert taints == [("example.com/keep", "yes", "PreferNoSchedule")]
        # nothing left to drop: no change
        assert starting.drop_old_taint(local_cluster.api, [NODE]) == []
    finally:
        core.patch_node(NODE, {"spec": {"taints": None}})


def test_the_container_nodes_example_applies_and_its_pods_and_service_answer(
    local_cluster, namespace, eventually
):
    """examples/container-nodes/pods.yaml, applied as the README says (into a namespace of
    the test's own): a runc pod, a gVisor pod and a web server behind a Service."""
    pods = example("container-nodes/pods.yaml")
    applied = kubectl(local_cluster, "apply", "-n", namespace, "-f", str(pods))
    try:
        assert applied.returncode == 0, applied.stderr
        core = local_cluster.core

        def running() -> bool:
            listed = core.list_namespaced_pod(namespace).items
            return len(listed) == 3 and all(p.status.phase == "Running" for p in listed)

        eventually(running, "on-runc, on-gvisor and web to run", 90)
        with open("/proc/sys/kernel/osrelease") as host:
            kernel = host.read().strip()
        said = {
            name: eventually(
                lambda name=name: kubectl(local_cluster, "logs", "-n", namespace, name).stdout,
                f"{name}'s hello",
            )
            for name in ("on-runc", "on-gvisor")
        }
        assert said["on-runc"] == f"hello from on-runc on {kernel}\n"
        assert said["on-gvisor"].startswith("hello from on-gvisor on ")
        assert kernel not in said["on-gvisor"]  # gVisor's own kernel answers uname
        web = core.read_namespaced_service("web", namespace).spec.cluster_ip
        fetch = ["sh", "-c", f"nc -w 3 {web} 80 </dev/null"]

        def answered() -> str:
            out = kubectl(local_cluster, "exec", "-n", namespace, "on-runc", "--", *fetch)
            return out.stdout if "hi from web-" in out.stdout else ""

        assert "HTTP/1.0 200 OK" in str(eventually(answered, "web to answer on its ClusterIP"))
    finally:
        kubectl(local_cluster, "delete", "-n", namespace, "-f", str(pods), "--wait=false")

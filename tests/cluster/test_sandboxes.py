"""Agents' sandboxes, for real: code runs in gVisor sandboxes from the warm pool, through
agent-sandbox's own client (k8s-agent-sandbox 1.0.8) and router, and cannot get out.

The chart is installed with the local profile: the sandbox runtime and router are the
images built from agent-sandbox's v1.0.3 module, the sandboxes run under gVisor (runsc)
on the container node, and kube-network-policies (built from its module, beside
kube-proxy) enforces the sandbox namespaces' NetworkPolicies. Every escape is tried from
inside a claimed sandbox and, where that tells the reader something, from a control: the
same runtime image under gVisor in a namespace with no policy, so a blocked attempt is
shown to be blocked by the policy and not by the network itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from container_pods import pod_spec
from k8s_agent_sandbox.exceptions import SandboxRequestError
from kubernetes import client
from kubernetes.client.rest import ApiException
from platform_install import Installed

from examples import example
from gridloop.fleet import CONTAINER_NODE_LABEL
from gridloop.local.build.images import python_images, table
from gridloop.local.container.layout import OUTSIDE_IP
from gridloop.sandboxes.claiming import ClaimedSandbox

pytestmark = pytest.mark.cluster

NS = "agents"
ROUTER_NS = "sandbox-router"  # agentSandbox.router.namespace
POOL = "default"  # the chart's SandboxWarmPool, named as its SandboxTemplate
EXAMPLE = example("sandboxes/agent.py")
EXTENSIONS = ("extensions.agents.x-k8s.io", "v1beta1")
RUNTIME = python_images.by_name(python_images.RUNTIME).ref
POOL_LABEL = "agents.x-k8s.io/warm-pool-sandbox"  # on a pool's sandboxes until claimed
# a TCP connect from inside, with an outcome a test can tell apart: a policy drops the
# packet (the connect times out), nothing listens (refused), or it gets through
PROBE = """\
import socket
s = socket.socket()
s.settimeout({seconds})
try:
    s.connect(({host!r}, {port}))
    print("connected")
except socket.timeout:
    print("dropped")
except ConnectionRefusedError:
    print("refused")
except OSError as err:
    print("error", err.errno)
"""


def probe_command(host: str, port: int, seconds: float = 3) -> str:
    code = PROBE.format(host=host, port=port, seconds=seconds)
    return f"python3 -c {shlex.quote(code)}"


@pytest.fixture(scope="module")
def platform(kueue_platform) -> Installed:
    """The shared `health.enabled=false` install (tests/cluster/conftest.py)."""
    return kueue_platform


@pytest.fixture(scope="module")
def client_env(local_cluster, platform) -> Iterator[dict[str, str]]:
    """The environment a user's agent runs in: their kubeconfig, and kubectl on PATH (the
    client's developer mode port-forwards to the router with it)."""
    tools = str(local_cluster.state.dir / "bin")
    env = {"KUBECONFIG": str(local_cluster.kubeconfig), "PATH": f"{tools}:{os.environ['PATH']}"}
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    # the client's load_kube_config() reads this, set from $KUBECONFIG at import
    from kubernetes.config import kube_config

    default = kube_config.KUBE_CONFIG_DEFAULT_LOCATION
    kube_config.KUBE_CONFIG_DEFAULT_LOCATION = env["KUBECONFIG"]
    try:
        wait_for_warm_pool(local_cluster.core)
        yield {**os.environ, **env}
    finally:
        kube_config.KUBE_CONFIG_DEFAULT_LOCATION = default
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def sandbox_pods(core: client.CoreV1Api) -> list[client.V1Pod]:
    selector = "app.kubernetes.io/component=sandbox"
    return list(core.list_namespaced_pod(NS, label_selector=selector).items)


def ready(pod: client.V1Pod) -> bool:
    conditions = pod.status.conditions or []
    return pod.metadata.deletion_timestamp is None and any(
        c.type == "Ready" and c.status == "True" for c in conditions
    )


def warm_pods(core: client.CoreV1Api) -> list[client.V1Pod]:
    return [p for p in sandbox_pods(core) if POOL_LABEL in (p.metadata.labels or {}) and ready(p)]


def wait_for_warm_pool(core: client.CoreV1Api, timeout: float = 180) -> list[client.V1Pod]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if warm := warm_pods(core):
            return warm
        time.sleep(0.5)
    pods = [(p.metadata.name, p.status.phase) for p in sandbox_pods(core)]
    raise AssertionError(f"no ready warm sandbox in {NS} after {timeout}s: {pods}")


def wait_for_full_pool(local_cluster: Any, timeout: float = 180) -> set[str]:
    """Every replica the SandboxWarmPool asks for is ready: a claim then adopts one of
    these (agent-sandbox adopts any pod of the pool, a refilling one too)."""
    custom = client.CustomObjectsApi(local_cluster.api)
    (pool,) = custom.list_namespaced_custom_object(*EXTENSIONS, NS, "sandboxwarmpools")["items"]
    wanted = pool["spec"]["replicas"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pooled = [
            p for p in sandbox_pods(local_cluster.core) if POOL_LABEL in (p.metadata.labels or {})
        ]
        if len(pooled) == wanted and all(ready(p) for p in pooled):
            return {p.metadata.name for p in pooled}
        time.sleep(0.5)
    pods = [(p.metadata.name, p.status.phase) for p in sandbox_pods(local_cluster.core)]
    raise AssertionError(f"the warm pool in {NS} not at {wanted} ready after {timeout}s: {pods}")


def router_url(core: client.CoreV1Api) -> str:
    """The router's Service, as the host reaches it (the local cluster routes ClusterIPs)."""
    ip = core.read_namespaced_service("sandbox-router-svc", ROUTER_NS).spec.cluster_ip
    return f"http://{ip}:8080"


@pytest.fixture(scope="module")
def sandboxes(local_cluster, client_env) -> Callable[[], Any]:
    """Claims a sandbox from the warm pool the way the loop does (gridloop's
    ClaimedSandbox: agent-sandbox's client claims, the issuer's token drives it through the
    router), released on the way out; the handle is the 1.x client's Sandbox."""
    url = router_url(local_cluster.core)

    @contextlib.contextmanager
    def claim() -> Iterator[Any]:
        with ClaimedSandbox(url, POOL, NS, 120, local_cluster.core) as claimed:
            yield claimed.sandbox

    return claim


# --- the example agent, end to end ---


def test_the_example_agent_fixes_the_build_in_a_warm_sandbox_and_the_pool_refills(
    local_cluster, client_env
) -> None:
    core = local_cluster.core
    warm_before = {p.metadata.name for p in wait_for_warm_pool(core)}

    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--namespace", NS, "--warm-pool", POOL],
        capture_output=True,
        text=True,
        env=client_env,
        timeout=300,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    steps, summary = lines[:-1], lines[-1]
    assert summary["reward"] == 1.0 and summary["passed"] is True
    assert summary["pod"] in warm_before, "the claim was served from the warm pool"
    runs = [s for s in steps if s["action"] == "run"]
    assert [r["exit_code"] for r in runs] == [1, 0], "the test fails, then passes"
    assert all(r["stderr_bytes"] > 0 for r in runs)  # unittest reports on stderr
    assert {s["action"] for s in steps} == {"write", "list", "run", "read", "exists"}
    assert next(s for s in steps if s["action"] == "list")["entries"] == ["calc.py", "test_calc.py"]
    assert all(s["seconds"] >= 0 for s in steps)
    # released: the claim is gone, and the pool holds a warm sandbox again (another pod)
    custom = client.CustomObjectsApi(local_cluster.api)
    claims = custom.list_namespaced_custom_object(*EXTENSIONS, NS, "sandboxclaims")["items"]
    assert summary["claim"] not in {c["metadata"]["name"] for c in claims}
    refilled = {p.metadata.name for p in wait_for_warm_pool(core)}
    assert summary["pod"] not in refilled


def test_a_warm_sandbox_is_a_gvisor_pod_on_the_container_node_with_the_secure_defaults(
    local_cluster, client_env
) -> None:
    (pod, *_) = wait_for_warm_pool(local_cluster.core)

    assert pod.spec.runtime_class_name == "gvisor"
    assert pod.spec.node_name.startswith("system-")
    assert pod.spec.automount_service_account_token is False
    assert pod.spec.security_context.run_as_non_root is True
    (container,) = pod.spec.containers
    assert container.image == RUNTIME
    context = container.security_context
    assert context.read_only_root_filesystem is True
    assert context.allow_privilege_escalation is False
    assert context.capabilities.drop == ["ALL"]
    mounts = {m.mount_path: m.name for m in container.volume_mounts}
    assert mounts == {"/app": "workspace", "/tmp": "tmp"}


# --- the kernel: gVisor's in a sandbox, the host's in a runc pod ---


def test_inside_a_sandbox_the_kernel_is_gvisors_and_in_a_runc_pod_the_hosts(
    local_cluster, client_env, namespace, eventually, sandboxes
) -> None:
    host_version = Path("/proc/version").read_text().strip()
    with sandboxes() as sandbox:
        version = sandbox.commands.run("cat /proc/version")
        dmesg = sandbox.commands.run("dmesg")
    assert version.exit_code == 0
    assert "gvisor" in version.stdout.lower() and version.stdout.strip() != host_version
    assert "Starting gVisor" in dmesg.stdout

    core = local_cluster.core
    core.create_namespaced_pod(namespace, pod_spec("runc", ["cat", "/proc/version"]))
    eventually(
        lambda: core.read_namespaced_pod("runc", namespace).status.phase == "Succeeded",
        "the runc pod to finish",
        60,
    )
    assert core.read_namespaced_pod_log("runc", namespace).strip() == host_version


# --- escapes ---


@pytest.fixture(scope="module")
def control(local_cluster, client_env, tmp_path_factory) -> Iterator[dict[str, Any]]:
    """A namespace with no NetworkPolicy holding the same runtime under gVisor (the
    control, driven from the host on its port) and a busybox web server with a Service
    (the other pod and the other namespace's ClusterIP Service a sandbox tries)."""
    core = local_cluster.core
    name = f"escape-control-{uuid.uuid4().hex[:5]}"
    core.create_namespace({"metadata": {"name": name}})
    runtime = pod_spec("runtime", [])
    runtime["metadata"]["labels"] = {"app": "control"}
    runtime["spec"]["runtimeClassName"] = "gvisor"
    runtime["spec"]["restartPolicy"] = "Always"
    (container,) = runtime["spec"]["containers"]
    del container["command"]
    container.update(
        image=RUNTIME,
        ports=[{"containerPort": 8888}],
        readinessProbe={"httpGet": {"path": "/", "port": 8888}, "periodSeconds": 1},
    )
    container["securityContext"]["runAsUser"] = 1000
    target = pod_spec("target", ["httpd", "-f", "-p", "8080"])
    target["metadata"]["labels"] = {"app": "target"}
    target["spec"]["restartPolicy"] = "Always"
    core.create_namespaced_pod(name, runtime)
    core.create_namespaced_pod(name, target)
    core.create_namespaced_service(
        name,
        {
            "metadata": {"name": "target"},
            "spec": {"selector": {"app": "target"}, "ports": [{"port": 8080}]},
        },
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            pods = [core.read_namespaced_pod(n, name) for n in ("runtime", "target")]
            if all(ready(p) for p in pods):
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"control pods not ready: {[p.status.phase for p in pods]}")
        node = core.read_node(pods[0].spec.node_name)
        node_ip = next(a.address for a in node.status.addresses if a.type == "InternalIP")
        yield {
            "namespace": name,
            "runtime_ip": pods[0].status.pod_ip,
            "target_ip": pods[1].status.pod_ip,
            "service_ip": core.read_namespaced_service("target", name).spec.cluster_ip,
            "node_ip": node_ip,
            "kubelet_port": node.status.daemon_endpoints.kubelet_endpoint.port,
            "apiserver_port": local_cluster.state.ports.apiserver,
        }
    finally:
        core.delete_namespace(name, propagation_policy="Background")


def from_control(control: dict[str, Any], command: str) -> dict[str, Any]:
    """Run `command` in the control runtime, through its own API (the host reaches it)."""
    request = urllib.request.Request(
        f"http://{control['runtime_ip']}:8888/execute",
        data=json.dumps({"command": command}).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return dict(json.loads(response.read()))


# (what is tried, its address from the control's facts, in the sandbox, in the control,
# what stops it)
POLICY = "the enforced NetworkPolicy (gridloop-sandbox-egress: egress none, the default)"
ESCAPES = [
    ("the API server at the node's address", "node_ip", "apiserver_port", "connected", POLICY),
    ("the API server's Service", "10.96.0.1", 443, "connected", POLICY),
    ("the kubelet's port", "node_ip", "kubelet_port", "connected", POLICY),
    ("another pod's IP", "target_ip", 8080, "connected", POLICY),
    ("a ClusterIP Service in another namespace", "service_ip", 8080, "connected", POLICY),
    (
        "the cloud metadata address (nothing listens there)",
        "169.254.169.254",
        80,
        "refused",
        "the enforced NetworkPolicy (gridloop-sandbox-egress: no 169.254.0.0/16)",
    ),
]


@pytest.mark.parametrize(
    ("what", "host", "port", "control_outcome", "blocked_by"),
    ESCAPES,
    ids=[e[0] for e in ESCAPES],
)
def test_a_sandbox_cannot_reach(
    client_env,
    control,
    what: str,
    host: str,
    port: Any,
    control_outcome: str,
    blocked_by: str,
    sandboxes,
) -> None:
    address = control.get(host, host)
    number = int(control.get(port, port)) if isinstance(port, str) else port
    command = probe_command(address, number)

    seen = from_control(control, command)["stdout"].strip()
    with sandboxes() as sandbox:
        tried = sandbox.commands.run(command, timeout=30)

    assert seen == control_outcome, f"control: {what} at {address}:{number} gave {seen}"
    assert tried.stdout.strip() == "dropped", (
        f"{what} at {address}:{number}: {tried.stdout}{tried.stderr} (should be blocked by "
        f"{blocked_by})"
    )


def test_a_sandbox_cannot_read_the_hosts_files(client_env, tmp_path, sandboxes) -> None:
    """Blocked by gVisor: its gofer serves the container's root and volumes only."""
    marker = tmp_path / f"host-secret-{uuid.uuid4().hex[:6]}"
    marker.write_text("the host's\n")
    with sandboxes() as sandbox:
        direct = sandbox.commands.run(f"cat {marker}")
        via_proc = sandbox.commands.run(f"cat /proc/1/root{marker}")
        hostname = sandbox.commands.run("cat /etc/hostname")
    assert direct.exit_code != 0 and "No such file" in direct.stderr
    assert via_proc.exit_code != 0
    assert hostname.stdout.strip() != Path("/etc/hostname").read_text().strip()


def test_a_second_sandbox_cannot_reach_the_first(
    local_cluster, client_env, control, sandboxes
) -> None:
    """Blocked by the first's ingress policy (gridloop-sandbox-ingress: the router only)
    and the second's egress (none, the default)."""
    with sandboxes() as first, sandboxes() as second:
        first_ip = local_cluster.core.read_namespaced_pod(first.get_pod_name(), NS).status.pod_ip
        assert first.commands.run("echo here").stdout == "here\n", "the router reaches the first"
        tried = second.commands.run(probe_command(first_ip, 8888), timeout=30)
        from_outside = from_control(control, probe_command(first_ip, 8888))
    assert tried.stdout.strip() == "dropped"
    assert from_outside["stdout"].strip() == "dropped", "only the router gets in"


OUTSIDE = OUTSIDE_IP  # stands in for a host on the internet (local/container/layout.py)
OUTSIDE_PORT = 18080


@pytest.fixture
def outside() -> Iterator[list[str]]:
    """A web server at the address that stands in for the internet (the local cluster puts
    it on the bridge; pods reach it through their node), and the paths it was asked for."""
    import http.server
    import threading

    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"outside\n")

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer((OUTSIDE, OUTSIDE_PORT), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield asked
    finally:
        server.shutdown()
        server.server_close()


# a request to the router from a pod, with whatever headers and token it is given: its
# status code and, on 2xx, the body
TO_ROUTER = """\
import json, sys, urllib.request, urllib.error
headers = {headers!r}
request = urllib.request.Request("{url}/execute", data={body!r}.encode(), headers=headers)
try:
    answer = urllib.request.urlopen(request, timeout=40)
    print(answer.status, answer.read().decode())
except urllib.error.HTTPError as err:
    print(err.code, err.read().decode())
"""


def to_router(
    control: dict[str, Any], url: str, sandbox: str, command: str, token: str = "", **more: str
) -> tuple[int, str]:
    """`command` for the sandbox `sandbox`, sent to the router from the control pod (a pod
    in a namespace of its own, as a tenant's would be) with `token`, if any."""
    headers = {
        "X-Sandbox-ID": sandbox,
        "X-Sandbox-Namespace": NS,
        "X-Sandbox-Port": "8888",
        "Content-Type": "application/json",
        **more,
    }
    if token:
        headers["Authorization"] = f"Bearer {token}"
    code = TO_ROUTER.format(url=url, headers=headers, body=json.dumps({"command": command}))
    said = from_control(control, f"python3 -c {shlex.quote(code)}")["stdout"].strip()
    status, _, body = said.partition(" ")
    return int(status), body


def token_of(core: client.CoreV1Api, claim: str) -> str:
    import base64

    secret = core.read_namespaced_secret(f"{claim}-router-token", NS)
    return base64.b64decode(secret.data["token"]).decode()


def test_only_the_claims_own_token_drives_its_sandbox(
    local_cluster, client_env, control, sandboxes
) -> None:
    """The router (--authz-mode=scoped-token) from a pod in another namespace: no token
    401, another claim's token 403, and neither reaches the sandbox; the claim's own token
    runs the command. The tokens are the ones gridloop's issuer wrote beside the claims."""
    core = local_cluster.core
    url = router_url(core)
    with sandboxes() as first, sandboxes() as second:
        mine, theirs = first.sandbox_id, second.sandbox_id
        own, other = token_of(core, first.claim_name), token_of(core, second.claim_name)
        touch = "touch /app/reached"
        assert to_router(control, url, mine, touch)[0] == 401, "no token"
        assert to_router(control, url, mine, touch, "v1.forged.token")[0] == 401
        assert to_router(control, url, mine, touch, other)[0] == 403, "another claim's token"
        # the 1.x client's fast path names the pod's address: not bound by a token, refused
        ip = core.read_namespaced_pod(first.get_pod_name(), NS).status.pod_ip
        assert to_router(control, url, mine, touch, own, **{"X-Sandbox-Pod-IP": ip})[0] == 403
        assert not first.files.exists("reached"), "nothing got through to the sandbox"
        status, body = to_router(control, url, mine, "echo mine", own)
        assert (status, json.loads(body)["stdout"]) == (200, "mine\n")
        assert to_router(control, url, theirs, "echo theirs", own)[0] == 403
        assert second.commands.run("echo theirs").stdout == "theirs\n"


def test_a_claims_token_goes_with_the_claim(local_cluster, client_env, sandboxes) -> None:
    core = local_cluster.core
    with sandboxes() as sandbox:
        name = f"{sandbox.claim_name}-router-token"
        secret = core.read_namespaced_secret(name, NS)
        (owner,) = secret.metadata.owner_references
        assert (owner.kind, owner.name) == ("SandboxClaim", sandbox.claim_name)
        assert secret.metadata.annotations["gridloop.io/sandbox"] == sandbox.sandbox_id
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            core.read_namespaced_secret(name, NS)
        except ApiException as err:
            assert err.status == 404
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"{NS}/{name} still there 60 s after its claim went")


def test_claims_made_at_once_each_get_a_sandbox_of_their_own(client_env, sandboxes) -> None:
    """agent-sandbox v0.2.1 could give one warm pod to two claims made together, so the
    loop made its claims one at a time; v1.0.3 adopts whole Sandboxes of the pool, and the
    loop no longer waits. Four claims at once, twice (the pool's one warm sandbox among
    them, the rest started cold): each drives a sandbox no other claim has."""

    def one(n: int) -> tuple[str, str]:
        with sandboxes() as sandbox:
            sandbox.files.write("mine.txt", f"claim {n}")
            host = sandbox.commands.run("hostname").stdout.strip()
            time.sleep(1)  # the four are held at once
            return host, sandbox.files.read("mine.txt").decode()

    for _round in range(2):
        with ThreadPoolExecutor(max_workers=4) as pool:
            got = list(pool.map(one, range(4)))
        assert len({host for host, _ in got}) == 4, got
        assert [mine for _, mine in got] == [f"claim {n}" for n in range(4)], got


def test_the_router_is_no_proxy_to_the_internet(
    local_cluster, client_env, control, outside, sandboxes
) -> None:
    """agent-sandbox's router dials any address a caller names in X-Sandbox-Pod-IP when it
    lets the request through; with scoped tokens it never does (401 without a token, 403
    with one: the header is not bound by it), and its NetworkPolicy would stop it besides
    (tests/unit: the router's egress is the sandboxes' port and DNS). The control pod (no
    policy) reaches the address itself."""
    core = local_cluster.core
    url = router_url(core)
    outside_at = {"X-Sandbox-Pod-IP": OUTSIDE, "X-Sandbox-Port": str(OUTSIDE_PORT)}
    with sandboxes() as sandbox:
        token = token_of(core, sandbox.claim_name)
        anonymous = to_router(control, url, "anything", "true", **outside_at)
        claimed = to_router(control, url, sandbox.sandbox_id, "true", token, **outside_at)
    direct = from_control(control, probe_command(OUTSIDE, OUTSIDE_PORT))
    assert direct["stdout"].strip() == "connected", "the address is reachable from a pod"
    assert (anonymous[0], claimed[0]) == (401, 403)
    assert outside == [], "nothing reached the outside through the router"


def rendered_egress(platform: Installed, mode: str) -> dict[str, Any]:
    """The chart's <release>-sandbox-egress for the sandbox namespace with
    agentSandbox.network.egress `mode`, as `gridloop render` makes it from the install's
    chart and values."""
    import yaml

    values = [f"-f={f}" for f in platform.files] + [f"--set={s}" for s in platform.sets]
    done = platform.gridloop(
        "render", "--chart", str(platform.chart), "--profile", "local", *values,
        f"--set=agentSandbox.network.egress={mode}", timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (policy,) = [
        d
        for d in yaml.safe_load_all(done.stdout)
        if d
        and d["kind"] == "NetworkPolicy"
        and d["metadata"]["name"].endswith("-sandbox-egress")
        and d["metadata"]["namespace"] == NS
    ]
    return dict(policy)


def test_egress_is_what_the_value_says_none_dns_or_internet(
    local_cluster, platform, client_env, control, outside, eventually, sandboxes
) -> None:
    """The installed default is `none`; the chart's policy for `internet`, then `dns`,
    applied in its place: only `internet` lets a sandbox reach the address that stands in
    for the internet, `dns` and `internet` let it ask the cluster DNS (a pod, which the
    chart's DNS rule selects), `none` nothing; none of them the API server."""
    network = client.NetworkingV1Api(local_cluster.api)
    (name,) = [
        p.metadata.name
        for p in network.list_namespaced_network_policy(NS).items
        if p.metadata.name.endswith("-sandbox-egress")  # <release>-sandbox-egress
    ]
    installed = network.read_namespaced_network_policy(name, NS)
    assert installed.spec.egress in (None, []), "agentSandbox.network.egress: none"
    dns_server = local_cluster.core.read_namespaced_service("kube-dns", "kube-system")
    api_ip = local_cluster.core.read_namespaced_service("kubernetes", "default").spec.cluster_ip
    # the three questions at once: each dropped one waits out its 3 s deadline
    questions = at_once(
        PROBE.format(host=OUTSIDE, port=OUTSIDE_PORT, seconds=3),
        PROBE.format(host=control["node_ip"], port=control["apiserver_port"], seconds=3),
        DNS_QUESTION.format(server=dns_server.spec.cluster_ip),
    )

    def reach(sandbox: Any) -> tuple[str, ...]:
        """What the internet's stand-in, the API server and the cluster DNS gave."""
        return tuple(sandbox.commands.run(questions, timeout=30).stdout.strip().splitlines())

    def apply(mode: str) -> None:
        policy = rendered_egress(platform, mode)
        body = network.read_namespaced_network_policy(name, NS)
        body.spec.egress = policy["spec"].get("egress")
        network.replace_namespaced_network_policy(name, NS, body)

    with sandboxes() as sandbox:
        try:
            assert reach(sandbox) == ("dropped", "dropped", "dropped"), "none"
            apply("internet")
            internet = ("connected", "dropped", api_ip)
            eventually(lambda: reach(sandbox) == internet, "internet", 30)
            apply("dns")
            eventually(lambda: reach(sandbox) == ("dropped", "dropped", api_ip), "dns", 30)
        finally:
            apply("none")


# One DNS question for the API server's Service name, asked of the cluster DNS Service
# by address over UDP, with a deadline: what a blocked DNS gives (`dropped`) is told apart
# from an answer (the address in it) in 3 s, not after the resolver's retries and search
# domains. On the local cluster CoreDNS is a pod in kube-system (`k8s-app: kube-dns`), so
# an answer here is the chart's DNS rule at work, as on a real cluster.
DNS_QUESTION = """
import socket, struct
name = "kubernetes.default.svc.cluster.local"
question = struct.pack(">HHHHHH", 0x6c6f, 0x0100, 1, 0, 0, 0)
question += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\\0"
question += struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
s.sendto(question, ("{server}", 53))
try:
    answer = s.recv(512)
    print(socket.inet_ntoa(answer[-4:]) if answer[7] else "no answer")
except socket.timeout:
    print("dropped")
"""


def at_once(*programs: str) -> str:
    """A command running each Python program in a process of its own, all at once; it
    prints their outputs, one per line, in the order given."""
    code = (
        "import subprocess, sys\n"
        f"ps = [subprocess.Popen([sys.executable, '-c', c], stdout=subprocess.PIPE, text=True)"
        f" for c in {list(programs)!r}]\n"
        "print('\\n'.join(p.communicate()[0].strip() for p in ps))\n"
    )
    return f"python3 -c {shlex.quote(code)}"


# --- admission, on pods that would really run (the container node, its taint) ---


def sandbox_namespace_pod(name: str, runtime: str | None, **container: Any) -> dict[str, Any]:
    pod = pod_spec(name, ["sleep", "3600"])
    if runtime:
        pod["spec"]["runtimeClassName"] = runtime
    pod["spec"]["containers"][0].update(container)
    return pod


REFUSED = [
    ("no-gvisor", None, {}, {}, "must set spec.runtimeClassName to one of gvisor"),
    (
        "privileged",
        "gvisor",
        {"securityContext": {"privileged": True}},
        {},
        "privileged",
    ),
    (
        "hostpath",
        "gvisor",
        {"volumeMounts": [{"name": "host", "mountPath": "/host"}]},
        {"volumes": [{"name": "host", "hostPath": {"path": "/"}}]},
        "hostPath",
    ),
    ("hostnetwork", "gvisor", {}, {"hostNetwork": True}, "hostNetwork"),
    (
        "the-routers-own-image-and-labels",
        None,
        {"image": table.router_ref(), "command": None},
        {},
        "must set spec.runtimeClassName to one of gvisor",
    ),
]


@pytest.mark.parametrize(
    ("name", "runtime", "container", "spec", "message"), REFUSED, ids=[r[0] for r in REFUSED]
)
def test_admission_refuses_an_escaping_pod_in_a_sandbox_namespace(
    local_cluster, platform, name: str, runtime, container, spec, message: str
) -> None:
    pod = sandbox_namespace_pod(name, runtime, **container)
    pod["spec"].update(spec)
    if name == "the-routers-own-image-and-labels":
        pod["metadata"]["labels"] = {"app": "sandbox-router"}

    with pytest.raises(ApiException) as refused:
        local_cluster.core.create_namespaced_pod(NS, pod)

    assert refused.value.status in (400, 403, 422)
    assert message in str(refused.value.body), refused.value.body


def test_the_same_pod_with_gvisor_is_admitted_and_runs(local_cluster, platform, eventually) -> None:
    core = local_cluster.core
    pod = sandbox_namespace_pod(f"admitted-{uuid.uuid4().hex[:5]}", "gvisor")
    pod["spec"]["automountServiceAccountToken"] = False
    core.create_namespaced_pod(NS, pod)
    name = pod["metadata"]["name"]
    try:
        eventually(lambda: ready(core.read_namespaced_pod(name, NS)), "the gVisor pod to run", 60)
        assert core.read_namespaced_pod(name, NS).spec.node_selector == {
            CONTAINER_NODE_LABEL: "true"
        }
    finally:
        core.delete_namespaced_pod(name, NS, grace_period_seconds=0)


# --- bad input: a clear error, and the sandbox and the pool stay healthy ---


def test_a_claim_for_a_warm_pool_that_does_not_exist(local_cluster, client_env) -> None:
    core = local_cluster.core
    # the pool may still be refilling after the tests before claimed from it
    warm = {p.metadata.name for p in wait_for_warm_pool(core)}
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--namespace", NS, "--warm-pool", "no-such-pool"],
        capture_output=True,
        text=True,
        env=client_env,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "agent.py: --warm-pool: no SandboxWarmPool 'no-such-pool' in namespace agents "
        "(there: default)"
    )
    assert done.stdout == ""

    # agent-sandbox's client alone: it reads the claim's condition and deletes its claim
    from k8s_agent_sandbox import SandboxClient
    from k8s_agent_sandbox.exceptions import SandboxWarmPoolNotFoundError
    from k8s_agent_sandbox.models import SandboxDirectConnectionConfig

    custom = client.CustomObjectsApi(local_cluster.api)
    connection = SandboxDirectConnectionConfig(api_url=router_url(core))
    t0 = time.monotonic()
    refused = pytest.raises(
        SandboxWarmPoolNotFoundError, match='SandboxWarmPool "no-such-pool" not found'
    )
    with SandboxClient(connection) as bare, refused:
        bare.create_sandbox("no-such-pool", namespace=NS, sandbox_ready_timeout=60)
    assert time.monotonic() - t0 < 30, "the condition ends the wait, not the timeout"
    claims = custom.list_namespaced_custom_object(*EXTENSIONS, NS, "sandboxclaims")["items"]
    assert not [
        c for c in claims if (c["spec"].get("warmPoolRef") or {}).get("name") == "no-such-pool"
    ], "the client deleted its claim on the way out"
    assert {p.metadata.name for p in warm_pods(core)} == warm, "the warm pool is untouched"


def test_the_example_claim_applied_with_kubectl_gets_a_ready_sandbox_from_the_pool(
    local_cluster, client_env
) -> None:
    """examples/sandboxes/claim.yaml, as the README applies it: `kubectl get sandboxclaim
    agent-run-1 -n agents` then shows it Ready, bound to a sandbox the warm pool had."""
    from container_pods import kubectl

    claim = example("sandboxes/claim.yaml")
    warm_before = wait_for_full_pool(local_cluster)
    custom = client.CustomObjectsApi(local_cluster.api)
    applied = kubectl(local_cluster, "apply", "-f", str(claim))
    try:
        assert applied.returncode == 0, applied.stderr
        assert "sandboxclaim.extensions.agents.x-k8s.io/agent-run-1 created" in applied.stdout
        deadline = time.monotonic() + 60
        conditions: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            got = custom.get_namespaced_custom_object(
                *EXTENSIONS, NS, "sandboxclaims", "agent-run-1"
            )
            conditions = (got.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"claim agent-run-1 not Ready after 60s: {conditions}")
        shown = kubectl(local_cluster, "get", "sandboxclaim", "agent-run-1", "-n", NS)
        assert shown.returncode == 0, shown.stderr
        # the claim names the Sandbox it was handed; its pod is named as it
        sandbox = got["status"]["sandbox"]["name"]
        assert sandbox in warm_before, f"the claim was served from the warm pool: {sandbox}"
        pod = local_cluster.core.read_namespaced_pod(sandbox, NS)
        assert ready(pod) and pod.spec.runtime_class_name == "gvisor"
    finally:
        kubectl(local_cluster, "delete", "-f", str(claim), "--wait=true", timeout=120)
    assert wait_for_warm_pool(local_cluster.core, 60), "the pool refills after the claim"


def test_a_claim_names_the_missing_warm_pool_in_its_condition(local_cluster, client_env) -> None:
    custom = client.CustomObjectsApi(local_cluster.api)
    name = f"missing-{uuid.uuid4().hex[:5]}"
    claim = {
        "apiVersion": "/".join(EXTENSIONS),
        "kind": "SandboxClaim",
        "metadata": {"name": name},
        "spec": {"warmPoolRef": {"name": "no-such-pool"}},
    }
    custom.create_namespaced_custom_object(*EXTENSIONS, NS, "sandboxclaims", claim)
    try:
        deadline = time.monotonic() + 30
        conditions: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not conditions:
            got = custom.get_namespaced_custom_object(*EXTENSIONS, NS, "sandboxclaims", name)
            conditions = (got.get("status") or {}).get("conditions") or []
            time.sleep(0.5)
        (condition,) = [c for c in conditions if c["type"] == "Ready"]
        assert condition["status"] == "False"
        assert condition["reason"] == "WarmPoolNotFound"
        assert condition["message"] == 'SandboxWarmPool "no-such-pool" not found'
    finally:
        custom.delete_namespaced_custom_object(*EXTENSIONS, NS, "sandboxclaims", name)


def test_a_command_past_its_timeout_is_ended_and_the_sandbox_answers_the_next(
    client_env, sandboxes
) -> None:
    with sandboxes() as sandbox:
        t0 = time.monotonic()
        slow = sandbox.commands.run("timeout 2 sleep 60", timeout=30)
        took = time.monotonic() - t0
        after = sandbox.commands.run("echo still here")
    assert slow.exit_code == 124, "timeout(1)'s exit code: the command ran past its limit"
    assert took < 10
    assert after.stdout == "still here\n"


def test_an_upload_over_the_limit_is_refused_and_the_sandbox_and_router_carry_on(
    local_cluster, client_env, sandboxes
) -> None:
    limit = 16 * 1024 * 1024  # the local profile's agentSandbox.router.maxRequestBytes
    restarts_before = router_restarts(local_cluster.core)
    with sandboxes() as sandbox:
        with pytest.raises(SandboxRequestError) as refused:
            sandbox.files.write("too-big.bin", b"x" * (limit + 1024 * 1024))
        # agent-sandbox's Go router cuts the body off at --max-request-body-bytes while
        # streaming it to the sandbox, and its upstream error handler answers that as any
        # failed forward: 502, naming the sandbox (no 413, no word of the limit)
        assert refused.value.status_code == 502
        detail = refused.value.response.json()["detail"]
        assert detail == f"Could not connect to the backend sandbox: {sandbox.sandbox_id}"
        sandbox.files.write("fits.bin", b"y" * (limit // 2))
        listed = {entry.name: entry.size for entry in sandbox.files.list(".")}
    assert listed == {"fits.bin": limit // 2}
    assert router_restarts(local_cluster.core) == restarts_before, "the router was not OOMKilled"
    assert wait_for_warm_pool(local_cluster.core, 60), "the pool refills as after any claim"


def test_a_full_workspace_refuses_the_write_and_the_sandbox_keeps_serving(
    client_env, sandboxes
) -> None:
    """/app is a tmpfs of the local profile's template.workspaceSizeLimit (64 MiB): the
    kernel refuses the write, where a disk volume over its limit gets the pod evicted.
    The runtime answers 500 with the reason; agent-sandbox's client does not retry an
    upload (a POST) and carries the answer in its error."""
    chunk = 8 * 1024 * 1024  # under the router's 16 MiB limit
    written = 0
    with sandboxes() as sandbox:
        with pytest.raises(SandboxRequestError) as full:
            for index in range(16):
                sandbox.files.write(f"part-{index}.bin", b"z" * chunk)
                written += 1
        usage = sandbox.commands.run("df -k /app")
        after = sandbox.commands.run("echo still here")
    assert full.value.status_code == 500
    assert "No space left on device" in full.value.response.json()["message"]
    assert 4 <= written <= 8, f"{written} files of 8 MiB fitted in a 64 MiB workspace"
    size_kib = int(usage.stdout.splitlines()[1].split()[1])
    assert size_kib == 64 * 1024, usage.stdout
    assert after.stdout == "still here\n"


def router_restarts(core: client.CoreV1Api) -> int:
    pods = core.list_namespaced_pod(ROUTER_NS, label_selector="app=sandbox-router").items
    return sum(s.restart_count for p in pods for s in (p.status.container_statuses or []))


def test_the_router_runs_in_its_own_namespace_and_every_sandbox_namespace_pod_in_gvisor(
    local_cluster, platform
) -> None:
    core = local_cluster.core
    (router,) = core.list_namespaced_pod(ROUTER_NS, label_selector="app=sandbox-router").items
    assert router.spec.containers[0].image == table.router_ref()
    assert router.spec.runtime_class_name is None  # runc, outside the sandbox namespaces
    assert router.spec.automount_service_account_token is False
    assert router.spec.node_selector == {CONTAINER_NODE_LABEL: "true"}
    pods = core.list_namespaced_pod(NS).items
    assert pods and {p.spec.runtime_class_name for p in pods} == {"gvisor"}
    assert not core.list_namespaced_pod(NS, label_selector="app=sandbox-router").items


# --- gridloop status ---


def test_status_shows_the_warm_sandbox_its_node_and_runtime_class(
    local_cluster, client_env, gridloop
) -> None:
    (pod, *_) = wait_for_warm_pool(local_cluster.core)
    done = gridloop("status", "--once", "--view", "sandboxes", env={**client_env, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    (row,) = [line for line in done.stdout.splitlines() if pod.metadata.name in line]
    assert "warm" in row and "gvisor" in row and pod.spec.node_name in row

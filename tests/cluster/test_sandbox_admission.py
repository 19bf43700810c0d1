"""Sandbox namespaces run every pod under gVisor: the chart's sandbox-isolation policy
against the ways around it the security review found (issue 36, item 4). It has no
exception: the sandbox router, which runs under runc, lives in a namespace of its own
(agentSandbox.router.namespace), so the chart's own router pod is refused in a sandbox
namespace as any other runc pod is, with an exec hook or probe or without.

The chart's own policy, as `helm template` renders it, is applied to the real API server.
Every request is a `kubectl create --dry-run=server` in a sandbox-labelled namespace whose
Pod Security level is `privileged`, so Pod Security (which runs first, and at `baseline`
refuses privileged pods and host namespaces on its own) cannot be what refuses; each
refusal names the policy, and the same pod is admitted in a namespace of no sandbox, and
in the same namespace once the policy's binding is deleted (the last test).
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from admission_dry_runs import Admission, policy_in_force
from chart_template import CHART, helm_template
from kubernetes import client
from kubernetes.client.rest import ApiException

# the control plane and kwok only: admission is the API server's
pytestmark = [pytest.mark.cluster, pytest.mark.kwok_cluster]

RELEASE = "sbxadm"
GVISOR = "gvisor"
NO_GVISOR = "must set spec.runtimeClassName to one of gvisor"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> list[dict[str, Any]]:
    """The chart's sandbox objects and policies, one `helm template`."""
    return helm_template(
        RELEASE,
        "sbxadm-system",
        tmp_path_factory.mktemp("helm-home"),
        *("-f", str(CHART / "profiles" / "minimal.yaml")),
        *("--show-only", "templates/sandboxes.yaml"),
        *("--show-only", "templates/policies.yaml"),
    )


@pytest.fixture(scope="module")
def router_pod(rendered: list[dict[str, Any]]) -> dict[str, Any]:
    """The chart's router Deployment's pod, as a Pod (what its ReplicaSet creates)."""
    (router, *_) = (
        d for d in rendered if d["kind"] == "Deployment" and "router" in d["metadata"]["name"]
    )
    template = router["spec"]["template"]
    meta = {**template["metadata"], "name": "router"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}


@pytest.fixture(scope="module")
def admission(local_cluster, rendered: list[dict[str, Any]]) -> Iterator[Admission]:
    docs = [d for d in rendered if d["kind"].startswith("ValidatingAdmissionPolicy")]
    sandbox = [d for d in docs if d["metadata"]["name"].endswith("sandbox-isolation")]
    node = client.NodeV1Api(local_cluster.api)
    made = False
    try:
        node.read_runtime_class(GVISOR)
    except ApiException as err:  # a pod naming a missing RuntimeClass is refused before
        if err.status != 404:  # any policy looks
            raise
        node.create_runtime_class({"metadata": {"name": GVISOR}, "handler": "runsc"})
        made = True
    namespace = f"sbx-adm-{uuid.uuid4().hex[:5]}"
    try:
        with policy_in_force(
            local_cluster,
            docs=sandbox,
            covered=namespace,
            covered_labels={"gridloop.io/sandbox": "true"},
            probe=_pod(runtime=None),
        ) as ready:
            yield ready
    finally:
        if made:
            node.delete_runtime_class(GVISOR)


def _pod(runtime: str | None = GVISOR, **spec: Any) -> dict[str, Any]:
    container = {"name": "agent", "image": "busybox", "command": ["sleep", "3600"]}
    body: dict[str, Any] = {"containers": [container], **spec}
    if runtime:
        body["runtimeClassName"] = runtime
    name = f"agent-{uuid.uuid4().hex[:5]}"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


def _with_container(pod: dict[str, Any], **fields: Any) -> dict[str, Any]:
    pod["spec"]["containers"][0].update(fields)
    return pod


ESCAPES = {
    "no-runtime-class": (lambda: _pod(runtime=None), NO_GVISOR),
    "privileged": (
        lambda: _with_container(_pod(), securityContext={"privileged": True}),
        "may not run privileged containers",
    ),
    "host-network": (lambda: _pod(hostNetwork=True), "(spec.hostNetwork)"),
    "host-pid": (lambda: _pod(hostPID=True), "(spec.hostPID)"),
    "host-ipc": (lambda: _pod(hostIPC=True), "(spec.hostIPC)"),
    "host-path": (
        lambda: _pod(volumes=[{"name": "host", "hostPath": {"path": "/"}}]),
        "may not mount hostPath volumes",
    ),
    "added-capability": (
        lambda: _with_container(_pod(), securityContext={"capabilities": {"add": ["NET_ADMIN"]}}),
        "may not add Linux capabilities",
    ),
}


@pytest.mark.parametrize("name", list(ESCAPES))
def test_an_escaping_pod_is_refused_by_the_policy_not_by_pod_security(
    admission: Admission, name: str
) -> None:
    make, message = ESCAPES[name]
    assert message in admission.refused(make())
    admission.admitted(make(), admission.plain)  # the policy is what refuses it


def test_a_plain_pod_under_gvisor_is_admitted(admission: Admission) -> None:
    admission.admitted(_pod())


EXEC = {"exec": {"command": ["sh", "-c", "python -c 'import os; os.system(\"id\")'"]}}

# the chart's router pod as it runs in its own namespace, and with the ways the review
# found to run its author's code under runc when the policy had an exception for it
ROUTER_PODS = {
    "as-the-chart-runs-it": lambda c, s: None,
    "own-command": lambda c, s: c.update(command=["sh"]),
    "post-start-exec-hook": lambda c, s: c.update(lifecycle={"postStart": EXEC}),
    "exec-liveness-probe": lambda c, s: c.update(livenessProbe=EXEC),
    "ld-preload-from-a-config-map": lambda c, s: (
        c.setdefault("env", []).append({"name": "LD_PRELOAD", "value": "/code/evil.so"}),
        c["volumeMounts"].append({"name": "code", "mountPath": "/code"}),
        s["volumes"].append({"name": "code", "configMap": {"name": "evil"}}),
    ),
}


@pytest.mark.parametrize("name", list(ROUTER_PODS))
def test_the_charts_router_pod_is_refused_in_a_sandbox_namespace(
    admission: Admission, router_pod: dict[str, Any], name: str
) -> None:
    pod = copy.deepcopy(router_pod)
    spec = pod["spec"]
    assert "runtimeClassName" not in spec, "the router runs under the node's default"
    ROUTER_PODS[name](spec["containers"][0], spec)
    assert NO_GVISOR in admission.refused(pod)
    admission.admitted(copy.deepcopy(pod), admission.plain)


@pytest.mark.parametrize("probe", ["exec-hook", "exec-probe"])
def test_an_exec_hook_or_probe_runs_under_gvisor_and_is_admitted(
    admission: Admission, probe: str
) -> None:
    """Under gVisor an exec hook or probe runs inside the sandbox, like the pod's own
    command: nothing to refuse."""
    field = {"exec-hook": {"lifecycle": {"postStart": EXEC}}, "exec-probe": {"livenessProbe": EXEC}}
    admission.admitted(_with_container(_pod(), **field[probe]))


def test_with_the_policy_removed_every_refused_pod_is_admitted_in_the_same_namespace(
    admission: Admission, router_pod: dict[str, Any]
) -> None:
    """The control: Pod Security (privileged here), the RuntimeClass and the namespace
    admit every pod the tests above saw refused; the policy is what refuses them."""
    pods = {name: make() for name, (make, _) in ESCAPES.items()}
    for name, change in ROUTER_PODS.items():
        pod = copy.deepcopy(router_pod)
        change(pod["spec"]["containers"][0], pod["spec"])
        pods[f"router {name}"] = pod
    with admission.removed():
        results = {name: admission.create(admission.covered, pod) for name, pod in pods.items()}
    assert {name: r.stderr for name, r in results.items() if r.returncode != 0} == {}

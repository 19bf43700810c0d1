"""Is NetworkPolicy enforced? The probe pair `gridloop doctor --probe-network` runs (pure:
the objects it creates and the verdict on what it saw; network_probing.py acts).

The sandboxes' isolation is NetworkPolicy objects; a cluster whose network plugin does not
enforce them (flannel alone, kubenet, a CNI with policy turned off) takes them and drops
nothing. Reading the cluster cannot tell, so the probe tries: in a namespace of its own,
two listening pods, `open` and `closed`, a NetworkPolicy that denies all ingress to
`closed`, and a client pod that connects to both. Enforced: it reaches `open` and not
`closed`. Not enforced: it reaches both. It cannot reach `open` either: the probe proves
nothing (the pod network itself is broken, or something else denies it), and says so.

The pods run gridloop's own image, where the chart runs it (its sandbox token issuer's or
health service's pod template: the same image, registry, nodes, tolerations and security
context), so they start wherever the chart's own pods start, Pod Security `restricted`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

from gridloop.chart.diagnosis import Check, Status

NAME = "network-policy"
PORT = 8080
CONNECT_S = 3  # the client's connect timeout: a denied SYN is dropped, not refused
LABEL = "gridloop.io/network-probe"
NAMESPACE_PREFIX = "gridloop-network-probe-"
TEMPLATES = ("sandbox-token-issuer", "health")  # rendered Deployments in gridloop's image

SERVER = f"""\
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", {PORT}))
s.listen(16)
while True:
    s.accept()[0].close()
"""
CLIENT = f"""\
import json, socket, sys
seen = {{}}
for name, host in zip(("open", "closed"), sys.argv[1:]):
    s = socket.socket()
    s.settimeout({CONNECT_S})
    try:
        s.connect((host, {PORT}))
        seen[name] = "connected"
    except socket.timeout:
        seen[name] = "dropped"
    except ConnectionRefusedError:
        seen[name] = "refused"
    except OSError as err:
        seen[name] = "error " + str(err.errno)
    finally:
        s.close()
print(json.dumps(seen))
"""


def pod_template(docs: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The pod spec of the first rendered Deployment in TEMPLATES' order, if any."""
    deployments = {
        d["metadata"]["name"]: d
        for d in docs
        if d.get("kind") == "Deployment" and d.get("metadata", {}).get("name") in TEMPLATES
    }
    for name in TEMPLATES:
        if name in deployments:
            return dict(deployments[name]["spec"]["template"]["spec"])
    return None


def namespace(name: str) -> dict[str, Any]:
    labels = {LABEL: "true", "pod-security.kubernetes.io/enforce": "restricted"}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def deny_closed(ns: str) -> dict[str, Any]:
    """Every ingress to the `closed` pod denied: a policy that selects it and allows none."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "deny-closed", "namespace": ns},
        "spec": {
            "podSelector": {"matchLabels": {LABEL: "closed"}},
            "policyTypes": ["Ingress"],
        },
    }


def pod(template: dict[str, Any], ns: str, role: str, args: Sequence[str] = ()) -> dict[str, Any]:
    """`open` or `closed` (a listener with a readiness probe), or `client` (connects to the
    addresses in `args` once and prints what it saw), in the chart's pod shape."""
    (source, *_) = template["containers"]
    container: dict[str, Any] = {
        "name": "probe",
        "image": source["image"],
        "command": ["python3", "-c", CLIENT if role == "client" else SERVER, *args],
        "securityContext": {
            **copy.deepcopy(source.get("securityContext") or {}),
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        },
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
    }
    if source.get("imagePullPolicy"):
        container["imagePullPolicy"] = source["imagePullPolicy"]
    if role != "client":
        container["ports"] = [{"containerPort": PORT}]
        container["readinessProbe"] = {"tcpSocket": {"port": PORT}, "periodSeconds": 1}
    spec: dict[str, Any] = {
        "containers": [container],
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 0,
        "securityContext": {
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
            **copy.deepcopy(template.get("securityContext") or {}),
        },
    }
    for key in ("nodeSelector", "tolerations", "imagePullSecrets"):
        if template.get(key):
            spec[key] = copy.deepcopy(template[key])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": role, "namespace": ns, "labels": {LABEL: role}},
        "spec": spec,
    }


def verdict(seen: dict[str, str]) -> Check:
    """What the client printed -> the check."""
    opened, closed = seen.get("open", "?"), seen.get("closed", "?")
    if opened != "connected":
        return Check(
            NAME,
            Status.WARN,
            f"could not tell: the probe pod did not reach even the pod no policy selects "
            f"({opened}), so the pod network itself failed it",
            "check that pods on the chart's nodes reach each other (CNI, node firewall)",
        )
    if closed == "connected":
        return Check(
            NAME,
            Status.FAIL,
            "NetworkPolicy is not enforced: a probe pod connected to a pod a deny-all "
            "ingress policy selects; the sandboxes' isolation policies would do nothing",
            "run a network plugin that enforces NetworkPolicy (Calico, Cilium, "
            "kube-network-policies), or turn its policy support on",
        )
    return Check(
        NAME,
        Status.PASS,
        f"enforced: a probe pod reached a pod no policy selects and not one a deny-all "
        f"ingress policy selects ({closed})",
    )


def parse(log: str) -> dict[str, str] | None:
    """The client's last line, if it is what the client prints."""
    lines = [line for line in log.splitlines() if line.strip()]
    try:
        seen = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return None
    if not isinstance(seen, dict) or set(seen) != {"open", "closed"}:
        return None
    return {str(k): str(v) for k, v in seen.items()}


def unfinished(why: str) -> Check:
    return Check(
        NAME,
        Status.WARN,
        f"could not tell: {why}",
        "run doctor again once the chart's image can start on its nodes",
    )

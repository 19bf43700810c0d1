"""`gridloop doctor`'s decisions: what was read from a cluster, and what is planned, in;
a list of checks out (pure: no client, no clock, no files).

Each check passes, warns or fails, with one line of detail and, when it is not a pass,
one line saying how to fix it. A fail is something the install would trip over or
that would leave a broken platform (too old a control plane, missing permissions, no
GPU node, a second Kueue controller, an object of the same name owned by someone
else); a warn is something to know (an untested Kubernetes, a flavor no node matches,
a pending release the install will roll forward). What could not be read (a user who
may not list nodes) is a warn that names what was refused, never a guess.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence

from gridloop import names
from gridloop.chart import clashes
from gridloop.chart.diagnosis import Check, Observed, Planned, Status, few, unread

GPU = names.GPU_RESOURCE
GPU_PRODUCT = names.GPU_PRODUCT_LABEL  # set by GPU Feature Discovery
PROMETHEUS_GROUP = "monitoring.coreos.com"
PROMETHEUS_CRDS = {
    "ServiceMonitor": "servicemonitors.monitoring.coreos.com",
    "PodMonitor": "podmonitors.monitoring.coreos.com",
    "PrometheusRule": "prometheusrules.monitoring.coreos.com",
}


# --- the checks ---


def evaluate(observed: Observed, planned: Planned) -> list[Check]:
    """Every check, in the order doctor prints them."""
    checks = [
        kubernetes_version(observed, planned),
        kubectl_skew(observed),
        permissions(observed),
        gpu_nodes(observed),
        gpu_labels(observed, planned),
        runtime_classes(observed, planned),
        sandbox_egress(observed, planned),
    ]
    checks += [clashes.component(c, observed, planned) for c in clashes.COMPONENTS]
    checks += [
        prometheus_operator(observed, planned),
        api_kinds(observed),
        clashes.free_names(observed, planned),
        release_state(observed, planned),
        namespace_state(observed, planned),
        secrets(observed, planned),
    ]
    return checks


def failed(checks: Sequence[Check]) -> list[Check]:
    return [c for c in checks if c.status is Status.FAIL]


def summary(checks: Sequence[Check]) -> str:
    counts = {s: sum(1 for c in checks if c.status is s) for s in Status}
    return ", ".join(f"{counts[s]} {s.value}" for s in Status)


def _version(text: str) -> tuple[int, int, int] | None:
    found = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    if not found:
        return None
    major, minor, patch = found.groups()
    return int(major), int(minor), int(patch or 0)


def kubernetes_version(observed: Observed, planned: Planned) -> Check:
    name = "kubernetes-version"
    server, least = _version(observed.server_version), _version(planned.min_kubernetes)
    tested = _version(planned.tested_kubernetes)
    if server is None or least is None or tested is None:
        return Check(
            name,
            Status.WARN,
            f"cannot read the server version {observed.server_version!r}",
            f"make sure the control plane is Kubernetes {planned.min_kubernetes} or later",
        )
    if server < least:
        return Check(
            name,
            Status.FAIL,
            f"{observed.server_version} is older than {planned.min_kubernetes}, the oldest "
            "the chart supports (ValidatingAdmissionPolicy v1)",
            f"upgrade the control plane to {planned.min_kubernetes} or later",
        )
    if server[:2] > tested[:2]:
        return Check(
            name,
            Status.WARN,
            f"{observed.server_version} is newer than {planned.tested_kubernetes}, "
            "the newest gridloop is tested with",
            "expect it to work; report what does not",
        )
    return Check(name, Status.PASS, f"{observed.server_version} (supported)")


def kubectl_skew(observed: Observed) -> Check:
    """kubectl is supported within one minor version of the API server (Kubernetes' skew
    policy); install runs it to apply the CRDs and components server-side."""
    name = "kubectl"
    if observed.kubectl is None:
        if observed.kubectl_problem:
            return Check(name, Status.FAIL, observed.kubectl_problem, "install needs kubectl")
        return Check(name, Status.WARN, "not looked up", "")
    client, server = _version(observed.kubectl), _version(observed.server_version)
    if client is None or server is None:
        return Check(name, Status.WARN, f"cannot compare {observed.kubectl} with the server", "")
    if client[0] != server[0] or abs(client[1] - server[1]) > 1:
        major, minor = server[:2]
        return Check(
            name,
            Status.FAIL,
            f"kubectl {observed.kubectl} is outside the skew window of the server "
            f"{observed.server_version} (one minor version either way)",
            f"use a kubectl {major}.{minor - 1} to {major}.{minor + 1} (--kubectl PATH)",
        )
    return Check(name, Status.PASS, f"{observed.kubectl} (within one minor of the server)")


def permissions(observed: Observed) -> Check:
    name = "permissions"
    if observed.denied is None:
        return unread(name, "selfsubjectaccessreviews", observed)
    if observed.denied:
        denied = list(observed.denied)
        return Check(
            name,
            Status.FAIL,
            f"missing {len(denied)} permissions the install needs: {few(denied)}",
            "run as a cluster admin, or bind a ClusterRole granting them "
            "(`gridloop doctor -o json` lists every one)",
            tuple(denied),
        )
    return Check(name, Status.PASS, "every object the install writes may be created and updated")


def gpu_nodes(observed: Observed) -> Check:
    name = "gpu-nodes"
    if observed.nodes is None:
        return unread(name, "nodes", observed)
    gpu = [n for n in observed.nodes if n.gpus > 0]
    if not gpu:
        return Check(
            name,
            Status.FAIL,
            f"no node offers {GPU} ({len(observed.nodes)} nodes)",
            "add GPU nodes with the NVIDIA driver and device plugin (the GPU Operator "
            "installs both)",
        )
    total = sum(n.gpus for n in gpu)
    return Check(name, Status.PASS, f"{len(gpu)} GPU nodes, {total} GPUs")


def gpu_labels(observed: Observed, planned: Planned) -> Check:
    """GPU nodes carry GPU Feature Discovery's product label, and every Kueue flavor the
    chart derives from the fleet matches at least one node."""
    name = "gpu-labels"
    if observed.nodes is None:
        return unread(name, "nodes", observed)
    unlabelled = sorted(
        n.name for n in observed.nodes if n.gpus > 0 and GPU_PRODUCT not in n.labels
    )
    empty = [
        f"{flavor} ({','.join(f'{k}={v}' for k, v in sorted(labels.items()))})"
        for flavor, labels in sorted(planned.flavors.items())
        if not any(all(n.labels.get(k) == v for k, v in labels.items()) for n in observed.nodes)
    ]
    if unlabelled:
        return Check(
            name,
            Status.WARN,
            f"{len(unlabelled)} GPU nodes have no {GPU_PRODUCT} label: {few(unlabelled)}",
            "run GPU Feature Discovery (part of the GPU Operator) so GPU nodes are labelled",
            tuple(unlabelled),
        )
    if empty:
        return Check(
            name,
            Status.WARN,
            f"{len(empty)} Kueue flavors match no node: {few(empty)}",
            "label each pool's nodes with its flavor's labels, or correct the fleet values",
            tuple(empty),
        )
    if not planned.flavors:
        return Check(
            name,
            Status.WARN,
            "no fleet in the values: the ClusterQueues get no GPU quota",
            "pass the fleet as values: -f fleet-values.yaml holding `fleet:`",
        )
    return Check(name, Status.PASS, f"every one of {len(planned.flavors)} Kueue flavors has nodes")


def runtime_classes(observed: Observed, planned: Planned) -> Check:
    """A RuntimeClass's handler cannot change: one of the same name with another handler
    makes the install fail. Nodes that report their handlers must have the chart's."""
    name = "runtime-classes"
    if not planned.runtime_classes:
        return Check(name, Status.PASS, "the install creates no RuntimeClass (sandboxes off)")
    if observed.runtime_classes is None:
        return unread(name, "runtimeclasses", observed)
    clashes = [
        f"{rc} has handler {observed.runtime_classes[rc]}, the chart wants {handler}"
        for rc, handler in sorted(planned.runtime_classes.items())
        if rc in observed.runtime_classes and observed.runtime_classes[rc] != handler
    ]
    if clashes:
        return Check(
            name,
            Status.FAIL,
            f"RuntimeClass handlers cannot be changed: {'; '.join(clashes)}",
            "set agentSandbox.gvisor.handler (or kata.handler) to the existing handler, "
            "or delete that RuntimeClass",
        )
    wanted = sorted(set(planned.runtime_classes.values()))
    if observed.nodes is None:
        return unread(name, "nodes", observed)
    reporting = [n for n in observed.nodes if n.runtime_handlers is not None]
    if not reporting:
        return Check(
            name,
            Status.WARN,
            f"nodes do not report their runtime handlers; cannot tell whether {', '.join(wanted)} "
            "is installed",
            f"install gVisor (runsc) or Kata on the nodes and register the handler "
            f"{', '.join(wanted)} with containerd",
        )
    missing = [h for h in wanted if not any(h in (n.runtime_handlers or ()) for n in reporting)]
    if missing:
        return Check(
            name,
            Status.FAIL,
            f"no node has the runtime handler {', '.join(missing)}",
            "install gVisor (runsc) or Kata on the sandbox nodes, or turn sandboxes off",
        )
    return Check(name, Status.PASS, f"handlers {', '.join(wanted)} found on the nodes")


def _covered(address: str, denied: Sequence[str]) -> bool:
    """Whether an address or range lies wholly inside one of the denied ranges, or is a
    loopback one: from a pod, 127.0.0.1 is the pod itself (simulated nodes report it)."""
    try:
        net = ipaddress.ip_network(address, strict=False)
    except ValueError:
        return False
    if net.is_loopback:
        return True
    for cidr in denied:
        try:
            deny = ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            continue
        if net.version == deny.version and net.subnet_of(deny):  # type: ignore[arg-type]
            return True
    return False


def sandbox_egress(observed: Observed, planned: Planned) -> Check:
    """With `egress: internet` a sandbox reaches every address outside deniedCIDRs: the
    API server, the Service ranges, the nodes (kubelets) and the pod ranges must all be
    inside them. The cluster's own addresses are read, not assumed (a public API
    endpoint, nodes on 100.64/10 are missed by the RFC 1918 default)."""
    name = "sandbox-egress"
    if not planned.sandbox_egress:
        return Check(name, Status.PASS, "the install makes no sandbox namespace")
    if planned.sandbox_egress != "internet":
        return Check(
            name,
            Status.PASS,
            f"agentSandbox.network.egress {planned.sandbox_egress}: sandboxes reach "
            + ("cluster DNS only" if planned.sandbox_egress == "dns" else "nothing"),
        )
    if observed.nodes is None:
        return unread(name, "nodes", observed)
    if observed.api_server is None:
        return unread(name, "the kubernetes Service", observed)
    wanted = [(f"the API server {a}", a) for a in observed.api_server]
    wanted += [(f"the Service range {c}", c) for c in observed.service_cidrs or ()]
    for node in observed.nodes:
        wanted += [(f"node {node.name} {a}", a) for a in node.addresses]
        wanted += [(f"node {node.name}'s pods {c}", c) for c in node.pod_cidrs]
    open_to = [what for what, address in wanted if not _covered(address, planned.denied_cidrs)]
    if open_to:
        return Check(
            name,
            Status.FAIL,
            f"agentSandbox.network.egress internet: sandboxes can reach {few(open_to)} "
            "(outside agentSandbox.network.deniedCIDRs)",
            "add those ranges to agentSandbox.network.deniedCIDRs, or set egress to none or dns",
            items=tuple(open_to),
        )
    services = (
        f", the Service range {', '.join(observed.service_cidrs)}"
        if observed.service_cidrs
        else " (no ServiceCIDR to read: the Service range beyond the API server's address "
        "is unchecked)"
    )
    return Check(
        name,
        Status.PASS,
        f"agentSandbox.network.deniedCIDRs covers the API server, {len(observed.nodes)} "
        f"nodes and their pod ranges{services}",
    )


def prometheus_operator(observed: Observed, planned: Planned) -> Check:
    name = "prometheus-operator"
    used = sorted(k for k in PROMETHEUS_CRDS if k in planned.kinds)
    if not used:
        return Check(name, Status.PASS, "monitoring objects off: not needed")
    if observed.crds is None:
        return unread(name, "customresourcedefinitions", observed)
    missing = [PROMETHEUS_CRDS[k] for k in used if PROMETHEUS_CRDS[k] not in observed.crds]
    if missing:
        return Check(
            name,
            Status.FAIL,
            f"the chart creates {', '.join(used)} but these CRDs are missing: {few(missing)}",
            "install the Prometheus Operator (kube-prometheus-stack), or set "
            "monitoring.enabled=false",
            tuple(missing),
        )
    return Check(name, Status.PASS, f"CRDs for {', '.join(used)} present")


def api_kinds(observed: Observed) -> Check:
    name = "api-kinds"
    unserved = [k for k in observed.unserved if PROMETHEUS_GROUP not in k]
    if unserved:
        return Check(
            name,
            Status.FAIL,
            f"no API serves {few(unserved)} and the chart has no CRD for it",
            "install the component that defines it, or turn off the values that render it",
            tuple(unserved),
        )
    return Check(name, Status.PASS, "every kind the chart renders is served or has its CRD")


def release_state(observed: Observed, planned: Planned) -> Check:
    name = "release"
    what = f"release {planned.release} in {planned.namespace}"
    found = observed.release
    if "secrets" in observed.refused:
        return unread(name, "secrets", observed)
    if found is None:
        return Check(name, Status.PASS, f"{what}: not installed yet")
    if found.status.startswith("pending-"):
        return Check(
            name,
            Status.WARN,
            f"{what}: revision {found.revision} is {found.status} (an install was interrupted)",
            "`gridloop install` marks it failed and rolls forward; do not run two at once",
        )
    return Check(name, Status.PASS, f"{what}: revision {found.revision} {found.status}")


def namespace_state(observed: Observed, planned: Planned) -> Check:
    name = "namespace"
    if "namespaces" in observed.refused:
        return unread(name, "namespaces", observed)
    if observed.namespace_phase == "Terminating":
        return Check(
            name,
            Status.FAIL,
            f"namespace {planned.namespace} is being deleted",
            "wait until it is gone, then install",
        )
    if observed.namespace_phase is None:
        return Check(name, Status.PASS, f"{planned.namespace} does not exist yet: created")
    return Check(name, Status.PASS, f"{planned.namespace} exists")


def secrets(observed: Observed, planned: Planned) -> Check:
    """The Secrets the values name (a model's credentialsSecret) exist: the chart never
    holds keys, so a missing one would leave every model pod failing to start."""
    name = "secrets"
    if not planned.secrets:
        return Check(name, Status.PASS, "the values name no Secret")
    if observed.secrets_found is None:
        return unread(name, "secrets", observed)
    missing = [s for s in planned.secrets if s not in observed.secrets_found]
    if missing:
        first = missing[0]
        return Check(
            name,
            Status.FAIL,
            f"{planned.secrets[first]}: Secret {planned.namespace}/{first} does not exist",
            f"create it before installing from a file of AWS_ACCESS_KEY_ID=... and "
            f"AWS_SECRET_ACCESS_KEY=... lines (kubectl -n {planned.namespace} create secret "
            f"generic {first} --from-env-file=FILE; on the local cluster `gridloop local "
            "store-key serving --env-file FILE` writes one), never keys on a command line; "
            "the chart never holds the keys",
            items=tuple(missing),
        )
    return Check(name, Status.PASS, f"{few(sorted(planned.secrets))} exist in {planned.namespace}")

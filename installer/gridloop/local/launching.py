"""What each process of the local cluster runs: its command line, environment and health
check (the table `cluster.py` starts processes from).

Command lines are built by flags.py (the control plane, Kueue, the health service) and
container/addons.py (kube-proxy); this module picks the one for a process name
and the files it reads from the cluster's state directory. It starts nothing.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from pathlib import Path

from gridloop.fleet import SIMULATED_LABEL, Fleet, load_fleet
from gridloop.local import flags
from gridloop.local.addons import object_store
from gridloop.local.build.images import registry
from gridloop.local.container import addons, network_policy
from gridloop.local.container import starting as container
from gridloop.local.ports import LOOPBACK, Ports
from gridloop.local.state import State

KUEUE = "kueue"
AGENT_SANDBOX = "agent-sandbox"  # its controller, the process (sandbox_installing.py)
AGENT_SANDBOX_BINARY = "agent-sandbox-controller"
REGISTRY = "registry"  # the local image registry (images/registry.py)
OBJECT_STORE = object_store.PROCESS  # the S3 store model weights stream from


def kueue_token(state: State) -> Path:
    return state.dir / "kueue" / "prometheus.token"


def audit_log(state: State) -> Path:
    """The API server's audit log (flags.audit_policy: ServiceAccounts' writes to nodes,
    ClusterQueues and evictions)."""
    return state.dir / "logs" / "audit.log"


def kueue_certs(state: State) -> Path:
    return state.dir / "kueue" / "certs"


def _has_container_nodes(state: State) -> bool:
    return load_fleet(state.dir / "fleet.yaml").container_nodes is not None


def argv(name: str, state: State, binaries: dict[str, Path]) -> list[str]:
    pki, ports = state.dir / "pki", state.ports
    match name:
        case "etcd":
            return flags.etcd(binaries[name], ports, state.dir / "etcd")
        case "kube-apiserver":
            audit = (state.dir / "audit-policy.yaml", audit_log(state))
            return flags.apiserver(binaries[name], ports, pki, advertise(state), audit)
        case "kube-controller-manager":
            return flags.controller_manager(binaries[name], ports, pki)
        case "kube-scheduler":
            return flags.scheduler(binaries[name], ports, pki)
        case "kwok":
            return flags.kwok(binaries[name], ports, pki, state.dir / "kwok.yaml", SIMULATED_LABEL)
        case "dcgm-sim":
            return flags.dcgm_sim(
                binaries["python"],
                ports,
                state.dir / "fleet.yaml",
                state.dir / "sim" / "faults.json",
                state.kubeconfig if _has_container_nodes(state) else None,
            )
        case "prometheus":
            return flags.prometheus(
                binaries[name],
                ports,
                state.dir / "prometheus.yml",
                state.dir / "prometheus",
                every_address=_has_container_nodes(state),
            )
        case "gridloop-health":
            return flags.health(
                binaries["python"], ports, state.kubeconfig, state.dir / "health-policy.yaml"
            )
        case "agent-sandbox":
            return flags.agent_sandbox(binaries[AGENT_SANDBOX_BINARY], ports, state.kubeconfig)
        case "kueue":
            return flags.kueue(
                binaries[name], pki / "kueue.kubeconfig", state.dir / "kueue" / "config.yaml"
            )
        case "kube-proxy":
            fleet, first = _first_node(state)
            config = state.dir / "kube-proxy.yaml"
            config.write_text(
                addons.kube_proxy_config(
                    pki / "kube-proxy.kubeconfig",
                    first.name,
                    container.network(fleet).pod_subnet,
                    ports.kube_proxy,
                    ports.kube_proxy_metrics,
                )
            )
            return addons.kube_proxy_argv(binaries[name], config)
        case network_policy.BINARY:
            fleet, first = _first_node(state)
            return network_policy.argv(binaries[name], first.name, ports.netpol_metrics)
        case "registry":
            config = state.dir / "registry.yml"
            config.write_text(registry.config(ports.registry, registry.storage()))
            return registry.argv(binaries[name], config)
        case object_store.PROCESS:
            object_store.prepare(state.dir)
            return object_store.argv(
                binaries[object_store.BINARY],
                ports.object_store,
                object_store.data(state.dir),
                every_address=_has_container_nodes(state),
            )
    raise KeyError(name)


def _first_node(state: State) -> tuple[Fleet, container.ContainerNode]:
    """The fleet the cluster runs and its first container node (kube-proxy's)."""
    fleet = load_fleet(state.dir / "fleet.yaml")
    return fleet, container.nodes(fleet, state.dir)[0]


def advertise(state: State) -> str | None:
    """The address pods reach the API server at (none without container nodes)."""
    fleet_file = state.dir / "fleet.yaml"
    return container.advertise_address(load_fleet(fleet_file)) if fleet_file.is_file() else None


def env(name: str, state: State) -> dict[str, str] | None:
    if name == network_policy.BINARY:
        fleet = load_fleet(state.dir / "fleet.yaml")
        nodes = [n.name for n in container.nodes(fleet, state.dir)]
        return network_policy.env(state.dir / "pki" / "kube-network-policies.kubeconfig", nodes)
    if name == OBJECT_STORE:
        return object_store.env(state.dir)
    return flags.kueue_env(kueue_certs(state)) if name == KUEUE else None


def health_url(name: str, ports: Ports) -> str:
    return {
        "etcd": f"http://{LOOPBACK}:{ports.etcd}/health",
        "kube-apiserver": f"https://{LOOPBACK}:{ports.apiserver}/readyz",
        "kube-controller-manager": f"https://{LOOPBACK}:{ports.controller_manager}/healthz",
        "kube-scheduler": f"https://{LOOPBACK}:{ports.scheduler}/healthz",
        "kwok": f"http://{LOOPBACK}:{ports.kwok}/healthz",
        "dcgm-sim": f"http://{LOOPBACK}:{ports.dcgm_sim}/healthz",
        "prometheus": f"http://{LOOPBACK}:{ports.prometheus}/-/ready",
        "gridloop-health": f"http://{LOOPBACK}:{ports.health}/readyz",
        "kueue": f"http://{LOOPBACK}:{ports.kueue}/readyz",
        AGENT_SANDBOX: f"http://{LOOPBACK}:{ports.agent_sandbox}/readyz",
        REGISTRY: registry.health_url(ports.registry),
        OBJECT_STORE: object_store.health_url(ports.object_store),
        "kube-proxy": f"http://{LOOPBACK}:{ports.kube_proxy}/healthz",
        network_policy.BINARY: f"http://{LOOPBACK}:{ports.netpol_metrics}"
        + network_policy.health_path(),
    }[name]


def _ssl(pki: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    # controller-manager and scheduler serve self-signed loopback certificates
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def healthy(name: str, state: State) -> bool:
    return http_ok(health_url(name, state.ports), state)


def http_ok(url: str, state: State) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=_ssl(state.dir / "pki")) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False

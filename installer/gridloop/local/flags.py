"""Command lines for each control-plane process (pure: paths and ports in, argv out).

Everything listens on 127.0.0.1 only. Choices that differ from a production
cluster, and why:
- etcd runs with `--unsafe-no-fsync`: this is a disposable simulator, and
  fsync dominates write latency on a small VM (5,000 simulated nodes).
- without container nodes, the API server advertises 127.0.0.1 and does not reconcile
  the `kubernetes` Service endpoints (`--endpoint-reconciler-type=none`): a loopback
  address is not a valid endpoint. With them, it advertises the first container node's
  address on the pod bridge, so pods reach it through the `kubernetes` Service.
- simulated nodes report 127.0.0.1 as their address and kwok's port as their
  kubelet port, so `kubectl logs` never leaves the machine.
- simulated nodes post their status every 5 minutes, as kubelets do when nothing
  changed, but renew no Lease (see stages.py); so the controller-manager's grace
  period is 400 s, longer than that report period (the default is 50 s).
  Nothing in the simulator waits for it: a failed node is made with a label.
- Kueue's listeners (webhooks, metrics, health probes, visibility server) are set
  in its config file (kueue_manifests.py), not by flags, each on its own port.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from gridloop import names
from gridloop.fleet import schema

LOOPBACK = "127.0.0.1"
# the ranges the fleet schema keeps container pods out of (fleet/schema.py holds them)
SERVICE_CIDR = schema.SERVICE_RANGE
# kwok hands out fake pod IPs from here; nothing connects to them
_PODS = ipaddress.ip_network(schema.SIMULATED_POD_RANGE)
POD_CIDR = f"{_PODS.network_address + 1}/{_PODS.prefixlen}"  # kwok's --cidr: its gateway
NODE_MONITOR_GRACE = "400s"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"

_OFFSETS = {
    "etcd": 0,
    "etcd_peer": 1,
    "kwok": 2,
    "controller_manager": 3,
    "scheduler": 4,
    "dcgm_sim": 5,
    "prometheus": 6,
    "health": 7,
    "kueue": 8,  # Kueue's health probes (/healthz, /readyz)
    "kueue_webhook": 9,
    "kueue_metrics": 10,
    "kueue_visibility": 11,
    "agent_sandbox": 12,  # agent-sandbox's controller's health probes (/healthz, /readyz)
    "registry": 13,  # the local image registry (container nodes pull from it)
    # each container node's kubelet's /healthz (its API listens on the node's own address)
    "kubelet_0": 14,
    "kubelet_1": 15,
    "kubelet_2": 16,
    "kube_proxy": 17,  # its /healthz
    "kube_proxy_metrics": 18,
    "coredns": 19,  # its /health
    "coredns_ready": 20,  # its /ready: the kubernetes plugin has synced
    "netpol_metrics": 21,  # kube-network-policies' /metrics
    "object_store": 22,  # the object store's S3 API (object_store.py)
    "apiserver": 43,
}
# Below the kernel's ephemeral port range (32768-60999 by default): a port in it can be
# held by any process's outgoing connection (Prometheus' scrapes, the API server's watch
# of etcd), and then no server can bind it, SO_REUSEADDR or not.
DEFAULT_BASE_PORT = 26400
MAX_CONTAINER_NODES = 3
CONTAINER_NODE_PROCESSES = ("containerd", "kubelet")


@dataclass(frozen=True)
class Ports:
    etcd: int
    etcd_peer: int
    kwok: int
    controller_manager: int
    scheduler: int
    dcgm_sim: int
    prometheus: int
    health: int
    kueue: int
    kueue_webhook: int
    kueue_metrics: int
    kueue_visibility: int
    agent_sandbox: int
    registry: int
    kubelet_0: int
    kubelet_1: int
    kubelet_2: int
    kube_proxy: int
    kube_proxy_metrics: int
    coredns: int
    coredns_ready: int
    netpol_metrics: int
    object_store: int
    apiserver: int

    @classmethod
    def from_base(cls, base: int) -> Ports:
        if not 1024 <= base <= 65535 - max(_OFFSETS.values()):
            raise ValueError(
                f"--base-port {base} out of range 1024..{65535 - max(_OFFSETS.values())}"
            )
        return cls(**{name: base + off for name, off in _OFFSETS.items()})

    def by_process(self) -> dict[str, int]:
        """Every port and the process that listens on it, for checks and `status`."""
        names = {
            "etcd": "etcd",
            "etcd_peer": "etcd (peer)",
            "kwok": "kwok",
            "controller_manager": "kube-controller-manager",
            "scheduler": "kube-scheduler",
            "dcgm_sim": "dcgm-sim",
            "prometheus": "prometheus",
            "health": "gridloop-health",
            "kueue": "kueue",
            "kueue_webhook": "kueue (webhook)",
            "kueue_metrics": "kueue (metrics)",
            "kueue_visibility": "kueue (visibility)",
            "agent_sandbox": "agent-sandbox",
            "registry": "registry",
            **{f"kubelet_{i}": f"{node_process('kubelet', i)} (healthz)" for i in range(3)},
            "kube_proxy": "kube-proxy",
            "kube_proxy_metrics": "kube-proxy (metrics)",
            "coredns": "coredns",
            "coredns_ready": "coredns (ready)",
            "netpol_metrics": "kube-network-policies",
            "object_store": "object-store",
            "apiserver": "kube-apiserver",
        }
        return {names[k]: v for k, v in asdict(self).items()}

    def kubelet_healthz(self, index: int) -> int:
        return int(getattr(self, f"kubelet_{index}"))

    def used_by(self, processes: list[str]) -> dict[str, int]:
        """The ports these processes listen on (`etcd (peer)` comes with etcd, and so on)."""
        return {
            owner: port
            for owner, port in self.by_process().items()
            if owner.split(" (")[0] in processes
        }


def node_process(kind: str, index: int) -> str:
    """The process name of container node `index`'s containerd or kubelet."""
    from gridloop.fleet.nodes import container_node_name

    return f"{kind}/{container_node_name(index)}"


def etcd(binary: Path, ports: Ports, data_dir: Path) -> list[str]:
    client = f"http://{LOOPBACK}:{ports.etcd}"
    peer = f"http://{LOOPBACK}:{ports.etcd_peer}"
    return [
        str(binary),
        "--name=gridloop",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=gridloop={peer}",
        "--initial-cluster-state=new",
        "--quota-backend-bytes=8589934592",
        "--unsafe-no-fsync",
        "--log-level=info",
    ]


def audit_policy() -> dict[str, object]:
    """What the API server's audit log records: who (which ServiceAccount) changed a
    Node, a Kueue ClusterQueue or evicted a pod. The health service's actions, so a test
    can show they were made with its ServiceAccount and nothing else."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {
                "level": "Metadata",
                "userGroups": ["system:serviceaccounts"],
                "verbs": ["create", "update", "patch"],
                "resources": [
                    {"group": "", "resources": ["nodes", "pods/eviction"]},
                    {"group": "kueue.x-k8s.io", "resources": ["clusterqueues"]},
                ],
            },
            {"level": "None"},
        ],
    }


def apiserver(
    binary: Path,
    ports: Ports,
    pki: Path,
    advertise: str | None = None,
    audit: tuple[Path, Path] | None = None,
) -> list[str]:
    """With `advertise` (the first container node's address, on the pod bridge), pods reach
    the API server as on a real cluster: it listens on every address (hostnet's
    GRIDLOOP-HOST chain drops what does not come from loopback or the bridge), advertises
    that address, and its endpoint reconciler points the `kubernetes` Service there.
    Without container nodes, loopback only: nothing but this machine's clients talk to it.
    With `audit` (policy file, log file), what audit_policy() selects is logged."""
    if advertise:
        listen = ["--bind-address=0.0.0.0", f"--advertise-address={advertise}"]
    else:
        listen = [
            f"--bind-address={LOOPBACK}",
            f"--advertise-address={LOOPBACK}",
            "--endpoint-reconciler-type=none",
        ]
    return [
        str(binary),
        f"--etcd-servers=http://{LOOPBACK}:{ports.etcd}",
        *listen,
        f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-account-issuer={SA_ISSUER}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        # as a real cluster: kubelets are authorized as nodes, and may change only their own
        # Node and the pods bound to it
        "--authorization-mode=Node,RBAC",
        # ... and, as the managed clouds do, a pod asking for an extended resource
        # (nvidia.com/gpu) gets the toleration of that resource's taint, which every GPU
        # node carries (gridloop.fleet.GPU_TAINT)
        "--enable-admission-plugins=NodeRestriction,ExtendedResourceToleration",
        # logs, exec and port-forward: the API server's identity towards kubelets, and the
        # CA their serving certificates must chain to
        f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
        f"--kubelet-certificate-authority={pki / 'ca.crt'}",
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        "--allow-privileged=true",
        "--profiling=false",
        "--max-requests-inflight=800",
        "--max-mutating-requests-inflight=400",
        # aggregation layer (APIService backends such as Kueue's visibility API)
        f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
        "--enable-aggregator-routing=false",
        *(
            [
                f"--audit-policy-file={audit[0]}",
                f"--audit-log-path={audit[1]}",
                "--audit-log-maxsize=20",
                "--audit-log-maxbackup=1",
            ]
            if audit
            else []
        ),
    ]


def controller_manager(binary: Path, ports: Ports, pki: Path) -> list[str]:
    kubeconfig = pki / "controller-manager.kubeconfig"
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={ports.controller_manager}",
        "--leader-elect=false",
        f"--root-ca-file={pki / 'ca.crt'}",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        "--use-service-account-credentials=true",
        f"--cluster-signing-cert-file={pki / 'ca.crt'}",
        f"--cluster-signing-key-file={pki / 'ca.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        f"--node-monitor-grace-period={NODE_MONITOR_GRACE}",
        "--kube-api-qps=200",
        "--kube-api-burst=400",
        "--profiling=false",
    ]


def scheduler(binary: Path, ports: Ports, pki: Path) -> list[str]:
    kubeconfig = pki / "scheduler.kubeconfig"
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={ports.scheduler}",
        "--leader-elect=false",
        "--profiling=false",
    ]


def kwok(binary: Path, ports: Ports, pki: Path, config: Path, node_label: str) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={pki / 'kwok.kubeconfig'}",
        f"--config={config}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-label-selector={node_label}=true",
        f"--server-address={LOOPBACK}:{ports.kwok}",
        f"--node-ip={LOOPBACK}",
        f"--node-port={ports.kwok}",
        f"--cidr={POD_CIDR}",
        # one INFO line per status patch would be ~100 MB of log for 5,000 nodes
        "--v=WARN",
    ]


SCRAPE_INTERVAL = "5s"
# gridloop.sim.label_shapes: what the chart's exporter at the pinned 4.6.0-4.8.3 writes
# with NODE_NAME (4.8.3 renamed Hostname to hostname; err_code/err_msg on XIDs)
LABEL_SHAPE = "lowercase"
EXPORTER_JOB = names.EXPORTER_JOB
KUEUE_JOB = "kueue"
# the chart's: where a host health process keeps its state
HEALTH_NAMESPACE = names.DEFAULT_NAMESPACE


def dcgm_sim(
    python: Path, ports: Ports, fleet: Path, faults: Path, kubeconfig: Path | None = None
) -> list[str]:
    """The simulated exporters; with `kubeconfig`, also the pod discovery Prometheus
    reads (container nodes). Their series are shaped as the chart's own dcgm-exporter
    writes them (LABEL_SHAPE)."""
    return [
        str(python),
        "-m",
        "gridloop.sim.server",
        f"--fleet={fleet}",
        f"--faults={faults}",
        f"--port={ports.dcgm_sim}",
        f"--label-shape={LABEL_SHAPE}",
        *([f"--kubeconfig={kubeconfig}"] if kubeconfig else []),
    ]


def prometheus(
    binary: Path, ports: Ports, config: Path, data: Path, every_address: bool = False
) -> list[str]:
    """Prometheus on loopback; with `every_address` (container nodes: in-cluster pods
    read it through a Service), on every address, behind hostnet's GRIDLOOP-HOST guard."""
    listen = "0.0.0.0" if every_address else LOOPBACK
    return [
        str(binary),
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        "--storage.tsdb.retention.time=6h",
        f"--web.listen-address={listen}:{ports.prometheus}",
        "--log.level=warn",
    ]


# the simulated workloads and the health service, each scraped as its own job
HEALTH_JOB = "gridloop-health"
VLLM_JOB = "vllm"
SANDBOX_JOB = "agent-sandbox"
KSM_JOB = "kube-state-metrics"
# alerting rules Prometheus loads (relative to its config file; reloaded on SIGHUP)
RULES_GLOB = "rules/*.yml"


def prometheus_config(
    ports: Ports,
    nodes: list[str],
    kueue_token: Path | None = None,
    ca: Path | None = None,
    places: Mapping[str, tuple[str, str]] | None = None,
    workloads: bool = False,
    pods: bool = False,
    settings: Mapping[str, str] | None = None,
) -> dict[str, object]:
    """Scrape each simulated node's exporter as its own target, labelled with its node
    (and, from `places`, its `site` and `pool`, as the chart's relabelling does);
    with `kueue_token`, also Kueue's HTTPS /metrics with that bearer token, checked
    against the cluster CA `ca` that signed Kueue's serving certificate. With
    `workloads`, also the health service, the simulated vLLM replicas, agent-sandbox
    controller and kube-state-metrics (gridloop.sim.workloads), and the rules in
    RULES_GLOB. With `pods` (container nodes run the chart's pods), Kueue and the
    health service are also found as pods (sim/pod_discovery.py) and scraped at their pod
    addresses on the bridge, as an in-cluster Prometheus would. `settings` go into the
    config's `global` section over the defaults (a benchmark's scrape interval, its query
    log), so Prometheus starts with them: no reload while the cluster is young."""
    where = places or {}
    jobs: list[dict[str, object]] = [
        {
            "job_name": EXPORTER_JOB,
            "static_configs": [
                {
                    "targets": [f"{LOOPBACK}:{ports.dcgm_sim}"],
                    "labels": {
                        "node": node,
                        "instance": node,
                        "__metrics_path__": f"/nodes/{node}/metrics",
                        **(
                            {"site": where[node][0], "pool": where[node][1]}
                            if node in where
                            else {}
                        ),
                    },
                }
                for node in nodes
            ],
        }
    ]
    if pods and kueue_token is not None:
        jobs.append(kueue_pods_job(ports, kueue_token))
    elif kueue_token is not None:
        jobs.append(
            {
                "job_name": KUEUE_JOB,
                "scheme": "https",
                "authorization": {"credentials_file": str(kueue_token)},
                "tls_config": {"ca_file": str(ca)},
                "static_configs": [{"targets": [f"{LOOPBACK}:{ports.kueue_metrics}"]}],
            }
        )
    config: dict[str, object] = {
        "global": {
            "scrape_interval": SCRAPE_INTERVAL,
            "evaluation_interval": SCRAPE_INTERVAL,
            **(settings or {}),
        },
        "scrape_configs": jobs,
    }
    if workloads:
        jobs.extend(_workload_jobs(ports, pods))
        config["rule_files"] = [RULES_GLOB]
    return config


DISCOVERY_REFRESH = "5s"  # how often Prometheus re-reads the pods behind a job


def _discovered(ports: Ports, name: str) -> list[dict[str, object]]:
    """HTTP service discovery of the pods of pod_discovery.JOBS[name], as answered by the
    local helper server (Debian's Prometheus has no kubernetes_sd_configs)."""
    url = f"http://{LOOPBACK}:{ports.dcgm_sim}/discovery/{name}"
    return [{"url": url, "refresh_interval": DISCOVERY_REFRESH}]


def kueue_pods_job(ports: Ports, token: Path) -> dict[str, object]:
    """Kueue's controller pods' HTTPS /metrics, with the scraper's bearer token. Kueue
    serves them with a certificate it signs itself at start, which no CA here knows:
    the connection is encrypted but the server not verified (as kube-prometheus-stack
    does for controller-runtime metrics)."""
    return {
        "job_name": KUEUE_JOB,
        "scheme": "https",
        "authorization": {"credentials_file": str(token)},
        "tls_config": {"insecure_skip_verify": True},
        "http_sd_configs": _discovered(ports, "kueue"),
    }


def _health_job(ports: Ports, pods: bool) -> dict[str, object]:
    """The health service on its loopback port (a host process or a test's), and with
    `pods` every pod behind a Service labelled component=health, on its metrics port."""
    job: dict[str, object] = {
        "job_name": HEALTH_JOB,
        "static_configs": [{"targets": [f"{LOOPBACK}:{ports.health}"]}],
    }
    if pods:
        job["http_sd_configs"] = _discovered(ports, "health")
    return job


def _vllm_job(
    ports: Ports, sim: str, simulated: list[tuple[str, str]], pods: bool
) -> dict[str, object]:
    """vLLM's /metrics: the simulated model servers of the kwok GPU nodes (served by the
    helper server), and with `pods` the real ones the chart runs on the container nodes."""
    job: dict[str, object] = {
        "job_name": VLLM_JOB,
        "static_configs": [
            {
                "targets": [sim],
                "labels": {
                    "namespace": namespace,
                    "pod": pod,
                    "instance": pod,
                    "__metrics_path__": f"/workloads/vllm/{pod}/metrics",
                },
            }
            for namespace, pod in simulated
        ],
    }
    if pods:
        job["http_sd_configs"] = _discovered(ports, "vllm")
    return job


def _workload_jobs(ports: Ports, pods: bool = False) -> list[dict[str, object]]:
    from gridloop.sim.workloads import vllm_pods  # here: `gridloop status` reads Ports only

    sim = f"{LOOPBACK}:{ports.dcgm_sim}"
    return [
        _health_job(ports, pods),
        _vllm_job(ports, sim, vllm_pods(), pods),
        {
            "job_name": SANDBOX_JOB,
            "metrics_path": "/workloads/agent-sandbox/metrics",
            "static_configs": [{"targets": [sim]}],
        },
        {
            "job_name": KSM_JOB,
            "metrics_path": "/workloads/kube-state-metrics/metrics",
            # kube-state-metrics' own namespace/pod labels are the objects', not the target's
            "honor_labels": True,
            "static_configs": [{"targets": [sim]}],
        },
    ]


def kueue(binary: Path, ports: Ports, kubeconfig: Path, config: Path) -> list[str]:
    """Kueue's controller manager; its listeners are set in `config` (kueue_manifests.py)."""
    return [
        str(binary),
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        f"--visibility-server-port={ports.kueue_visibility}",
    ]


def agent_sandbox(binary: Path, ports: Ports, kubeconfig: Path) -> list[str]:
    """agent-sandbox's controller with its extensions (SandboxTemplate, SandboxClaim,
    SandboxWarmPool), as the chart's Deployment runs it; the only one, so no leader
    election; no metrics listener (the dashboards' agent-sandbox series are simulated)."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        "--extensions",
        "--leader-elect=false",
        "--metrics-bind-address=0",
        f"--health-probe-bind-address={LOOPBACK}:{ports.agent_sandbox}",
    ]


def kueue_env(cert_dir: Path) -> dict[str, str]:
    from gridloop.local.recipes import KUEUE_METRICS_CERT_ENV, KUEUE_VISIBILITY_CERT_ENV

    """Where the patched build (recipes.KUEUE_PATCHES) reads its metrics and visibility
    certificates: the same loopback serving certificate as its webhooks."""
    return {KUEUE_METRICS_CERT_ENV: str(cert_dir), KUEUE_VISIBILITY_CERT_ENV: str(cert_dir)}


def health(python: Path, ports: Ports, kubeconfig: Path, policy: Path) -> list[str]:
    return [
        str(python),
        "-m",
        "gridloop.cli",
        "health",
        "run",
        f"--kubeconfig={kubeconfig}",
        f"--prometheus-url=http://{LOOPBACK}:{ports.prometheus}",
        f"--config={policy}",
        f"--namespace={HEALTH_NAMESPACE}",
        f"--exporter-job={EXPORTER_JOB}",
        "--interval=1",
        f"--listen={LOOPBACK}:{ports.health}",
        "--identity=gridloop-local",
    ]

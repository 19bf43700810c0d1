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
  changed, but renew no Lease (see kwok/stages.py); so the controller-manager's grace
  period is 400 s, longer than that report period (the default is 50 s).
  Nothing in the simulator waits for it: a failed node is made with a label.
- Kueue's listeners (webhooks, metrics, health probes, visibility server) are set
  in its config file (addons/kueue_manifests.py), not by flags, each on its own port.
"""

from __future__ import annotations

from pathlib import Path

from gridloop.local.ports import LOOPBACK, POD_CIDR, SERVICE_CIDR, Ports
from gridloop.local.prometheus_config import EXPORTER_JOB, HEALTH_NAMESPACE, LABEL_SHAPE

NODE_MONITOR_GRACE = "400s"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"


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


def kueue(binary: Path, kubeconfig: Path, config: Path) -> list[str]:
    """Kueue's controller manager; its listeners are set in `config` (kueue_manifests.py),
    the visibility server's port too (Kueue v0.18 removed --visibility-server-port)."""
    return [str(binary), f"--config={config}", f"--kubeconfig={kubeconfig}"]


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
    from gridloop.local.build.recipes import KUEUE_METRICS_CERT_ENV, KUEUE_VISIBILITY_CERT_ENV

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

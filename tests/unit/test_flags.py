"""Every control-plane process listens on loopback only, each on its own port."""

from __future__ import annotations

import dataclasses
import ipaddress
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from gridloop.local import flags, ports, prometheus_config
from gridloop.local.ports import LOOPBACK, Ports

BASE = 41000  # never bound: these tests only build argv
PKI = Path("/state/pki")
NODE_LABEL = "gridloop.io/simulated"

# Flags whose value names an address a process listens on, advertises or dials.
ADDRESS_FLAGS = (
    "--listen-client-urls",
    "--advertise-client-urls",
    "--listen-peer-urls",
    "--initial-advertise-peer-urls",
    "--initial-cluster",
    "--etcd-servers",
    "--bind-address",
    "--advertise-address",
    "--server-address",
    "--node-ip",
    "--web.listen-address",
    "--prometheus-url",
    "--listen",
    "--health-probe-bind-address",
)


def argvs(ports: Ports) -> dict[str, list[str]]:
    return {
        "etcd": flags.etcd(Path("/bin/etcd"), ports, Path("/state/etcd")),
        "kube-apiserver": flags.apiserver(Path("/bin/kube-apiserver"), ports, PKI),
        "kube-controller-manager": flags.controller_manager(
            Path("/bin/kube-controller-manager"), ports, PKI
        ),
        "kube-scheduler": flags.scheduler(Path("/bin/kube-scheduler"), ports, PKI),
        "kwok": flags.kwok(Path("/bin/kwok"), ports, PKI, Path("/state/kwok.yaml"), NODE_LABEL),
        "prometheus": flags.prometheus(
            Path("/bin/prometheus"), ports, Path("/state/prometheus.yml"), Path("/state/prom")
        ),
        "gridloop-health": flags.health(
            Path("/bin/python"), ports, Path("/state/kubeconfig"), Path("/state/health.yaml")
        ),
        "agent-sandbox": flags.agent_sandbox(
            Path("/bin/agent-sandbox-controller"), ports, Path("/state/kubeconfig")
        ),
    }


def flag_values(argv: list[str]) -> dict[str, str]:
    """`--name=value` arguments as a mapping; bare flags map to ''."""
    out: dict[str, str] = {}
    for arg in argv[1:]:
        name, _, value = arg.partition("=")
        out[name] = value
    return out


def hosts(value: str) -> list[str]:
    """Every host named in a flag value: URLs, `name=URL` lists, `host:port` or a bare IP."""
    found = []
    for item in value.split(","):
        item = item.split("=", 1)[-1]
        if "://" in item:
            host = urlsplit(item).hostname
        else:
            host = item.rsplit(":", 1)[0] if item.count(":") == 1 else item
        assert host, f"no host in {value!r}"
        found.append(host)
    return found


def address_flags(argv: list[str]) -> dict[str, str]:
    return {k: v for k, v in flag_values(argv).items() if k in ADDRESS_FLAGS}


@pytest.mark.parametrize("process", sorted(argvs(Ports.from_base(BASE))))
def test_process_listens_and_advertises_only_on_loopback(process: str) -> None:
    argv = argvs(Ports.from_base(BASE))[process]

    addresses = address_flags(argv)
    assert addresses, f"{process} has no address flags to check"
    for name, value in addresses.items():
        for host in hosts(value):
            assert ipaddress.ip_address(host).is_loopback, f"{process} {name}={value}"
            assert host == LOOPBACK


@pytest.mark.parametrize("process", sorted(argvs(Ports.from_base(BASE))))
def test_no_argument_names_a_wildcard_address(process: str) -> None:
    argv = argvs(Ports.from_base(BASE))[process]

    assert not [arg for arg in argv if "0.0.0.0" in arg or "[::]" in arg]


@pytest.mark.parametrize(
    ("process", "flag", "expected"),
    [
        ("etcd", "--listen-client-urls", f"http://127.0.0.1:{BASE}"),
        ("etcd", "--listen-peer-urls", f"http://127.0.0.1:{BASE + 1}"),
        ("kwok", "--server-address", f"127.0.0.1:{BASE + 2}"),
        ("kube-controller-manager", "--secure-port", str(BASE + 3)),
        ("kube-scheduler", "--secure-port", str(BASE + 4)),
        ("kube-apiserver", "--secure-port", str(BASE + 43)),
        ("kube-apiserver", "--etcd-servers", f"http://127.0.0.1:{BASE}"),
        ("agent-sandbox", "--health-probe-bind-address", f"127.0.0.1:{BASE + 12}"),
        ("agent-sandbox", "--metrics-bind-address", "0"),  # off: it would take every address
    ],
)
def test_each_process_uses_its_own_port(process: str, flag: str, expected: str) -> None:
    assert flag_values(argvs(Ports.from_base(BASE))[process])[flag] == expected


@pytest.mark.parametrize("base", [1024, ports.DEFAULT_BASE_PORT, 41000, 65535 - 43])
def test_ports_from_base_are_distinct_and_apiserver_is_base_plus_43(base: int) -> None:
    ports = Ports.from_base(base)

    by_process = ports.by_process()
    assert len(set(by_process.values())) == len(by_process) == len(dataclasses.fields(Ports))
    assert ports.etcd == base
    assert ports.apiserver == base + 43
    assert all(base <= port <= 65535 for port in by_process.values())


def test_by_process_names_every_control_plane_process() -> None:
    assert set(Ports.from_base(BASE).by_process()) == {
        "etcd",
        "etcd (peer)",
        "kwok",
        "kube-controller-manager",
        "kube-scheduler",
        "kube-apiserver",
        "dcgm-sim",
        "prometheus",
        "gridloop-health",
        "kueue",
        "kueue (webhook)",
        "kueue (metrics)",
        "kueue (visibility)",
        "agent-sandbox",
        "registry",
        "kubelet/system-000 (healthz)",
        "kubelet/system-001 (healthz)",
        "kubelet/system-002 (healthz)",
        "kube-proxy",
        "kube-proxy (metrics)",
        "kube-network-policies",
        "object-store",
    }


def test_the_default_ports_lie_below_the_kernels_ephemeral_range() -> None:
    """32768-60999 is where the kernel picks the local port of every outgoing connection:
    a port there may be held by any client, and then no server can bind it."""
    used = Ports.from_base(ports.DEFAULT_BASE_PORT).by_process().values()

    assert min(used) == ports.DEFAULT_BASE_PORT
    assert max(used) < 32768


@pytest.mark.parametrize(
    ("kind", "index", "name"),
    [
        ("kubelet", 0, "kubelet/system-000"),
        ("kubelet", 2, "kubelet/system-002"),
        ("containerd", 1, "containerd/system-001"),
    ],
)
def test_a_container_nodes_processes_are_named_for_the_node(
    kind: str, index: int, name: str
) -> None:
    assert ports.node_process(kind, index) == name
    assert kind in ports.CONTAINER_NODE_PROCESSES


@pytest.mark.parametrize("index", range(ports.MAX_CONTAINER_NODES))
def test_each_container_nodes_kubelet_has_its_own_healthz_port(index: int) -> None:
    used = Ports.from_base(BASE)

    assert used.kubelet_healthz(index) == BASE + 14 + index
    assert used.used_by([ports.node_process("kubelet", index)]) == {
        f"kubelet/system-{index:03d} (healthz)": BASE + 14 + index
    }


def test_the_registry_has_its_own_port_and_comes_with_no_other_process() -> None:
    assert Ports.from_base(BASE).used_by(["registry"]) == {"registry": BASE + 13}


def test_prometheus_scrapes_each_simulated_exporter_as_its_own_target_on_loopback() -> None:
    ports = Ports.from_base(BASE)
    config = prometheus_config.prometheus_config(ports, ["a-0", "b-1"])

    [job] = config["scrape_configs"]  # type: ignore[index]
    assert job["job_name"] == prometheus_config.EXPORTER_JOB
    groups = job["static_configs"]
    assert [g["labels"]["node"] for g in groups] == ["a-0", "b-1"]
    assert {t for g in groups for t in g["targets"]} == {f"{LOOPBACK}:{ports.dcgm_sim}"}
    assert groups[1]["labels"]["__metrics_path__"] == "/nodes/b-1/metrics"


def test_a_benchmarks_prometheus_settings_go_into_the_config_it_starts_with() -> None:
    ports = Ports.from_base(BASE)
    default = prometheus_config.prometheus_config(ports, ["a-0"])["global"]
    settings = {"scrape_interval": "15s", "query_log_file": "/tmp/q.log"}

    config = prometheus_config.prometheus_config(ports, ["a-0"], settings=settings)

    assert default == {"scrape_interval": "5s", "evaluation_interval": "5s"}
    assert config["global"] == {**default, **settings}


@pytest.mark.parametrize("base", [-1, 0, 80, 1023, 65535 - 42, 65535, 70000])
def test_out_of_range_base_port_is_rejected(base: int) -> None:
    with pytest.raises(ValueError, match=f"--base-port {base} out of range"):
        Ports.from_base(base)


@pytest.mark.parametrize(
    "arg",
    [
        "--endpoint-reconciler-type=none",
        "--advertise-address=127.0.0.1",
        f"--service-account-key-file={PKI / 'sa.pub'}",
        f"--service-account-signing-key-file={PKI / 'sa.key'}",
        f"--service-account-issuer={flags.SA_ISSUER}",
        f"--client-ca-file={PKI / 'ca.crt'}",
        # kubelets are authorized as their nodes, and may change only their own objects
        "--authorization-mode=Node,RBAC",
        # ... and GPU pods tolerate the GPU nodes' taint, as on the managed clouds
        "--enable-admission-plugins=NodeRestriction,ExtendedResourceToleration",
        # logs and exec: the API server's identity towards kubelets, and their CA
        f"--kubelet-client-certificate={PKI / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={PKI / 'apiserver-kubelet-client.key'}",
        f"--kubelet-certificate-authority={PKI / 'ca.crt'}",
    ],
)
def test_apiserver_keeps_the_flags_the_cluster_needs(arg: str) -> None:
    assert arg in argvs(Ports.from_base(BASE))["kube-apiserver"]


def test_controller_manager_signs_service_account_tokens_with_the_apiservers_key_pair() -> None:
    values = flag_values(argvs(Ports.from_base(BASE))["kube-controller-manager"])

    assert values["--service-account-private-key-file"] == str(PKI / "sa.key")
    assert values["--node-monitor-grace-period"] == flags.NODE_MONITOR_GRACE


@pytest.mark.parametrize("label", ["gridloop.io/simulated", "type"])
def test_kwok_manages_only_nodes_with_the_given_label(label: str) -> None:
    argv = flags.kwok(Path("kwok"), Ports.from_base(BASE), PKI, Path("kwok.yaml"), label)

    values = flag_values(argv)
    assert values["--manage-all-nodes"] == "false"
    assert values["--manage-nodes-with-label-selector"] == f"{label}=true"
    assert values["--config"] == "kwok.yaml"


def test_kwok_gives_simulated_nodes_its_own_loopback_port_as_kubelet_port() -> None:
    ports = Ports.from_base(BASE)

    values = flag_values(argvs(ports)["kwok"])
    assert values["--node-ip"] == LOOPBACK
    assert values["--node-port"] == str(ports.kwok)


def test_without_container_nodes_the_api_server_is_on_loopback_only(tmp_path: Path) -> None:
    argv = flags.apiserver(Path("/bin/kube-apiserver"), Ports.from_base(BASE), tmp_path)

    assert "--bind-address=127.0.0.1" in argv
    assert "--endpoint-reconciler-type=none" in argv


def test_with_container_nodes_pods_reach_the_api_server_at_the_first_nodes_address(
    tmp_path: Path,
) -> None:
    argv = flags.apiserver(
        Path("/bin/kube-apiserver"), Ports.from_base(BASE), tmp_path, advertise="10.200.0.1"
    )

    assert "--bind-address=0.0.0.0" in argv  # GRIDLOOP-HOST lets in loopback and the bridge
    assert "--advertise-address=10.200.0.1" in argv
    assert not [a for a in argv if a.startswith("--endpoint-reconciler-type")]

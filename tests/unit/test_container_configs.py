"""A container node's files: where they live, and what containerd, runsc, CNI and the
kubelet read in them.

Each generated file is parsed as its program parses it (TOML, JSON, YAML) and checked by
key, never by text: a setting that moved to another table is a setting containerd ignores.
"""

from __future__ import annotations

import ipaddress
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from gridloop.local import ports
from gridloop.local.container import configs
from gridloop.local.container.layout import BRIDGE, NodeLayout, cluster_id, sockets_dir

STATE = Path("/state/gridloop")
CACHE = Path("/cache/gridloop")
POD_SUBNET = "10.200.0.0/16"
PAUSE = "registry.k8s.io/pause:3.10.1"
REGISTRY = "127.0.0.1:26413"
CRI = "io.containerd.cri.v1.runtime"
IMAGES = "io.containerd.cri.v1.images"
SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes, with its terminating NUL


def settings(index: int, state: Path = STATE) -> tuple[NodeLayout, configs.NodeSettings]:
    """Node `index` as `up` plans it: the index-th /24 of the pod subnet, its first host
    address as the node's own."""
    name = f"system-{index:03d}"
    layout = NodeLayout.of(state, name)
    pod_cidr = f"10.200.{index}.0/24"
    return layout, configs.NodeSettings(
        name=name,
        node_ip=f"10.200.{index}.1",
        pod_cidr=pod_cidr,
        pod_subnet=POD_SUBNET,
        service_cidr=ports.SERVICE_CIDR,
        healthz_port=26414 + index,
        registry=REGISTRY,
        pause_image=PAUSE,
        labels=(("gridloop.io/container-node", "true"), ("gridloop.io/pool", "system")),
        binaries={
            "runc": CACHE / "runc" / "bin" / "runc",
            "runsc": CACHE / "gvisor" / "bin" / "runsc",
            "containerd-shim-runsc-v1": CACHE / "gvisor" / "bin" / "containerd-shim-runsc-v1",
        },
        cni_bin_dir=CACHE / "cni-plugins" / "bin",
        ca_file=layout.pki / "ca.crt",
    )


def containerd(index: int = 0, state: Path = STATE) -> dict[str, Any]:
    return tomllib.loads(configs.containerd_config(*settings(index, state)))


def is_below(path: str | Path, *folders: Path) -> bool:
    return any(Path(path).is_relative_to(folder) for folder in folders)


def written_by_containerd(doc: dict[str, Any]) -> list[str]:
    """Every path containerd creates, writes or listens on, from its config."""
    plugins = doc["plugins"]
    return [
        doc["root"],
        doc["state"],
        doc["grpc"]["address"],
        doc["ttrpc"]["address"],
        plugins[CRI]["cni"]["conf_dir"],
        plugins[IMAGES]["registry"]["config_path"],
        plugins[CRI]["containerd"]["runtimes"]["runsc"]["options"]["ConfigPath"],
        plugins["io.containerd.internal.v1.opt"]["path"],
    ]


# --- layout: one folder per node, one sockets folder and one cgroup per cluster ---


def test_every_file_of_a_node_is_below_its_own_folder() -> None:
    layout = NodeLayout.of(STATE, "system-001")
    files = [
        layout.containerd_config,
        layout.containerd_root,
        layout.containerd_state,
        layout.registry_hosts,
        layout.cni_conf_dir,
        layout.cni_data_dir,
        layout.runsc_config,
        layout.runsc_root,
        layout.runsc_logs,
        layout.kubelet_config,
        layout.kubelet_kubeconfig,
        layout.kubelet_root,
        layout.pod_logs,
        layout.pki,
    ]

    assert layout.root == STATE / "nodes" / "system-001"
    assert [f for f in files if not is_below(f, layout.root)] == []
    assert is_below(layout.containerd_socket, sockets_dir(STATE))


def test_one_cluster_is_named_by_its_state_directory_however_it_is_spelled(
    tmp_path: Path,
) -> None:
    real = tmp_path / "state"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)

    assert cluster_id(tmp_path / "link") == cluster_id(real) == cluster_id(real / ".." / "state")
    assert cluster_id(tmp_path / "other") != cluster_id(real)


def test_two_clusters_share_no_socket_folder_and_no_cgroup() -> None:
    one, two = NodeLayout.of(STATE, "system-000"), NodeLayout.of(Path("/other"), "system-000")

    assert one.sockets != two.sockets
    assert one.cgroup != two.cgroup
    assert one.cgroup == f"/gridloop/{cluster_id(STATE)}/system-000"
    assert one.runtime_cgroup == f"{one.cgroup}/runtime"


@pytest.mark.parametrize("depth", [1, 20, 60], ids=["short", "long", "very-long"])
def test_a_nodes_sockets_fit_a_unix_socket_address_however_deep_the_state(depth: int) -> None:
    state = Path("/tmp").joinpath(*["pytest-of-root-deeply-nested"] * depth)
    layout = NodeLayout.of(state, "system-002")

    for socket in (str(layout.containerd_socket), str(layout.containerd_socket) + ".ttrpc"):
        assert len(socket.encode()) <= SUN_PATH_MAX, socket


# --- containerd ---


def test_containerd_reads_a_version_3_config_with_its_own_root_and_state() -> None:
    layout, _ = settings(0)
    doc = containerd()

    assert doc["version"] == 3
    assert (doc["root"], doc["state"]) == (
        str(layout.containerd_root),
        str(layout.containerd_state),
    )
    assert doc["grpc"]["address"] == str(layout.containerd_socket)


def test_containerd_never_lowers_a_containers_oom_score_below_its_own() -> None:
    runtime = containerd()["plugins"][CRI]

    assert runtime["restrict_oom_score_adj"] is True


def test_containerd_keeps_network_namespaces_under_its_own_state() -> None:
    runtime = containerd()["plugins"][CRI]

    assert runtime["netns_mounts_under_state_dir"] is True


def test_runc_is_the_default_handler_and_the_cached_runc_runs_it() -> None:
    _, s = settings(0)
    runtime = containerd()["plugins"][CRI]["containerd"]

    assert runtime["default_runtime_name"] == "runc"
    runc = runtime["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["options"] == {"BinaryName": str(s.binaries["runc"]), "SystemdCgroup": False}


def test_gvisor_is_a_second_handler_started_by_its_own_shim_with_its_own_config() -> None:
    layout, s = settings(0)
    runsc = containerd()["plugins"][CRI]["containerd"]["runtimes"]["runsc"]

    assert runsc["runtime_type"] == "io.containerd.runsc.v1"
    assert runsc["runtime_path"] == str(s.binaries["containerd-shim-runsc-v1"])
    assert runsc["options"] == {
        "TypeUrl": "io.containerd.runsc.v1.options",
        "ConfigPath": str(layout.runsc_config),
    }
    assert set(containerd()["plugins"][CRI]["containerd"]["runtimes"]) == set(
        configs.RUNTIME_HANDLERS
    )


def test_the_sandbox_image_is_pinned_and_images_come_through_the_nodes_hosts_files() -> None:
    layout, _ = settings(0)
    images = containerd()["plugins"][IMAGES]

    assert images["pinned_images"] == {"sandbox": PAUSE}
    assert images["registry"] == {"config_path": str(layout.registry_hosts)}


def test_cni_plugins_come_from_the_cache_and_their_config_from_the_node() -> None:
    layout, s = settings(0)
    cni = containerd()["plugins"][CRI]["cni"]

    assert cni == {"bin_dirs": [str(s.cni_bin_dir)], "conf_dir": str(layout.cni_conf_dir)}


@pytest.mark.parametrize("index", [0, 1, 2])
def test_everything_containerd_writes_is_the_nodes_own(index: int) -> None:
    layout, _ = settings(index)

    written = written_by_containerd(containerd(index))

    assert [p for p in written if not is_below(p, layout.root, layout.sockets)] == []


def test_two_nodes_containerds_share_no_path_they_write() -> None:
    paths = [set(written_by_containerd(containerd(i))) for i in (0, 1, 2)]

    assert paths[0].isdisjoint(paths[1])
    assert paths[1].isdisjoint(paths[2])
    assert paths[0].isdisjoint(paths[2])


@pytest.mark.parametrize(
    "state",
    [
        "/tmp/with space",
        '/tmp/with "quotes"',
        "/tmp/back\\slash",
        "/tmp/café",
        "/tmp/🐳",
        "/tmp/\x7f",
    ],
    ids=["space", "quotes", "backslash", "latin-1", "beyond-the-bmp", "del"],
)
def test_a_state_directory_with_any_character_stays_a_valid_toml_string(state: str) -> None:
    layout, s = settings(0, Path(state))

    assert tomllib.loads(configs.containerd_config(layout, s))["root"] == str(
        layout.containerd_root
    )
    assert tomllib.loads(configs.runsc_config(layout, s))["root"] == str(layout.runsc_root)


# --- gVisor ---


def test_runsc_runs_the_cached_binary_with_its_state_and_logs_in_the_node() -> None:
    layout, s = settings(1)

    doc = tomllib.loads(configs.runsc_config(layout, s))

    assert doc["binary_name"] == str(s.binaries["runsc"])
    assert doc["root"] == str(layout.runsc_root)
    assert Path(doc["log_path"]).parent == layout.runsc_logs
    assert "%ID%" in doc["log_path"]  # one log per sandbox, named by the shim
    assert is_below(doc["root"], layout.root)


# --- CNI ---


def bridge(index: int) -> dict[str, Any]:
    doc = json.loads(configs.cni_config(*settings(index)))
    plugins = doc["plugins"]
    assert [p["type"] for p in plugins] == ["bridge", "loopback"]
    return dict(plugins[0])


def test_pods_join_the_shared_bridge_and_nothing_they_send_leaves_the_machine() -> None:
    plugin = bridge(0)

    assert plugin["bridge"] == BRIDGE == "gridloop0"
    assert plugin["ipMasq"] is False
    assert plugin["isDefaultGateway"] is False
    assert plugin["isGateway"] is False  # as a gateway, the plugin turns on ip_forward


def test_pods_are_routed_to_the_service_range_and_the_metadata_address_only() -> None:
    ipam = bridge(0)["ipam"]

    # the metadata address is on the host's bridge, where nothing listens (hostnet.py)
    assert ipam["routes"] == [
        {"dst": ports.SERVICE_CIDR},
        {"dst": "169.254.169.254/32"},
        {"dst": "198.51.100.1/32"},
    ]
    assert all(route["dst"] not in ("0.0.0.0/0", "::/0") for route in ipam["routes"])


@pytest.mark.parametrize("index", [0, 1, 2])
def test_a_nodes_pods_get_addresses_of_its_own_slash_24_behind_its_own_address(
    index: int,
) -> None:
    layout, s = settings(index)
    ipam = bridge(index)["ipam"]
    ((pool,),) = ipam["ranges"]
    mine = ipaddress.ip_network(s.pod_cidr)
    start, end = ipaddress.ip_address(pool["rangeStart"]), ipaddress.ip_address(pool["rangeEnd"])

    assert pool["subnet"] == POD_SUBNET  # every node's pods are on-link through the bridge
    assert pool["gateway"] == s.node_ip
    assert start in mine and end in mine and start <= end
    assert not start <= ipaddress.ip_address(s.node_ip) <= end  # never the node's address
    assert end != mine.broadcast_address
    assert ipam["type"] == "host-local"
    assert is_below(ipam["dataDir"], layout.root)


def test_no_two_nodes_hand_out_the_same_pod_address() -> None:
    def pool(index: int) -> set[int]:
        ((r,),) = bridge(index)["ipam"]["ranges"]
        return set(
            range(
                int(ipaddress.ip_address(r["rangeStart"])),
                int(ipaddress.ip_address(r["rangeEnd"])) + 1,
            )
        )

    assert pool(0).isdisjoint(pool(1))
    assert pool(1).isdisjoint(pool(2))


# --- registry mirrors ---


def test_each_mirrored_registry_has_a_hosts_file_and_nothing_else_does() -> None:
    files = configs.registry_hosts(REGISTRY)

    # KAITO's controller image keeps upstream's name on mcr.microsoft.com
    assert set(files) == {"registry.k8s.io", "ghcr.io", "docker.io", "quay.io", "mcr.microsoft.com"}


@pytest.mark.parametrize(
    ("name", "upstream"),
    [
        ("registry.k8s.io", "https://registry.k8s.io"),
        ("ghcr.io", "https://ghcr.io"),
        ("docker.io", "https://registry-1.docker.io"),
        ("quay.io", "https://quay.io"),
        ("mcr.microsoft.com", "https://mcr.microsoft.com"),
    ],
)
def test_each_registry_is_pulled_from_its_own_path_of_the_local_registry(
    name: str, upstream: str
) -> None:
    doc = tomllib.loads(configs.registry_hosts(REGISTRY)[name])

    assert doc["server"] == upstream
    assert doc["host"] == {
        f"http://{REGISTRY}/v2/{name}": {
            "capabilities": ["pull", "resolve"],
            # the path above is the whole API prefix: `<registry>/v2/<name>/<repo>/...`
            "override_path": True,
        }
    }


# --- kubelet ---


def kubelet(index: int = 0) -> dict[str, Any]:
    text = configs.kubelet_config(*settings(index))
    doc = yaml.safe_load(text)
    assert isinstance(doc, dict)
    return doc


def test_the_kubelet_runs_on_cgroup_v1_with_cgroupfs_below_its_nodes_own_root() -> None:
    layout, _ = settings(1)
    doc = kubelet(1)

    assert (doc["apiVersion"], doc["kind"]) == (
        "kubelet.config.k8s.io/v1beta1",
        "KubeletConfiguration",
    )
    assert doc["failCgroupV1"] is False
    assert doc["cgroupDriver"] == "cgroupfs"
    assert doc["cgroupRoot"] == layout.cgroup
    assert doc["cgroupRoot"] != kubelet(0)["cgroupRoot"]


def test_the_kubelet_syncs_each_pod_every_ten_seconds_so_changed_secrets_arrive() -> None:
    """Kueue waits for the certificate it writes into its mounted Secret: at the default
    1m a pod's volume follows 60 to 90 s later (the cluster test times the real one)."""
    assert kubelet(0)["syncFrequency"] == configs.SYNC_FREQUENCY == "10s"


def test_the_kubelet_serves_on_the_nodes_address_and_its_health_on_loopback() -> None:
    layout, s = settings(2)
    doc = kubelet(2)

    assert doc["address"] == s.node_ip
    assert doc["port"] == configs.KUBELET_PORT
    assert doc["readOnlyPort"] == 0
    assert (doc["healthzBindAddress"], doc["healthzPort"]) == (ports.LOOPBACK, s.healthz_port)
    assert doc["tlsCertFile"] == str(layout.pki / "kubelet-serving.crt")
    assert doc["tlsPrivateKeyFile"] == str(layout.pki / "kubelet-serving.key")


def test_the_kubelet_trusts_client_certificates_of_the_cluster_ca_and_asks_the_api_server() -> None:
    _, s = settings(0)
    doc = kubelet()

    assert doc["authentication"] == {
        "anonymous": {"enabled": False},
        "webhook": {"enabled": True},
        "x509": {"clientCAFile": str(s.ca_file)},
    }
    assert doc["authorization"] == {"mode": "Webhook"}


def test_the_kubelet_talks_to_its_nodes_containerd_and_logs_into_the_nodes_folder() -> None:
    layout, s = settings(0)
    doc = kubelet()

    assert doc["containerRuntimeEndpoint"] == f"unix://{layout.containerd_socket}"
    assert doc["podLogsDir"] == str(layout.pod_logs)
    assert is_below(doc["podLogsDir"], layout.root)
    assert doc["podCIDR"] == s.pod_cidr


def test_the_kubelet_registers_the_node_by_name_address_and_labels_without_a_taint() -> None:
    layout, s = settings(1)
    argv = configs.kubelet_argv(Path("/cache/kubelet"), layout, s)

    assert argv[0] == "/cache/kubelet"
    assert {
        "--config": str(layout.kubelet_config),
        "--kubeconfig": str(layout.kubelet_kubeconfig),
        "--root-dir": str(layout.kubelet_root),
        "--hostname-override": "system-001",
        "--node-ip": "10.200.1.1",
        "--node-labels": "gridloop.io/container-node=true,gridloop.io/pool=system",
    }.items() <= dict(arg.partition("=")[::2] for arg in argv[1:]).items()
    # unselected pods land here: the GPU nodes are the tainted ones (fleet.GPU_TAINT)
    assert not [arg for arg in argv if arg.startswith("--register-with-taints")]


def test_containerd_is_started_with_the_nodes_config() -> None:
    layout, _ = settings(0)

    assert configs.containerd_argv(Path("/c/containerd"), layout)[:2] == [
        "/c/containerd",
        f"--config={layout.containerd_config}",
    ]

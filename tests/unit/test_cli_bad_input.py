"""Bad input gets one clear line naming the problem, a non-zero exit, and changes nothing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GOOD = (REPO / "examples" / "fleets" / "default.yaml").read_text()


def _one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.mark.parametrize(
    ("fleet_text", "expected"),
    [
        pytest.param("sites: [\n  - name: x\n", "bad.yaml", id="malformed-yaml"),
        pytest.param(
            GOOD.replace("gpu: H100-80GB", "gpu: H900", 1),
            "unknown GPU model 'H900'",
            id="unknown-gpu-model",
        ),
        pytest.param(
            GOOD.replace("nodes: 8", "nodes: -3", 1),
            "nodes: must be a non-negative",
            id="negative-count",
        ),
        pytest.param(
            GOOD.replace("gpusPerNode: 8", "gpusPerNode: 80", 1),
            "gpusPerNode",
            id="too-many-gpus-per-node",
        ),
        pytest.param(GOOD.replace("kind: Fleet", "kind: Cluster"), "kind", id="wrong-kind"),
        pytest.param(
            GOOD.replace("  nodes: 1\n", "  nodes: 1\n  runtime: kata\n", 1),
            "containerNodes: unknown field 'runtime'",
            id="container-nodes-unknown-key",
        ),
        pytest.param(
            GOOD.replace("  nodes: 1\n", "  nodes: 0\n", 1),
            "containerNodes.nodes: must be an integer from 1 to 3, got 0",
            id="zero-container-nodes",
        ),
        pytest.param(
            GOOD.replace("  nodes: 1\n", "  nodes: 4\n", 1),
            "containerNodes.nodes: must be an integer from 1 to 3, got 4",
            id="too-many-container-nodes",
        ),
        pytest.param(
            GOOD.replace("  # podSubnet: 10.200.0.0/16", "  podSubnet: 10.96.0.0/12", 1),
            "overlaps the local cluster's Service range",
            id="pod-subnet-over-the-service-range",
        ),
    ],
)
def test_bad_fleet_file_is_refused_before_anything_starts(tmp_path, gridloop, fleet_text, expected):
    bad = tmp_path / "bad.yaml"
    bad.write_text(fleet_text)
    state = tmp_path / "state"

    result = gridloop(
        "local", "up", "--fleet", str(bad), "--state-dir", str(state), "--base-port", "27800"
    )

    assert result.returncode == 2
    line = _one_error_line(result.stderr)
    assert expected in line and "bad.yaml" in line
    assert not state.exists()


def test_missing_fleet_file_names_the_flag(tmp_path, gridloop):
    result = gridloop(
        "local",
        "up",
        "--fleet",
        str(tmp_path / "nope.yaml"),
        "--state-dir",
        str(tmp_path / "state"),
    )
    assert result.returncode == 2
    assert "--fleet: no such file" in _one_error_line(result.stderr)


def test_base_port_out_of_range_is_refused(tmp_path, gridloop):
    result = gridloop("local", "up", "--base-port", "80", "--state-dir", str(tmp_path / "s"))
    assert result.returncode == 2
    assert "--base-port 80 out of range" in _one_error_line(result.stderr)
    assert not (tmp_path / "s").exists()


def test_generator_refuses_a_fleet_of_zero_nodes(gridloop):
    result = gridloop("local", "fleet", "--nodes", "0")
    assert result.returncode == 2
    assert "nodes" in _one_error_line(result.stderr)


def test_build_without_a_go_toolchain_says_so_in_one_line(tmp_path, gridloop):
    # an empty cache forces a build; a PATH without Go makes it impossible
    env = dict(os.environ, GRIDLOOP_CACHE=str(tmp_path / "cache"), PATH="/usr/bin:/bin")
    result = gridloop("local", "build", "etcd", env=env)
    assert result.returncode == 1
    line = _one_error_line(result.stderr)
    assert "go toolchain not found on PATH" in line and "etcd" in line
    assert not list((tmp_path / "cache").glob("*/bin/*"))


def test_a_bad_health_policy_is_refused_before_any_cluster_call(tmp_path, gridloop):
    policy = tmp_path / "health.yaml"
    policy.write_text(
        "apiVersion: gridloop.io/v1alpha1\nkind: HealthPolicy\n"
        "spec:\n  xid:\n    overrides: {79: reboot}\n"
    )
    # a kubeconfig that does not exist: reaching for the cluster would fail differently
    result = gridloop(
        "health",
        "run",
        "--config",
        str(policy),
        "--kubeconfig",
        str(tmp_path / "missing"),
        "--prometheus-url",
        "http://127.0.0.1:9",
    )
    assert result.returncode == 2
    line = _one_error_line(result.stderr)
    assert "spec.xid.overrides.79: must be one of quarantine, count, ignore" in line


@pytest.mark.parametrize(
    ("url", "flags", "expected"),
    [
        pytest.param(
            "https://prom:9090",
            ["--prometheus-token-file", "{tmp}/no-token"],
            "error: --prometheus-token-file {tmp}/no-token: no such file",
            id="token-file-missing",
        ),
        pytest.param(
            "https://prom:9090",
            ["--prometheus-cert-file", "{tmp}/ca.crt"],
            "error: --prometheus-cert-file: needs the other of --prometheus-cert-file and "
            "--prometheus-key-file",
            id="cert-without-key",
        ),
        pytest.param(
            "http://prom:9090",
            ["--prometheus-ca-file", "{tmp}/ca.crt"],
            "error: --prometheus-url http://prom:9090: TLS files given, so an https:// URL is "
            "expected",
            id="tls-over-http",
        ),
    ],
)
def test_bad_prometheus_access_is_one_line_naming_the_flag_before_any_cluster_call(
    tmp_path, gridloop, url, flags, expected
):
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    argv = [f.format(tmp=tmp_path) for f in flags]
    # a kubeconfig that does not exist: reaching for the cluster would fail differently
    result = gridloop(
        "health", "run", "--kubeconfig", str(tmp_path / "missing"), "--prometheus-url", url,
        *argv,
    )  # fmt: skip
    assert result.returncode == 2
    assert _one_error_line(result.stderr) == expected.format(tmp=tmp_path)


@pytest.mark.parametrize("flag", ["--interval", "--fault-read-interval"])
def test_a_pace_that_is_not_positive_is_one_line_naming_the_flag(tmp_path, gridloop, flag):
    result = gridloop(
        "health", "run", "--kubeconfig", str(tmp_path / "missing"), "--prometheus-url",
        "http://127.0.0.1:9", flag, "0",
    )  # fmt: skip
    assert result.returncode == 2
    assert _one_error_line(result.stderr) == f"error: {flag} 0.0: must be positive"


def test_a_missing_kubeconfig_is_one_line_naming_the_flag(tmp_path, gridloop):
    result = gridloop("health", "status", "--kubeconfig", str(tmp_path / "missing"))
    assert result.returncode == 2
    assert "--kubeconfig" in _one_error_line(result.stderr)


def _a_host_network() -> str | None:
    from gridloop.fleet.host_networks import read_host_networks

    for _interface, cidr in read_host_networks():
        if not cidr.startswith("127."):
            return cidr
    return None


def test_a_pod_subnet_over_the_hosts_own_network_is_refused(tmp_path, gridloop):
    """The subnet is this machine's own network, read as `up` reads it."""
    import ipaddress

    host = _a_host_network()
    if host is None:
        pytest.skip("this machine has no IPv4 network besides loopback to overlap")
    net = ipaddress.ip_network(host, strict=False)
    subnet = net.supernet(new_prefix=min(net.prefixlen, 22)) if net.prefixlen > 22 else net
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("  # podSubnet: 10.200.0.0/16", f"  podSubnet: {subnet}", 1))
    state = tmp_path / "state"

    result = gridloop(
        "local", "up", "--fleet", str(bad), "--state-dir", str(state), "--base-port", "27800"
    )

    assert result.returncode == 2
    line = _one_error_line(result.stderr)
    assert "containerNodes.podSubnet" in line and "overlaps the host's network" in line
    assert not (state / "state.json").exists()


def test_container_nodes_without_buildah_are_refused_before_anything_starts(tmp_path, gridloop):
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(GOOD)
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("ip", "umount", "iptables"):  # everything but buildah
        found = shutil.which(tool)
        if found:
            (tools / tool).symlink_to(found)
    env = {**os.environ, "PATH": str(tools)}
    state = tmp_path / "state"

    result = gridloop(
        "local",
        "up",
        "--fleet",
        str(fleet),
        "--state-dir",
        str(state),
        "--base-port",
        "27800",
        env=env,
    )

    assert result.returncode == 2
    line = _one_error_line(result.stderr)
    assert "`buildah` not found on PATH" in line and "apt-get install buildah" in line
    assert not (state / "state.json").exists()

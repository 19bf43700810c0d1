"""`gridloop local up|down|status|env`, driven through the CLI as a user would."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import registry_images
from kubernetes import client

from gridloop import kube
from gridloop.local import cluster, processes
from gridloop.local.addons import object_store
from gridloop.local.build.images import locked_images, table
from gridloop.local.ports import Ports

pytestmark = pytest.mark.cluster

SMALL_FLEET = """\
apiVersion: gridloop.io/v1alpha1
kind: Fleet
metadata: {name: tiny}
sites:
- name: lab
  type: on-prem
  region: on-prem-lab
  zones: [rack-a]
  pools:
  - {name: l4, gpu: L4, nodes: 2, gpusPerNode: 4}
"""


def _running(pid: int) -> bool:
    """True while the process exists and has not exited (an exited child awaiting its
    parent's reap shows as state Z: it holds no port and runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _state_json(state_dir: Path) -> dict:
    return json.loads((state_dir / "state.json").read_text())


def test_up_on_a_running_cluster_reports_it_and_changes_nothing_but_new_images(
    local_cluster, gridloop
):
    state_dir = local_cluster.state.dir
    before = (state_dir / "state.json").read_text()
    # Under `make test` the heavy images build beside the tests (tests/suite.py): one may be
    # built since the cluster started, and then it is new. Nothing else may be pushed.
    port = local_cluster.state.ports.registry
    heavy = {image.ref() for image in locked_images.IMAGES}
    new = {ref for ref in heavy if not registry_images.holds(port, ref)}

    result = gridloop(
        "local",
        "up",
        "--state-dir",
        str(state_dir),
        "--base-port",
        str(local_cluster.state.base_port),
    )

    assert result.returncode == 0, result.stderr
    assert "already running" in result.stdout
    [images] = [x for x in result.stdout.splitlines() if x.startswith("images: ")]
    if "already holds every built image" not in images:
        assert images.startswith(
            f"images: pushed to the local cluster's registry (127.0.0.1:{port}): "
        )
        assert set(images.split(": ", 2)[2].split(", ")) <= new, images
    assert (state_dir / "state.json").read_text() == before
    assert all(processes.alive(p) for p in local_cluster.state.processes)


def test_an_image_the_registry_lacks_is_pushed_by_a_build_while_the_cluster_runs(
    local_cluster, gridloop
):
    """The README's path: `make demo` starts the cluster, then `gridloop local build
    vllm-cpu` builds an image it did not have. Here busybox is taken out of the running
    cluster's registry (as if built after `up`), and a build puts it back there."""
    port = local_cluster.state.ports.registry
    ref = table.busybox_ref()
    registry_images.forget(port, ref)
    try:
        built = gridloop("local", "build", "images", "--state-dir", str(local_cluster.state.dir))

        assert built.returncode == 0, built.stderr
        [line] = [x for x in built.stdout.splitlines() if x.startswith("images: pushed to")]
        assert line.startswith(f"images: pushed to the local cluster's registry (127.0.0.1:{port})")
        assert ref in line
        assert registry_images.holds(port, ref)
    finally:
        cluster.push_new_images(local_cluster.state.dir)  # never leave the registry without it


def test_status_shows_every_process_running_and_the_nodes_ready(local_cluster, gridloop):
    result = gridloop("local", "status", "--state-dir", str(local_cluster.state.dir), "-o", "json")

    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["running"] is True
    assert [p["name"] for p in info["processes"]] == [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
        "registry",
        "object-store",
        "containerd/system-000",
        "kubelet/system-000",
        "kube-proxy",
        "kube-network-policies",
        "dcgm-sim",
        "prometheus",
    ]
    assert info["nodes"] == {"ready": 24, "total": 24, "expected": 24}
    assert [(n["name"], n["ready"]) for n in info["container_nodes"]] == [("system-000", True)]
    assert info["state_dir"] == str(local_cluster.state.dir)


def test_env_lets_kubectl_and_helm_reach_the_cluster(local_cluster, gridloop):
    state_dir = local_cluster.state.dir
    script = (
        f'eval "$({gridloop_path()} local env --state-dir {state_dir})"; '
        "kubectl get nodes -o name | wc -l; helm list -A -o json"
    )
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    out = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=env, check=True
    ).stdout.split("\n")
    assert out[0].strip() == "25"  # the 24 simulated GPU nodes and the container node
    assert json.loads(out[1]) == []


def test_env_gives_s3_clients_the_object_stores_endpoint_and_keys(local_cluster, gridloop):
    import boto3

    result = gridloop("local", "env", "--state-dir", str(local_cluster.state.dir))
    exported = dict(
        line.removeprefix("export ").split("=", 1)
        for line in result.stdout.splitlines()
        if line.startswith("export AWS_")
    )
    assert exported["AWS_ENDPOINT_URL"] == (
        f"http://127.0.0.1:{local_cluster.state.ports.object_store}"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    script = f'eval "$({gridloop_path()} local env --state-dir {local_cluster.state.dir})"; env'
    shell = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env)
    keys = dict(line.split("=", 1) for line in shell.stdout.splitlines() if line.startswith("AWS_"))
    s3 = boto3.session.Session(
        aws_access_key_id=keys["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=keys["AWS_SECRET_ACCESS_KEY"],
        region_name=keys["AWS_DEFAULT_REGION"],
    ).client("s3", endpoint_url=keys["AWS_ENDPOINT_URL"])
    # model weights, what training jobs write (examples/training), the loop's trajectories:
    # the host role's key reaches each (the buckets are the root's: versitygw lists a user
    # only the buckets it owns, so list_buckets is empty for it)
    for bucket in ("checkpoints", "loop", "models"):
        assert s3.head_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] == 200
    # and it is not the store's root key
    assert keys["AWS_ACCESS_KEY_ID"] != object_store.keys(local_cluster.state.dir).access_key


def gridloop_path() -> str:
    return str(Path(sys.executable).parent / "gridloop")


def test_port_in_use_fails_in_one_line_and_starts_nothing(tmp_path, gridloop):
    base = 27600
    busy = Ports.from_base(base).apiserver
    state_dir = tmp_path / "state"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", busy))
        holder.listen()
        result = gridloop("local", "up", "--state-dir", str(state_dir), "--base-port", str(base))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"error: port {busy} on 127.0.0.1 (for kube-apiserver) is already in use: "
        "stop what holds it or choose other ports with --base-port"
    ]
    assert not (state_dir / "state.json").exists()
    assert not any(
        processes.listening(p) for p in Ports.from_base(base).by_process().values() if p != busy
    )


def test_down_stops_every_process_and_frees_every_port(tmp_path, gridloop):
    fleet = tmp_path / "tiny.yaml"
    fleet.write_text(SMALL_FLEET)
    state_dir = tmp_path / "state"
    ports = Ports.from_base(27700)

    up = gridloop(
        "local", "up", "--fleet", str(fleet), "--state-dir", str(state_dir), "--base-port", "27700"
    )
    assert up.returncode == 0, up.stderr
    pids = [p["pid"] for p in _state_json(state_dir)["processes"]]
    assert len(pids) == 9 and all(_running(pid) for pid in pids)
    # `up` returns once Prometheus has scraped an exporter: GPU health is there at once
    at_once = gridloop("status", "--once", "--kubeconfig", str(state_dir / "kubeconfig"))
    assert at_once.returncode == 0, at_once.stdout + at_once.stderr
    assert "STALE" not in at_once.stdout

    down = gridloop("local", "down", "--state-dir", str(state_dir))

    assert down.returncode == 0, down.stderr
    assert (
        "stopped: gridloop-health, agent-sandbox, prometheus, dcgm-sim, kwok, kube-scheduler, "
        "kube-controller-manager, kube-apiserver, etcd" in down.stdout
    )
    assert not [pid for pid in pids if _running(pid)]
    assert not [p for p in ports.by_process().values() if processes.listening(p)]
    status = gridloop("local", "status", "--state-dir", str(state_dir))
    assert status.returncode == 3 and "stopped" in status.stdout

    purge = gridloop("local", "down", "--purge", "--state-dir", str(state_dir))
    assert purge.returncode == 0 and not state_dir.exists()


def test_down_then_up_keeps_what_the_user_created(tmp_path, gridloop):
    fleet = tmp_path / "tiny.yaml"
    fleet.write_text(SMALL_FLEET)
    state_dir = tmp_path / "state"
    args = ("--fleet", str(fleet), "--state-dir", str(state_dir), "--base-port", "27700")
    assert gridloop("local", "up", *args).returncode == 0
    try:
        api = kube.api_client(state_dir / "kubeconfig")
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": "keep-me"}})
        core.create_namespaced_config_map(
            "keep-me", {"metadata": {"name": "notes"}, "data": {"a": "1"}}
        )
        assert gridloop("local", "down", "--state-dir", str(state_dir)).returncode == 0

        again = gridloop("local", "up", *args)

        assert again.returncode == 0, again.stderr
        assert "0 created, 0 removed, 2 kept" in again.stdout
        core = client.CoreV1Api(kube.api_client(state_dir / "kubeconfig"))
        assert core.read_namespaced_config_map("notes", "keep-me").data == {"a": "1"}
    finally:
        gridloop("local", "down", "--purge", "--state-dir", str(state_dir))

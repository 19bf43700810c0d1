"""The local cluster's object store: its command line, keys and cluster objects."""

from __future__ import annotations

import stat

from gridloop.local.addons import object_store, store_access
from gridloop.local.ports import Ports
from gridloop.names import DEFAULT_NAMESPACE


def test_the_keys_are_made_once_kept_private_and_never_on_the_command_line(tmp_path):
    first = object_store.keys(tmp_path)
    assert object_store.keys(tmp_path) == first
    path = tmp_path / "object-store" / "credentials.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    argv = object_store.argv(tmp_path / "versitygw", 26422, tmp_path / "data", True)
    assert first.access_key not in " ".join(argv) and first.secret_key not in " ".join(argv)
    assert object_store.env(tmp_path) == {
        "ROOT_ACCESS_KEY_ID": first.access_key,
        "ROOT_SECRET_ACCESS_KEY": first.secret_key,
    }


def test_it_listens_on_loopback_unless_pods_must_reach_it(tmp_path):
    alone = object_store.argv(tmp_path / "vgw", 26422, tmp_path, every_address=False)
    nodes = object_store.argv(tmp_path / "vgw", 26422, tmp_path, every_address=True)
    assert alone[alone.index("--port") + 1] == "127.0.0.1:26422"
    assert nodes[nodes.index("--port") + 1] == "0.0.0.0:26422"
    assert nodes[-2:] == ["posix", str(tmp_path)]


def test_the_secret_lands_where_the_chart_installs_and_holds_what_the_streamer_reads(tmp_path):
    docs = object_store.cluster_objects("10.244.0.1", 26422, DEFAULT_NAMESPACE, tmp_path)
    secret = next(d for d in docs if d["kind"] == "Secret")
    assert secret["metadata"] == {
        "name": "models-s3",
        "namespace": "gridloop-system",
        "labels": object_store.LABELS,
    }
    assert set(secret["stringData"]) == {
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_DEFAULT_REGION",
    }
    # the model servers' own key, never the store's root one
    serving = object_store.role_keys(tmp_path, store_access.serving())
    assert secret["stringData"]["AWS_SECRET_ACCESS_KEY"] == serving.secret_key
    assert object_store.keys(tmp_path).secret_key not in secret["stringData"].values()
    slice_ = next(d for d in docs if d["kind"] == "EndpointSlice")
    assert slice_["endpoints"][0]["addresses"] == ["10.244.0.1"]
    assert slice_["ports"][0]["port"] == 26422
    service = next(d for d in docs if d["kind"] == "Service")
    assert service["spec"]["ports"][0]["port"] == object_store.SERVICE_PORT
    assert object_store.cluster_url() == "http://object-store.object-store.svc.cluster.local:9000"


def test_its_port_is_one_of_the_cluster_ports_and_named():
    ports = Ports.from_base(26400)
    assert ports.object_store == 26422
    assert ports.by_process()["object-store"] == 26422
    assert len(set(ports.by_process().values())) == len(ports.by_process())


def test_each_role_has_keys_of_its_own_kept_private_and_the_host_gets_no_root_key(tmp_path):
    root = object_store.keys(tmp_path)
    serving = object_store.role_keys(tmp_path, store_access.serving())
    host = object_store.role_keys(tmp_path, store_access.host())
    run = object_store.role_keys(tmp_path, store_access.training("demo", "tiny/"))
    assert len({root, serving, host, run}) == 4
    assert object_store.role_keys(tmp_path, store_access.serving()) == serving  # kept
    path = tmp_path / "object-store" / "access.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    exported = object_store.shell_env(tmp_path, 26422)
    assert exported["AWS_ACCESS_KEY_ID"] == host.access_key
    assert root.secret_key not in exported.values()


def test_a_runs_next_iteration_keeps_its_keys_and_its_rights_follow(tmp_path):
    first = object_store.role_keys(tmp_path, store_access.training("demo", "tiny/", "demo-1"))
    again = object_store.role_keys(tmp_path, store_access.training("demo", "tiny/", "demo-2"))
    assert again == first
    roles = {role.name: role for _, role in object_store.accounts(tmp_path)}
    assert set(roles) == {"host", "serving", "training/demo"}
    assert store_access.model_of(roles["training/demo"]) == ("tiny/", "demo-2")


def test_the_store_keeps_its_users_beside_its_data_and_never_on_the_command_line(tmp_path):
    argv = object_store.argv(tmp_path / "vgw", 26422, object_store.data(tmp_path), True)
    assert argv[argv.index("--iam-dir") + 1] == str(object_store.iam_dir(tmp_path))
    object_store.prepare(tmp_path)
    assert stat.S_IMODE(object_store.iam_dir(tmp_path).stat().st_mode) == 0o700

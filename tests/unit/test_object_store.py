"""The local cluster's object store: its command line, keys and cluster objects."""

from __future__ import annotations

import stat

from gridloop.local.addons import object_store
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
    assert secret["stringData"]["AWS_SECRET_ACCESS_KEY"] == object_store.keys(tmp_path).secret_key
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

"""The simulated exporters over HTTP: each node's metrics, and faults picked up from the file.

The server runs in a thread on 127.0.0.1. Its port is picked at random from TEST_PORTS:
below the kernel's ephemeral range (32768-60999, where any outgoing connection may hold a
port), and apart from the ports a local cluster uses (26400-26443 by default) and those
the cluster tests start theirs on (27400-28943); a port some other server holds is
skipped for the next.
"""

from __future__ import annotations

import json
import random
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gridloop.errors import UsageError
from gridloop.sim.faults import FaultSet
from gridloop.sim.injections import Injection
from gridloop.sim.label_shapes import LabelShape, pod_name
from gridloop.sim.server import CONTENT_TYPE, SimServer, make_server
from gridloop.sim.storing import update_faults

FLEET = """\
apiVersion: gridloop.io/v1alpha1
kind: Fleet
metadata: {name: test}
sites:
  - name: us-east
    type: cloud
    region: us-east-1
    zones: [us-east-1a]
    pools:
      - {name: h100, gpu: H100-80GB, nodes: 2, gpusPerNode: 8}
      - {name: l4, gpu: L4, nodes: 1, gpusPerNode: 4}
"""
NODES = ["us-east-h100-000", "us-east-h100-001", "us-east-l4-000"]
GPUS = {"us-east-h100-000": 8, "us-east-h100-001": 8, "us-east-l4-000": 4}
TEST_PORTS = range(29100, 29900)


@dataclass
class Running:
    server: SimServer
    faults_path: Path

    def get(self, path: str) -> tuple[int, str, str]:
        url = f"http://127.0.0.1:{self.server.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status, response.headers["Content-Type"], response.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.headers["Content-Type"], err.read().decode()

    def inject(self, **kwargs: Any) -> None:
        injection = Injection(**kwargs)
        update_faults(self.faults_path, lambda f: f.inject(GPUS, injection, 0.0))


def start(fleet: Path, faults: Path, shape: LabelShape = LabelShape.LEGACY) -> SimServer:
    for port in random.sample(TEST_PORTS, 20):
        try:
            return make_server(fleet, faults, port, shape=shape)
        except UsageError:
            continue  # busy: another test run holds it
    raise RuntimeError(f"no free port in {TEST_PORTS}")


@pytest.fixture
def running(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Running]:
    """A server in the default label shape, or in the one a test passes (indirect=True)."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET)
    faults = tmp_path / "sim" / "faults.json"
    shape = getattr(request, "param", LabelShape.LEGACY)
    server = start(fleet, faults, shape)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield Running(server, faults)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def xid_of(body: str, gpu: str) -> str:
    prefix = f'DCGM_FI_DEV_XID_ERRORS{{gpu="{gpu}",'
    return next(line.rsplit(" ", 1)[1] for line in body.splitlines() if line.startswith(prefix))


def test_a_node_serves_its_gpus_in_the_prometheus_text_format(running: Running) -> None:
    status, ctype, body = running.get("/nodes/us-east-l4-000/metrics")

    assert status == 200
    assert ctype == CONTENT_TYPE
    assert body.startswith("# HELP DCGM_FI_DEV_SM_CLOCK ")
    assert {xid_of(body, str(i)) for i in range(4)} == {"0"}
    assert 'modelName="NVIDIA L4"' in body and 'gpu="4"' not in body


def test_an_injected_fault_shows_on_the_next_scrape(running: Running) -> None:
    running.get("/nodes/us-east-h100-000/metrics")  # the server has read the (absent) file

    running.inject(node="us-east-h100-000", gpu=3, xid=79)
    _, _, body = running.get("/nodes/us-east-h100-000/metrics")

    assert xid_of(body, "3") == "79"
    assert xid_of(body, "2") == "0"


def test_a_cleared_fault_is_gone_on_the_next_scrape(running: Running) -> None:
    running.inject(node="us-east-h100-000", gpu=3, xid=79)
    running.get("/nodes/us-east-h100-000/metrics")

    update_faults(running.faults_path, lambda faults: faults.clear())
    _, _, body = running.get("/nodes/us-east-h100-000/metrics")

    assert xid_of(body, "3") == "0"


def test_exporter_down_answers_503_for_that_node_only(running: Running) -> None:
    running.inject(node="us-east-h100-001", exporter_down=True)

    assert running.get("/nodes/us-east-h100-001/metrics")[0] == 503
    assert running.get("/nodes/us-east-h100-000/metrics")[0] == 200


def test_an_unknown_node_is_404(running: Running) -> None:
    assert running.get("/nodes/nope/metrics")[0] == 404
    assert running.get("/elsewhere")[0] == 404


def test_healthz_and_targets(running: Running) -> None:
    status, _, _ = running.get("/healthz")
    _, ctype, body = running.get("/targets")

    assert status == 200
    assert ctype == "application/json"
    assert json.loads(body) == NODES


def test_a_broken_faults_file_keeps_the_last_good_faults(
    running: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    running.inject(node="us-east-h100-000", gpu=3, xid=79)
    running.get("/nodes/us-east-h100-000/metrics")

    running.faults_path.write_text("{broken")
    status, _, body = running.get("/nodes/us-east-h100-000/metrics")

    assert status == 200
    assert xid_of(body, "3") == "79"
    assert "keeping the previous faults" in capsys.readouterr().err


def test_the_server_listens_on_loopback_only(running: Running) -> None:
    assert running.server.server_address[0] == "127.0.0.1"


def test_a_bad_fleet_file_is_a_usage_error(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET.replace("H100-80GB", "H900"))

    with pytest.raises(UsageError, match="unknown GPU model 'H900'"):
        make_server(fleet, tmp_path / "faults.json", TEST_PORTS[0])


def test_faults_written_while_serving_are_read_back_as_written(running: Running) -> None:
    running.inject(node="us-east-l4-000", gpu=1, temp=99.0)

    faults = FaultSet.from_json(running.faults_path.read_text())

    assert faults[("us-east-l4-000", 1)].temp == 99.0


@pytest.mark.parametrize("running", [LabelShape.PODNAME], indirect=True)
def test_a_server_started_with_a_label_shape_serves_every_node_in_it(running: Running) -> None:
    running.inject(node="us-east-l4-000", gpu=2, xid=48)

    _, _, body = running.get("/nodes/us-east-l4-000/metrics")

    assert f'Hostname="{pod_name("us-east-l4-000")}"' in body
    assert 'Hostname="us-east-l4-000"' not in body
    assert 'err_code="48",err_msg="Double Bit ECC Error"} 48' in body

"""The simulated dcgm-exporters: one HTTP server standing in for every node's exporter.

Prometheus scrapes ``/nodes/<node>/metrics`` as if each were a node's dcgm-exporter
(``/targets`` lists the nodes, to generate its scrape config). The simulated workloads
(``workloads.py``) are served beside them: ``/workloads/vllm/<pod>/metrics`` per vLLM
replica, ``/workloads/agent-sandbox/metrics`` and
``/workloads/kube-state-metrics/metrics``. With ``--kubeconfig`` it also answers
Prometheus's HTTP service discovery at ``/discovery/<job>`` with the chart's pods on the
container nodes (gridloop.sim.pod_discovery). A node with an
``exporter-down`` fault answers 503, so Prometheus records ``up == 0`` for it exactly as
for a crashed exporter. Faults come from the faults file, re-read whenever it changes
(``gridloop sim inject`` replaces it atomically), so injecting needs no second channel.
``--label-shape`` picks which real exporter's host and XID labels the series carry
(``label_shapes.py``); the default is the simulator's old shape.

A thin shell: it binds 127.0.0.1 only, reads two files and the clock, and leaves every
decision about what a GPU reads to ``exposition.render_node``.

    python -m gridloop.sim.server --fleet FLEET.yaml --faults FAULTS.json --port PORT \
        [--label-shape legacy|nodename|lowercase|podname]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import cast

from gridloop.errors import GridloopError, UsageError
from gridloop.fleet import FleetError, PlannedNode, load_fleet, planned_nodes
from gridloop.sim.exposition import render_node
from gridloop.sim.faults import FaultSet
from gridloop.sim.label_shapes import DEFAULT_SHAPE, FLAG, LabelShape, parse_shape, shapes_help
from gridloop.sim.storing import read_faults
from gridloop.sim.workloads import render_agent_sandbox, render_kube_state, render_vllm

HOST = "127.0.0.1"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Simulation:
    """The fleet, and the faults file as last read; safe to share between request threads."""

    def __init__(
        self,
        nodes: Sequence[PlannedNode],
        faults_path: Path,
        started: float,
        shape: LabelShape = DEFAULT_SHAPE,
    ) -> None:
        self.nodes = {node.name: node for node in nodes}
        self.faults_path = faults_path
        self.started = started
        self.shape = shape
        self._faults = FaultSet()
        self._seen: tuple[int, int, int] | None = None
        self._lock = threading.Lock()

    def faults(self) -> FaultSet:
        """The current faults: re-read when the file's identity or mtime changed.

        A bad file keeps the last good faults (and says so once), so a hand edit gone
        wrong does not make every GPU of the fleet look healthy at once.
        """
        with self._lock:
            try:
                st = os.stat(self.faults_path)
                seen = (st.st_ino, st.st_mtime_ns, st.st_size)
            except FileNotFoundError:
                seen = (0, 0, 0)
            if seen != self._seen:
                self._seen = seen
                try:
                    self._faults = read_faults(self.faults_path)
                except UsageError as err:
                    print(f"warning: keeping the previous faults: {err}", file=sys.stderr)
            return self._faults


class SimServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, simulation: Simulation, kubeconfig: Path | None = None) -> None:
        self.simulation = simulation
        self.kubeconfig = kubeconfig
        self._api: object | None = None  # one client for every discovery request
        self._api_lock = threading.Lock()
        super().__init__((HOST, port), _Handler)

    def cluster_api(self) -> object | None:
        """The API client for /discovery (made on first use), or None without --kubeconfig."""
        if self.kubeconfig is None:
            return None
        with self._api_lock:
            if self._api is None:
                from gridloop import kube

                self._api = kube.api_client(self.kubeconfig, pool=4)
            return self._api

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _Handler(BaseHTTPRequestHandler):
    server_version = "gridloop-dcgm-sim/1"

    def do_GET(self) -> None:  # the name http.server dispatches to
        sim = cast(SimServer, self.server).simulation
        path = self.path.split("?", 1)[0]
        parts = path.strip("/").split("/")
        if path == "/healthz":
            self._send(HTTPStatus.OK, "ok\n")
        elif path == "/targets":
            self._send(HTTPStatus.OK, json.dumps(list(sim.nodes)), "application/json")
        elif len(parts) == 3 and parts[0] == "nodes" and parts[2] == "metrics":
            node = sim.nodes.get(parts[1])
            faults = sim.faults()
            if node is None:
                self._send(HTTPStatus.NOT_FOUND, f"no node {parts[1]!r} in the fleet\n")
            elif faults.exporter_down(node.name):
                self._send(HTTPStatus.SERVICE_UNAVAILABLE, "exporter down (injected fault)\n")
            else:
                body = render_node(node, faults, time.time(), sim.started, sim.shape)
                self._send(HTTPStatus.OK, body, CONTENT_TYPE)
        elif parts[0] == "workloads":
            self._workloads(parts[1:], sim.started)
        elif len(parts) == 2 and parts[0] == "discovery":
            self._discovery(parts[1])
        else:
            self._send(HTTPStatus.NOT_FOUND, "try /nodes/<node>/metrics or /targets\n")

    def _workloads(self, parts: list[str], started: float) -> None:
        now = time.time()
        body: str | None = None
        if parts == ["agent-sandbox", "metrics"]:
            body = render_agent_sandbox(now, started)
        elif parts == ["kube-state-metrics", "metrics"]:
            body = render_kube_state(now, started)
        elif len(parts) == 3 and parts[0] == "vllm" and parts[2] == "metrics":
            body = render_vllm(parts[1], now, started)
        if body is None:
            self._send(
                HTTPStatus.NOT_FOUND, f"no simulated workload at /workloads/{'/'.join(parts)}\n"
            )
        else:
            self._send(HTTPStatus.OK, body, CONTENT_TYPE)

    def _discovery(self, name: str) -> None:
        from gridloop.sim import pod_discovery

        job = pod_discovery.JOBS.get(name)
        if job is None or cast(SimServer, self.server).kubeconfig is None:
            self._send(HTTPStatus.NOT_FOUND, f"no discovery for {name!r}\n")
            return
        try:
            groups = pod_discovery.discover(cast(SimServer, self.server).cluster_api(), job)
        except Exception as err:  # Prometheus keeps its last targets on an error
            self._send(HTTPStatus.SERVICE_UNAVAILABLE, f"{err}\n")
            return
        self._send(HTTPStatus.OK, json.dumps(groups), "application/json")

    def _send(self, status: HTTPStatus, body: str, ctype: str = "text/plain") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        """Silent: Prometheus scraping thousands of nodes would flood the log."""


def make_server(
    fleet_path: Path,
    faults_path: Path,
    port: int,
    kubeconfig: Path | None = None,
    shape: LabelShape = DEFAULT_SHAPE,
) -> SimServer:
    """A bound, not yet serving, server; UsageError for a bad fleet or a busy port."""
    try:
        nodes = planned_nodes(load_fleet(fleet_path))
    except FleetError as err:
        raise UsageError(str(err)) from err
    simulation = Simulation(nodes, faults_path, started=time.time(), shape=shape)
    try:
        return SimServer(port, simulation, kubeconfig)
    except OSError as err:
        raise UsageError(f"--port {port}: cannot listen on {HOST}:{port}: {err}") from err


def serve(
    fleet_path: Path,
    faults_path: Path,
    port: int,
    kubeconfig: Path | None = None,
    shape: LabelShape = DEFAULT_SHAPE,
) -> None:
    """Serve until interrupted."""
    server = make_server(fleet_path, faults_path, port, kubeconfig, shape)
    count = len(server.simulation.nodes)
    print(
        f"dcgm simulator: {count} nodes on http://{HOST}:{server.port}/nodes/<node>/metrics"
        f" ({FLAG} {shape.value})",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gridloop.sim.server", description=__doc__)
    parser.add_argument("--fleet", type=Path, required=True, help="the fleet file")
    parser.add_argument("--faults", type=Path, required=True, help="the faults JSON file")
    parser.add_argument("--port", type=int, required=True, help=f"port on {HOST}")
    parser.add_argument(
        "--kubeconfig", type=Path, help="answer /discovery/<job> from this cluster's pods"
    )
    parser.add_argument(FLAG, metavar="SHAPE", help=shapes_help())
    args = parser.parse_args(argv)
    try:
        shape = parse_shape(args.label_shape)
        serve(args.fleet, args.faults, args.port, args.kubeconfig, shape)
    except GridloopError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: the tiny model served through a KAITO Workspace against the chart's own vLLM
Deployment, from the create call to Ready and to the first completion, alternated in one
run; with KAITO's controller's CPU and memory over the run.

Needs a running local cluster (`gridloop local up`) with gridloop's vLLM CPU image
(`gridloop local build vllm-cpu`), KAITO's controller image (`gridloop local build kaito
--mirror DIR`), the chart installed with KAITO on in gridloop-system and the tiny model at
s3://models/tiny/r1/ (docs/kaito.md's walk does all of it):

    .venv/bin/python bench/bench_kaito.py --state-dir ~/.local/state/gridloop [--rounds 3]

Both sides are rendered by `helm template` of the chart from the examples users run:
examples/kaito/workspace-tiny-cpu.yaml (the Workspace) and
examples/inference/tiny-cpu.yaml (the Deployment and its Service), renamed per round.
Timed from the create call: `ready` is the Workspace's InferenceReady condition (KAITO
sets it once its StatefulSet is ready) or the Deployment's available replica; `first
completion` is the first 200 from POST /v1/completions through the side's Service
(KAITO's port 80, the chart's 8000), polled every 0.2 s from the host. Each side's
objects are deleted and their pods gone before the next round; the image is on the node
from an untimed first start. KAITO's CPU and memory are the kubelet's figures for its
container (/stats/summary through the API server): CPU seconds used over the run, and
the highest working set seen (sampled every second).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from gridloop import kube
from gridloop.local.build.building import binary
from gridloop.local.state import load

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "gridloop"
EXAMPLES = {
    "workspace": ROOT / "examples" / "kaito" / "workspace-tiny-cpu.yaml",
    "deployment": ROOT / "examples" / "inference" / "tiny-cpu.yaml",
}
NS = "gridloop-system"
CONTROLLER = "kaito-workspace"
UPSTREAM = ("health", "kueue", "kuberay", "agentSandbox", "kaito")


def rendered(side: str, name: str) -> list[dict[str, Any]]:
    """The chart's objects for the example's model, renamed `name`."""
    out = subprocess.run(
        [
            str(binary("helm")), "template", "bench", str(CHART), "-f", str(EXAMPLES[side]),
            "--namespace", NS, "--set", f"inference.models[0].name={name}",
            *(f"--set={c}.enabled=false" for c in UPSTREAM),
        ],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(out) if d]
    wanted = {"workspace": ("Workspace",), "deployment": ("Deployment", "Service")}[side]
    return [d for d in docs if d["kind"] in wanted and d["metadata"]["name"] == name]


class Bench:
    def __init__(self, state_dir: Path) -> None:
        state = load(state_dir)
        if state is None:
            raise SystemExit(f"--state-dir {state_dir}: no local cluster there")
        self.api = kube.api_client(state.kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.peak_memory = 0
        self.stop = threading.Event()

    # --- KAITO's controller, as the kubelet counts it ---

    def controller(self) -> tuple[str, str]:
        (pod,) = self.core.list_namespaced_pod(
            NS, label_selector="app.kubernetes.io/name=workspace"
        ).items
        return pod.metadata.name, pod.spec.node_name

    def usage(self) -> tuple[float, int]:
        """(CPU seconds, working set bytes) of KAITO's container now."""
        name, node = self.controller()
        summary = kube.get(self.api, f"/api/v1/nodes/{node}/proxy/stats/summary")
        for pod in summary.get("pods", []):
            if pod["podRef"]["name"] == name:
                (c,) = [c for c in pod["containers"] if c["name"] == "workspace"]
                cpu = int(c["cpu"]["usageCoreNanoSeconds"]) / 1e9
                return cpu, int(c["memory"]["workingSetBytes"])
        raise SystemExit(f"the kubelet on {node} does not report {name}")

    def sample_memory(self) -> None:
        while not self.stop.wait(1.0):
            try:
                self.peak_memory = max(self.peak_memory, self.usage()[1])
            except (ApiException, SystemExit):
                continue

    # --- one round of a side ---

    def create(self, side: str, name: str) -> None:
        for doc in rendered(side, name):
            if doc["kind"] == "Workspace":
                self.custom.create_namespaced_custom_object(
                    "kaito.sh", "v1beta1", NS, "workspaces", doc
                )
            elif doc["kind"] == "Deployment":
                self.apps.create_namespaced_deployment(NS, doc)
            else:
                self.core.create_namespaced_service(NS, doc)

    def ready(self, side: str, name: str) -> bool:
        if side == "workspace":
            try:
                ws = self.custom.get_namespaced_custom_object(
                    "kaito.sh", "v1beta1", NS, "workspaces", name
                )
            except ApiException:
                return False
            conditions = (ws.get("status") or {}).get("conditions") or []
            return any(c["type"] == "InferenceReady" and c["status"] == "True" for c in conditions)
        dep = self.apps.read_namespaced_deployment(name, NS)
        return bool(dep.status.available_replicas)

    def url(self, side: str, name: str) -> str:
        svc = self.core.read_namespaced_service(name, NS)
        port = 80 if side == "workspace" else 8000
        return f"http://{svc.spec.cluster_ip}:{port}/v1/completions"

    def answered(self, url: str, name: str) -> bool:
        body = json.dumps({"model": name, "prompt": "Hello", "max_tokens": 4}).encode()
        request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def delete(self, side: str, name: str) -> None:
        if side == "workspace":
            self.custom.delete_namespaced_custom_object(
                "kaito.sh", "v1beta1", NS, "workspaces", name
            )
        else:
            self.apps.delete_namespaced_deployment(name, NS, grace_period_seconds=0)
            self.core.delete_namespaced_service(name, NS)
        selector = f"gridloop.io/model={name}"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            pods = self.core.list_namespaced_pod(NS, label_selector=selector).items
            gone = not pods
            if side == "workspace":
                try:
                    self.custom.get_namespaced_custom_object(
                        "kaito.sh", "v1beta1", NS, "workspaces", name
                    )
                    gone = False
                except ApiException as err:
                    if err.status != 404:
                        raise
            if gone:
                return
            time.sleep(0.5)
        raise SystemExit(f"{side} {name}: still there 300 s after its delete")

    def round(self, side: str, timeout: float = 900) -> dict[str, float]:
        name = f"bench-{side[:3]}-{uuid.uuid4().hex[:5]}"
        t0 = time.monotonic()
        self.create(side, name)
        try:
            ready: float | None = None
            first: float | None = None
            while ready is None or first is None:
                now = time.monotonic() - t0
                if now > timeout:
                    raise SystemExit(f"{side} {name}: no completion after {timeout:.0f} s")
                if ready is None and self.ready(side, name):
                    ready = now
                if ready is not None and self.answered(self.url(side, name), name):
                    first = time.monotonic() - t0
                time.sleep(0.2)
            return {"ready_s": round(ready, 2), "first_completion_s": round(first, 2)}
        finally:
            self.delete(side, name)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--state-dir", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", type=Path, help="write the results here too")
    args = p.parse_args()
    bench = Bench(args.state_dir)
    print("warming: one untimed round of each side (the image onto the node)", flush=True)
    for side in EXAMPLES:
        bench.round(side)
    cpu0, _ = bench.usage()
    sampler = threading.Thread(target=bench.sample_memory, daemon=True)
    sampler.start()
    t0 = time.monotonic()
    results: dict[str, list[dict[str, float]]] = {side: [] for side in EXAMPLES}
    for n in range(args.rounds):
        for side in EXAMPLES:  # alternated: workspace, deployment, workspace, ...
            got = bench.round(side)
            results[side].append(got)
            print(f"round {n + 1} {side:<10} {json.dumps(got)}", flush=True)
    elapsed = time.monotonic() - t0
    bench.stop.set()
    cpu1, memory = bench.usage()
    summary = {
        side: {
            key: round(statistics.median(r[key] for r in rounds), 2)
            for key in ("ready_s", "first_completion_s")
        }
        for side, rounds in results.items()
    }
    controller = {
        "cpu_seconds": round(cpu1 - cpu0, 2),
        "cores": round((cpu1 - cpu0) / elapsed, 4),
        "peak_working_set_mib": round(max(bench.peak_memory, memory) / 2**20, 1),
        "over_seconds": round(elapsed, 1),
    }
    report = {
        "machine": f"{platform.node()} {platform.machine()}",
        "rounds": results,
        "medians": summary,
        "kaito_controller": controller,
    }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()

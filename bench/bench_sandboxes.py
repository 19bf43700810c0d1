"""Benchmark: agent sandboxes on the local cluster's container node, side by side in one run.

Needs a running local cluster with the chart installed with the local profile
(`gridloop local up`, then `gridloop install --profile local`). The client is
k8s-agent-sandbox 1.0.8's SandboxClient as the loop drives it (gridloop's ClaimedSandbox:
the client claims, the token issuer's token for the claim goes with every request to the
authenticated router), given the router Service's address (the host reaches ClusterIPs
through kube-proxy), so the figures are the platform's and not
`kubectl port-forward`'s (the client's developer mode adds its own start and a fixed
0.5 s wait to each claim).

1. Claim to the first command's output, with a warm pool (one sandbox kept ready; the
   pool is refilled between claims, untimed) against an empty pool (replicas 0: every
   claim starts a gVisor sandbox from nothing). Blocks of `--block` claims alternate
   A B A B until each side has `--claims`.
2. The same command in the same runtime image under gVisor and under runc (plain pods
   in a namespace with no policy, driven from the host through the runtime's API),
   alternating request by request.
3. Density: the warm pool raised to each of `--density` sizes; how long the node takes
   to make them Ready, the memory the kernel charges each idle sandbox (its pod cgroup's
   memory.usage_in_bytes: gVisor's sentry and gofer, the runtime, its tmpfs), and warm
   claims' latency at that density. The same runtime under runc is the memory baseline.

The SandboxWarmPool's replicas are restored at the end.

    .venv/bin/python bench/bench_sandboxes.py --state-dir /tmp/tstate [--claims 50]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client

from gridloop import kube
from gridloop.fleet import CONTAINER_NODE_LABEL
from gridloop.local.build.images import python_images
from gridloop.local.state import load

NS = "agents"
ROUTER_NS = "sandbox-router"  # the chart's agentSandbox.router.namespace
POOL = "default"  # the chart's SandboxWarmPool (named as its template)
EXTENSIONS = ("extensions.agents.x-k8s.io", "v1beta1")
POOL_LABEL = "agents.x-k8s.io/warm-pool-sandbox"  # on a pool's sandboxes until claimed
CGROUP_MEMORY = Path("/sys/fs/cgroup/memory")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    rank = max(1, round(p / 100 * len(ordered) + 0.5))  # nearest rank
    return ordered[min(rank, len(ordered)) - 1]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": round(statistics.median(values), 4),
        "p99": round(percentile(values, 99), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


class Bench:
    def __init__(self, state_dir: Path) -> None:
        state = load(state_dir)
        if state is None:
            raise SystemExit(f"--state-dir {state_dir}: no local cluster there")
        self.kubeconfig = state.kubeconfig
        os.environ["KUBECONFIG"] = str(self.kubeconfig)
        from kubernetes.config import kube_config

        kube_config.KUBE_CONFIG_DEFAULT_LOCATION = str(self.kubeconfig)  # the client's
        api = kube.api_client(self.kubeconfig)
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        router = self.core.read_namespaced_service("sandbox-router-svc", ROUTER_NS)
        self.api_url = f"http://{router.spec.cluster_ip}:8080"

    # --- the warm pool ---

    def replicas(self) -> int:
        pool = self.custom.get_namespaced_custom_object(*EXTENSIONS, NS, "sandboxwarmpools", POOL)
        return int(pool["spec"]["replicas"])

    def set_replicas(self, n: int) -> None:
        self.custom.patch_namespaced_custom_object(
            *EXTENSIONS, NS, "sandboxwarmpools", POOL, {"spec": {"replicas": n}}
        )

    def warm(self) -> list[client.V1Pod]:
        pods = self.core.list_namespaced_pod(NS, label_selector=POOL_LABEL).items
        return [p for p in pods if p.metadata.deletion_timestamp is None and _ready(p)]

    def wait_warm(self, n: int, timeout: float = 300) -> float | None:
        """Seconds until exactly `n` warm sandboxes are Ready (None: not in time)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            pods = self.core.list_namespaced_pod(NS, label_selector=POOL_LABEL).items
            live = [p for p in pods if p.metadata.deletion_timestamp is None]
            if len(live) == n and all(_ready(p) for p in live):
                return time.monotonic() - t0
            time.sleep(0.2)
        return None

    # --- claims ---

    def claim_once(self) -> tuple[float, float]:
        """(seconds to the claim's sandbox being usable, to the first command's output)."""
        from gridloop.sandboxes.claiming import ClaimedSandbox

        t0 = time.monotonic()
        # as the loop claims: the client's claim, the issuer's token, the router with it
        with ClaimedSandbox(self.api_url, POOL, NS, 180, self.core) as sandbox:
            claimed = time.monotonic() - t0
            out = sandbox.run("echo ready")
            first = time.monotonic() - t0
            assert out.stdout == "ready\n", out
        return claimed, first

    def claims(self, total: int, block: int, say: Callable[[str], None]) -> dict[str, Any]:
        original = self.replicas()
        got: dict[str, dict[str, list[float]]] = {
            side: {"claim": [], "first_output": []} for side in ("warm", "cold")
        }
        try:
            while min(len(v["first_output"]) for v in got.values()) < total:
                for side in ("warm", "cold"):
                    self.set_replicas(1 if side == "warm" else 0)
                    self.wait_warm(1 if side == "warm" else 0)
                    for _ in range(min(block, total - len(got[side]["first_output"]))):
                        claimed, first = self.claim_once()
                        got[side]["claim"].append(claimed)
                        got[side]["first_output"].append(first)
                        if side == "warm":
                            self.wait_warm(1)  # the refill is not timed
                    say(f"  {side}: {len(got[side]['first_output'])} claims")
        finally:
            self.set_replicas(original)
        return {side: {k: summary(v) for k, v in d.items()} for side, d in got.items()}

    # --- gVisor against runc, the same image and command ---

    def control_pods(self) -> tuple[str, dict[str, client.V1Pod]]:
        name = f"bench-sandboxes-{uuid.uuid4().hex[:5]}"
        self.core.create_namespace({"metadata": {"name": name}})
        image = python_images.by_name(python_images.RUNTIME).ref
        for runtime in ("gvisor", "runc"):
            spec: dict[str, Any] = {
                "nodeSelector": {CONTAINER_NODE_LABEL: "true"},
                "automountServiceAccountToken": False,
                "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
                "containers": [
                    {
                        "name": "sandbox",
                        "image": image,
                        "readinessProbe": {
                            "httpGet": {"path": "/", "port": 8888},
                            "periodSeconds": 1,
                        },
                        "securityContext": {
                            "allowPrivilegeEscalation": False,
                            "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]},
                        },
                        "volumeMounts": [
                            {"name": "app", "mountPath": "/app"},
                            {"name": "tmp", "mountPath": "/tmp"},
                        ],
                    }
                ],
                "volumes": [
                    {"name": "app", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
                    {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
                ],
            }
            if runtime == "gvisor":
                spec["runtimeClassName"] = "gvisor"
            self.core.create_namespaced_pod(name, {"metadata": {"name": runtime}, "spec": spec})
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            pods = {r: self.core.read_namespaced_pod(r, name) for r in ("gvisor", "runc")}
            if all(_ready(p) for p in pods.values()):
                return name, pods
            time.sleep(0.5)
        raise SystemExit("the gVisor and runc control pods did not become Ready")

    def command_latency(
        self, pods: dict[str, client.V1Pod], n: int, commands: tuple[str, ...]
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for command in commands:
            times: dict[str, list[float]] = {"gvisor": [], "runc": []}
            for _ in range(n):
                for runtime, pod in pods.items():
                    times[runtime].append(_execute(pod.status.pod_ip, command))
            out[command] = {r: summary(t) for r, t in times.items()}
            out[command]["ratio_p50"] = round(
                out[command]["gvisor"]["p50"] / out[command]["runc"]["p50"], 2
            )
        return out

    # --- density ---

    def density(
        self, levels: list[int], claims_each: int, say: Callable[[str], None]
    ) -> list[dict[str, Any]]:
        original = self.replicas()
        rows = []
        try:
            for level in levels:
                self.set_replicas(level)
                took = self.wait_warm(level, timeout=300)
                if took is None:
                    have = len(self.warm())
                    rows.append({"sandboxes": level, "ready": have, "fill_seconds": None})
                    say(f"  {level}: only {have} Ready after 300 s: the node holds no more")
                    break
                memory = [pod_memory(p) for p in self.warm()]
                latencies = []
                for _ in range(claims_each):
                    latencies.append(self.claim_once()[1])
                    self.wait_warm(level)
                rows.append(
                    {
                        "sandboxes": level,
                        "ready": level,
                        "fill_seconds": round(took, 2),
                        "memory_mib_per_sandbox": round(statistics.mean(memory) / 2**20, 1),
                        "memory_mib_total": round(sum(memory) / 2**20, 1),
                        "claim_to_first_output": summary(latencies),
                    }
                )
                say(f"  {level}: {rows[-1]}")
        finally:
            self.set_replicas(original)
        return rows


def _ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _execute(ip: str, command: str) -> float:
    request = urllib.request.Request(
        f"http://{ip}:8888/execute",
        data=json.dumps({"command": command}).encode(),
        headers={"content-type": "application/json"},
    )
    t0 = time.monotonic()
    with urllib.request.urlopen(request, timeout=60) as response:
        body = json.loads(response.read())
    took = time.monotonic() - t0
    assert body["exit_code"] == 0, body
    return took


def pod_memory(pod: client.V1Pod) -> int:
    """The pod cgroup's memory.usage_in_bytes (cgroup v1, below the kubelet's root)."""
    name = f"pod{pod.metadata.uid}"
    for found in CGROUP_MEMORY.glob(f"gridloop/*/*/kubepods/*/{name}"):
        return int((found / "memory.usage_in_bytes").read_text())
    for found in CGROUP_MEMORY.glob(f"gridloop/*/*/kubepods/{name}"):
        return int((found / "memory.usage_in_bytes").read_text())
    raise SystemExit(f"no memory cgroup for pod {pod.metadata.name} ({name})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--claims", type=int, default=50, help="claims each side")
    parser.add_argument("--block", type=int, default=10, help="claims per block (A B A B)")
    parser.add_argument("--commands", type=int, default=50, help="requests per runtime")
    parser.add_argument("--density", type=int, nargs="*", default=[2, 8, 16, 24])
    parser.add_argument("--density-claims", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    logging.getLogger().setLevel(logging.WARNING)  # the client logs each claim at INFO

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    bench = Bench(args.state_dir)
    result: dict[str, Any] = {
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus",
        "kernel": platform.release(),
    }
    say("claims: warm pool against empty pool")
    result["claims"] = bench.claims(args.claims, args.block, say)
    say("commands: gVisor against runc")
    namespace, pods = bench.control_pods()
    try:
        result["commands"] = bench.command_latency(
            pods, args.commands, ("echo hi", "python3 -c print(1)")
        )
        result["idle_memory_mib"] = {r: round(pod_memory(p) / 2**20, 1) for r, p in pods.items()}
    finally:
        bench.core.delete_namespace(namespace, propagation_policy="Background")
    say("density")
    result["density"] = bench.density(args.density, args.density_claims, say)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

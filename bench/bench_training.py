"""Benchmark: training jobs on the local cluster, side by side in one run.

Needs a running local cluster with the chart installed with the local profile
(`gridloop local up`, `gridloop install --profile local`) and the Ray image built
(`gridloop local build ray`, pushed by `up`), and the example run's store keys in
team-default as the Secret train-tiny-s3 (`gridloop local store-key`, docs/training.md).
Everything is real but the GPU nodes, which part 2 does not use.

1. The example RayJob (examples/training/rayjob.yaml), `--rounds` times: from its create
   to Kueue's admission, to all of its pods (head, worker, submitter) Running on the
   container node, and to the driver's success; the first round says whether the node
   had the Ray image already (its pull is in that round's figures).
2. Admission latency, RayJobs against batch Jobs, alternated one by one (A B A B) until
   each side has `--jobs`: from the create call's return to the Workload's Admitted
   condition, in a ClusterQueue of the bench's own over the simulated us-east H100 flavor
   (so the admitted pods are kwok's and cost nothing). Each is deleted once admitted.
   Both kinds ask for the same: one 100m CPU pod per pod set (a RayJob has three: head,
   one worker, the submitter; a batch Job one).

    .venv/bin/python bench/bench_training.py --state-dir /tmp/tstate [--rounds 3] [--jobs 20]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from gridloop import kube
from gridloop.local.state import load

REPO = Path(__file__).resolve().parents[1]
# ray_jobs, and the tests' examples helper it names the example through
sys.path[:0] = [str(REPO / "tests" / "cluster"), str(REPO / "tests")]
import ray_jobs  # noqa: E402

TEAM = ray_jobs.TEAM_NAMESPACE
BENCH_NS = f"bench-training-{os.getpid()}"
QUEUE = "bench-admission"
KUEUE = ray_jobs.KUEUE
SMALL = {"requests": {"cpu": "100m", "memory": "64Mi"}}


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "n": len(values),
        "p50": round(statistics.median(values), 3),
        "p90": round(ordered[min(len(ordered) - 1, round(0.9 * len(ordered) + 0.5) - 1)], 3),
        "min": round(ordered[0], 3),
        "max": round(ordered[-1], 3),
    }


def wait(check, what: str, timeout: float, every: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")


class Bench:
    def __init__(self, state_dir: Path) -> None:
        state = load(state_dir)
        if state is None:
            raise SystemExit(f"--state-dir {state_dir}: no local cluster there")
        self.state = state
        os.environ["KUBECONFIG"] = str(state.kubeconfig)
        self.api = kube.api_client(state.kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    # --- 1: the example, end to end ---

    def node_has_ray_image(self) -> bool:
        node = self.core.read_node("system-000")
        names = [n for image in node.status.images or [] for n in image.names or []]
        return any("rayproject/ray:2.52.0" in n for n in names)

    def example_round(self, index: int) -> dict[str, Any]:
        config_map, job = ray_jobs.example()
        name = f"bench-train-{index}"
        job = ray_jobs.renamed(job, name)
        ray_jobs.run_keys(self.api, self.state.dir, self.state.ports.object_store, TEAM, name)
        ray_jobs.apply(self.api, TEAM, config_map)
        had_image = self.node_has_ray_image()
        t0 = time.monotonic()
        ray_jobs.apply(self.api, TEAM, job)
        wait(
            lambda: ray_jobs.admitted(self.api, TEAM, "RayJob", name),
            "admission",
            300,
        )
        admitted = time.monotonic() - t0

        def all_running() -> bool:
            pods = ray_jobs.pods_of_rayjob(self.api, TEAM, name)
            kinds = {
                (
                    "head"
                    if "-head-" in p.metadata.name
                    else "worker"
                    if "-cpu-" in p.metadata.name
                    else "submitter"
                )
                for p in pods
                if p.status.phase == "Running"
            }
            return kinds == {"head", "worker", "submitter"}

        wait(all_running, "every pod Running", 900, every=0.2)
        running = time.monotonic() - t0

        def ended() -> str:
            status = ray_jobs.rayjob(self.api, TEAM, name).get("status", {}).get("jobStatus", "")
            return status if status in ("SUCCEEDED", "FAILED") else ""

        status = wait(ended, "the driver to end", 900, every=0.5)
        done = time.monotonic() - t0
        ray_jobs.delete_rayjob(self.api, TEAM, name)
        wait(lambda: not ray_jobs.pods_of_rayjob(self.api, TEAM, name), "its pods gone", 300, 0.5)
        return {
            "round": index,
            "image_on_node_before": had_image,
            "status": status,
            "submit_to_admitted_s": round(admitted, 2),
            "submit_to_all_pods_running_s": round(running, 2),
            "submit_to_succeeded_s": round(done, 2),
        }

    # --- 2: admission latency, RayJobs against batch Jobs ---

    def make_queue(self) -> None:
        try:
            self.core.create_namespace({"metadata": {"name": BENCH_NS}})
        except ApiException as err:
            if err.status != 409:
                raise
        cluster_queue = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": QUEUE},
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": BENCH_NS}},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": "us-east-h100",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "100"},
                                    {"name": "memory", "nominalQuota": "100Gi"},
                                ],
                            }
                        ],
                    }
                ],
            },
        }
        local_queue = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": QUEUE, "namespace": BENCH_NS},
            "spec": {"clusterQueue": QUEUE},
        }
        self.custom.create_cluster_custom_object(*KUEUE, "clusterqueues", cluster_queue)
        self.custom.create_namespaced_custom_object(*KUEUE, BENCH_NS, "localqueues", local_queue)

        def active() -> bool:
            queue = self.custom.get_cluster_custom_object(*KUEUE, "clusterqueues", QUEUE)
            conditions = queue.get("status", {}).get("conditions") or []
            return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)

        wait(active, "the bench's ClusterQueue to be active", 60, 0.2)

    def drop_queue(self) -> None:
        """The queues, then the namespace (not waited for: it goes once its objects have)."""
        for delete in (
            lambda: self.custom.delete_namespaced_custom_object(
                *KUEUE, BENCH_NS, "localqueues", QUEUE
            ),
            lambda: self.custom.delete_cluster_custom_object(*KUEUE, "clusterqueues", QUEUE),
            lambda: self.core.delete_namespace(BENCH_NS),
        ):
            try:
                delete()
            except ApiException as err:
                if err.status != 404:
                    raise

    def small_rayjob(self, name: str) -> dict[str, Any]:
        container = {"name": "ray", "image": "rayproject/ray:2.52.0", "resources": SMALL}
        group = {
            "groupName": "w",
            "replicas": 1,
            "minReplicas": 1,
            "maxReplicas": 1,
            "rayStartParams": {},
            "template": {"spec": {"containers": [container]}},
        }
        return {
            "apiVersion": "ray.io/v1",
            "kind": "RayJob",
            "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
            "spec": {
                "entrypoint": "python -c 'import ray'",
                "shutdownAfterJobFinishes": True,
                "submitterPodTemplate": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{**container, "name": "submitter"}],
                    }
                },
                "rayClusterSpec": {
                    "rayVersion": "2.52.0",
                    "headGroupSpec": {
                        "rayStartParams": {},
                        "template": {"spec": {"containers": [container]}},
                    },
                    "workerGroupSpecs": [group],
                },
            },
        }

    def batch_job(self, name: str) -> dict[str, Any]:
        container = {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": SMALL}
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
        }

    def admit_one(self, kind: str, name: str) -> float:
        if kind == "RayJob":
            doc = self.small_rayjob(name)
            t0 = time.monotonic()
            self.custom.create_namespaced_custom_object(*ray_jobs.RAY, BENCH_NS, "rayjobs", doc)
        else:
            doc = self.batch_job(name)
            t0 = time.monotonic()
            self.batch.create_namespaced_job(BENCH_NS, doc)
        wait(
            lambda: ray_jobs.admitted(self.api, BENCH_NS, kind, name),
            f"{kind} {name} admitted",
            60,
            0.02,
        )
        seconds = time.monotonic() - t0
        if kind == "RayJob":
            ray_jobs.delete_rayjob(self.api, BENCH_NS, name)
        else:
            self.batch.delete_namespaced_job(name, BENCH_NS, propagation_policy="Background")
        return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--json", type=Path, default=None, help="write the results here too")
    args = parser.parse_args()
    bench = Bench(args.state_dir)
    out: dict[str, Any] = {
        "machine": f"{platform.node()} {os.cpu_count()} cores, {platform.machine()}",
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    rounds = [bench.example_round(i) for i in range(args.rounds)]
    out["example"] = rounds
    for r in rounds:
        print(json.dumps(r), flush=True)

    bench.make_queue()
    latency: dict[str, list[float]] = {"RayJob": [], "Job": []}
    try:
        for i in range(args.jobs):
            for kind in ("RayJob", "Job"):  # A B A B
                latency[kind].append(bench.admit_one(kind, f"adm-{kind.lower()}-{i}"))
    finally:
        bench.drop_queue()
    out["admission"] = {kind: summary(values) for kind, values in latency.items()}
    out["admission_ratio_p50"] = round(
        out["admission"]["RayJob"]["p50"] / out["admission"]["Job"]["p50"], 2
    )
    print(json.dumps(out["admission"], indent=1))
    print(f"RayJob/Job admission p50 ratio: {out['admission_ratio_p50']}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: a model server's cold start streaming from S3 with the Run:ai streamer,
against downloading the files first and loading them with vLLM's default loader; and the
streamer's read throughput against a plain parallel S3 read. Side by side in one run.

Needs a running local cluster (`gridloop local up`) and gridloop's vLLM CPU image in its
registry (`gridloop local build vllm-cpu`). The model is `gridloop models make --size
1g` (574,670,848 parameters, 1.07 GiB of float16 safetensors in 5 shards), pushed once to
`s3://models/bench-1g/r1/` in the local object store.

1. Start to Ready. The pod is the chart's own vLLM pod (`helm template` of the chart
   with examples/inference/tiny-cpu.yaml, the model pointed at the 1g folder), created
   in gridloop-system on the container node, where `local up` wrote the store's keys.
   Both probes are polled every second instead of the chart's 10 and 5 (the same for
   both sides), so Ready is not rounded to a probe period. Sides:
   - streamer: the chart's pod as is (`--load-format runai_streamer`, s3://...);
   - download: an init container (the same image) copies the files with boto3 (16
     threads, as the streamer's concurrency) into an emptyDir, then vLLM loads them from
     there with its default safetensors loader;
   - multiproc (only with `--sides`): the chart's pod with VLLM_ENABLE_V1_MULTIPROCESSING=1,
     vLLM's default: the model in a worker process of its own, where the image runs it in
     the engine-core process.
   Timed from the create call to the pod's Ready condition as the API reports it (polled
   every 0.2 s), alternating A B A B after one untimed start (the image onto the node).
   Each side also reports the load itself (from vLLM's "Starting to load model" to the
   end of its progress bar over the weights, by the runtime's log timestamps), the
   default loader's own "Loading weights took", vLLM's engine init and the download's
   share,
   and the memory the pod's cgroup holds once Ready: total_rss of memory.stat (the
   server's resident memory, both processes) and the peak usage (with page cache).
2. Read throughput, in one pod of the same image on the same node: the streamer's own
   Python API (SafetensorsStreamer over the s3:// files, every tensor iterated) against
   boto3 ranged GETs of the same files on 16 threads (8 MiB parts, bytes discarded):
   the store's raw read rate over the pod network, the limit here. Alternating.

    .venv/bin/python bench/bench_model_load.py --state-dir /tmp/tstate [--rounds 3]
    .venv/bin/python bench/bench_model_load.py --state-dir /tmp/tstate --size tiny \
        --sides streamer multiproc --rounds 5 --reads 0
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
import yaml
from botocore.config import Config
from kubernetes import client
from kubernetes.stream import stream

from gridloop import kube
from gridloop.local.addons import object_store, store_access
from gridloop.local.build.building import binary
from gridloop.local.state import load

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "gridloop"
EXAMPLE = ROOT / "examples" / "inference" / "tiny-cpu.yaml"
NS = object_store.RELEASE_NAMESPACE
BUCKET = "models"
CONCURRENCY = 16
CGROUP_MEMORY = Path("/sys/fs/cgroup/memory")
SIDES = ("streamer", "download", "multiproc")
PART = 8 << 20
UPSTREAM = ("health", "kueue", "kuberay", "agentSandbox", "kaito")

# the init container of the download side: every object of the folder to /weights
DOWNLOAD = """
import boto3, concurrent.futures as cf, os, sys, time
bucket, prefix = sys.argv[1], sys.argv[2]
s3 = boto3.client("s3")
keys = [o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for o in p.get("Contents", [])]
t0 = time.monotonic()
def get(key):
    path = os.path.join("/weights", os.path.relpath(key, prefix))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    s3.download_file(bucket, key, path)
    return os.path.getsize(path)
with cf.ThreadPoolExecutor(int(os.environ.get("RUNAI_STREAMER_CONCURRENCY", "16"))) as pool:
    n = sum(pool.map(get, keys))
print(f"downloaded {n} bytes in {time.monotonic() - t0:.2f} s", flush=True)
"""

# in the throughput pod: one round of each reader, as JSON lines
READ = """
import concurrent.futures as cf, json, os, sys, time
import boto3
bucket, prefix, which = sys.argv[1:4]
part, threads = int(sys.argv[4]), int(sys.argv[5])
s3 = boto3.client("s3")
pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
objs = [(o["Key"], o["Size"]) for p in pages for o in p.get("Contents", [])
        if o["Key"].endswith(".safetensors")]
t0 = time.monotonic()
if which == "raw":
    def get(job):
        key, start, end = job
        body = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{end}")["Body"]
        return len(body.read())
    jobs = [(k, s, min(s + part, size) - 1) for k, size in objs for s in range(0, size, part)]
    with cf.ThreadPoolExecutor(threads) as pool:
        n = sum(pool.map(get, jobs))
else:
    from runai_model_streamer import SafetensorsStreamer
    n = 0
    with SafetensorsStreamer() as streamer:
        streamer.stream_files([f"s3://{bucket}/{k}" for k, _ in objs])
        for _name, tensor in streamer.get_tensors():
            n += tensor.numel() * tensor.element_size()
print("bench-read", json.dumps({"reader": which, "bytes": n, "seconds": time.monotonic() - t0}))
"""


def median(values: list[float]) -> float:
    return round(statistics.median(values), 2)


class Bench:
    def __init__(self, state_dir: Path, size: str) -> None:
        state = load(state_dir)
        if state is None:
            raise SystemExit(f"--state-dir {state_dir}: no local cluster there")
        self.state = state
        self.core = client.CoreV1Api(kube.api_client(state.kubeconfig))
        self.size = size
        self.prefix = f"bench-{size}/r1/"
        self.uri = f"s3://{BUCKET}/{self.prefix}"

    # --- the model in the store ---

    def s3(self) -> Any:
        k = object_store.role_keys(self.state.dir, store_access.host())
        return boto3.session.Session().client(
            "s3",
            endpoint_url=object_store.host_url(self.state.ports.object_store),
            aws_access_key_id=k.access_key,
            aws_secret_access_key=k.secret_key,
            region_name=object_store.REGION,
            config=Config(s3={"addressing_style": "path"}),
        )

    def pushed_bytes(self) -> int:
        listed = self.s3().list_objects_v2(Bucket=BUCKET, Prefix=self.prefix)
        return sum(int(o["Size"]) for o in listed.get("Contents", []) if "safetensors" in o["Key"])

    def push(self, say: Any) -> int:
        if n := self.pushed_bytes():
            return n
        work = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gridloop"
        made = work / "bench-models" / f"{self.size}-seed1"
        gridloop = [sys.executable, "-m", "gridloop.cli"]
        if not (made / "config.json").is_file():
            say(f"making the {self.size} model in {made}")
            subprocess.run(
                [*gridloop, "models", "make", str(made), "--size", self.size, "--seed", "1"],
                check=True,
            )
        say(f"pushing it to {self.uri}")
        env = {
            **os.environ,
            **object_store.shell_env(self.state.dir, self.state.ports.object_store),
        }
        subprocess.run([*gridloop, "models", "push", str(made), self.uri], check=True, env=env)
        return self.pushed_bytes()

    # --- pods ---

    def chart_pod(self) -> dict[str, Any]:
        """The chart's vLLM pod template for the example, pointed at the bench model."""
        rendered = subprocess.run(
            [
                str(binary("helm")), "template", "bench", str(CHART), "-f", str(EXAMPLE),
                "--namespace", NS,
                "--set", f"inference.models[0].uri=s3://{BUCKET}/bench-{self.size}",
                "--set", "inference.models[0].revision=r1",
                "--set", "inference.models[0].name=bench",
                # only the model: the upstream controllers are not in the chart's folder
                *(f"--set={c}.enabled=false" for c in UPSTREAM),
            ],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        for doc in yaml.safe_load_all(rendered):
            if (doc or {}).get("kind") == "Deployment" and (
                doc["spec"]["template"]["metadata"].get("labels", {}).get("gridloop.io/model")
            ):
                return dict(doc["spec"]["template"])
        raise SystemExit("the chart rendered no model Deployment")

    def pod(self, side: str) -> dict[str, Any]:
        template = self.chart_pod()
        spec = template["spec"]
        (server,) = spec["containers"]
        for probe in ("startupProbe", "readinessProbe"):
            server[probe]["periodSeconds"] = 1
            server[probe]["failureThreshold"] = 1800 if probe == "startupProbe" else 3
        if side == "multiproc":
            server["env"].append({"name": "VLLM_ENABLE_V1_MULTIPROCESSING", "value": "1"})
        if side == "download":
            args = server["args"]
            assert args[0] == self.uri, args
            at = args.index("--load-format")
            server["args"] = ["/weights", *args[1:at], "--load-format", "safetensors"]
            server["args"] += args[at + 2 :]
            mount = {"name": "weights", "mountPath": "/weights"}
            server["volumeMounts"].append(mount)
            spec["volumes"].append({"name": "weights", "emptyDir": {}})
            spec["initContainers"] = [
                {
                    **{k: v for k, v in server.items() if k in ("image", "env", "envFrom")},
                    "name": "download",
                    "command": ["python3", "-c", DOWNLOAD, BUCKET, self.prefix],
                    "securityContext": server["securityContext"],
                    "volumeMounts": [mount],
                    "resources": server["resources"],
                }
            ]
        spec["restartPolicy"] = "Never"
        name = f"bench-load-{side}-{uuid.uuid4().hex[:5]}"
        labels = {"app.kubernetes.io/name": "bench-model-load"}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": spec,
        }

    def start(self, side: str, timeout: float = 1200) -> dict[str, Any]:
        body = self.pod(side)
        name = body["metadata"]["name"]
        t0 = time.monotonic()
        self.core.create_namespaced_pod(NS, body)
        try:
            while True:
                pod = self.core.read_namespaced_pod(name, NS)
                if any(
                    c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []
                ):
                    ready = time.monotonic() - t0
                    break
                if pod.status.phase in ("Failed", "Succeeded"):
                    raise SystemExit(f"{name} ended ({pod.status.phase}) before Ready")
                if time.monotonic() - t0 > timeout:
                    raise SystemExit(f"{name} not Ready after {timeout:.0f} s")
                time.sleep(0.2)
            log = self.core.read_namespaced_pod_log(name, NS, container="vllm", timestamps=True)
            out: dict[str, Any] = {"ready_s": round(ready, 2), **memory(pod)}
            # the load, the same for both loaders: from vLLM's "Starting to load model"
            # to the end of its progress bar over the weights (the runtime's timestamps
            # of the two log lines; the streamer's loader does not time itself)
            out["load_s"] = _between(log, "Starting to load model", LOADED)
            out["load_weights_s"] = _number_after(log, "Loading weights took")
            out["engine_init_s"] = _seconds(ENGINE_INIT.search(log))
            if side == "download":
                init = self.core.read_namespaced_pod_log(name, NS, container="download")
                out["download_s"] = _number_after(init, "bytes in")
            return out
        finally:
            self.core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
            while self.core.list_namespaced_pod(NS, field_selector=f"metadata.name={name}").items:
                time.sleep(0.5)

    def reader_pod(self) -> str:
        body = self.pod("streamer")
        server = body["spec"]["containers"][0]
        server["command"], server["args"] = ["sleep", "infinity"], []
        for probe in ("startupProbe", "readinessProbe", "lifecycle"):
            server.pop(probe, None)
        body["metadata"]["name"] = name = f"bench-read-{uuid.uuid4().hex[:5]}"
        self.core.create_namespaced_pod(NS, body)
        t0 = time.monotonic()
        while self.core.read_namespaced_pod(name, NS).status.phase != "Running":
            if time.monotonic() - t0 > 300:
                raise SystemExit(f"{name} not Running after 300 s")
            time.sleep(0.5)
        return name

    def read_once(self, pod: str, which: str) -> dict[str, Any]:
        command = ["python3", "-c", READ, BUCKET, self.prefix, which, f"{PART}", f"{CONCURRENCY}"]
        out = stream(
            self.core.connect_get_namespaced_pod_exec, pod, NS, command=command,
            stderr=True, stdout=True, stdin=False, tty=False,
        )  # fmt: skip
        # prefixed: the client turns an exec's output that parses as JSON into a dict
        line = [x for x in str(out).splitlines() if x.startswith("bench-read ")][-1]
        return dict(json.loads(line.removeprefix("bench-read ")))


# the end of either loader's progress bar over the weights
LOADED = ("Loading safetensors using Runai Model Streamer", "Loading safetensors checkpoint shards")
ENGINE_INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([0-9.]+) s")


def _seconds(found: re.Match[str] | None) -> float | None:
    return float(found.group(1)) if found else None


def _between(log: str, start: str, ends: tuple[str, ...]) -> float | None:
    """Seconds from the first log line holding `start` to the last holding one of `ends`,
    by the runtime's RFC 3339 timestamps (`timestamps=True`)."""

    def at(line: str) -> float:
        stamp = line.split(" ", 1)[0]  # 2026-12-02T13:01:02.123456789Z
        whole, _, frac = stamp.rstrip("Z").partition(".")
        return datetime.fromisoformat(whole + "+00:00").timestamp() + float(f"0.{frac or 0}")

    lines = log.split("\n")  # not splitlines(): a progress bar's \r stays in its line
    first = next((at(x) for x in lines if start in x), None)
    last = [at(x) for x in lines if any(e in x for e in ends)]
    return round(last[-1] - first, 2) if first is not None and last else None


def _number_after(text: str, marker: str) -> float | None:
    for line in text.splitlines():
        if marker in line:
            tail = line.split(marker, 1)[1].split()
            if tail:
                try:
                    return float(tail[0])
                except ValueError:
                    return None
    return None


def memory(pod: client.V1Pod) -> dict[str, float]:
    """The pod cgroup's resident memory (memory.stat total_rss) and peak usage, in MiB."""
    name = f"pod{pod.metadata.uid}"
    found = [
        *CGROUP_MEMORY.glob(f"gridloop/*/*/kubepods/*/{name}"),
        *CGROUP_MEMORY.glob(f"gridloop/*/*/kubepods/{name}"),
    ]
    if not found:
        return {}
    stat = dict(line.split() for line in (found[0] / "memory.stat").read_text().splitlines())
    peak = int((found[0] / "memory.max_usage_in_bytes").read_text())
    return {"rss_mib": round(int(stat["total_rss"]) / 2**20), "peak_mib": round(peak / 2**20)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--size", default="1g", choices=("tiny", "1g"))
    parser.add_argument("--rounds", type=int, default=3, help="starts of each side")
    parser.add_argument(
        "--sides", nargs="+", choices=SIDES, default=["streamer", "download"],
        help="the starts to alternate; the first is the one the others are divided by",
    )  # fmt: skip
    parser.add_argument("--reads", type=int, default=3, help="reads of each reader (0: none)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    bench = Bench(args.state_dir, args.size)
    size = bench.push(say)
    result: dict[str, Any] = {
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus",
        "model": f"{bench.uri} ({size} bytes of safetensors)",
    }
    say("an untimed start (the image onto the node)")
    bench.start("streamer")
    starts: dict[str, list[dict[str, Any]]] = {side: [] for side in args.sides}
    for i in range(args.rounds):
        for side in args.sides:
            starts[side].append(got := bench.start(side))
            say(f"round {i + 1} {side}: {got}")
    result["start_to_ready"] = {
        side: {
            "runs": runs,
            **{
                f"median_{k}": median([r[k] for r in runs if r.get(k) is not None])
                for k in runs[0]
                if runs[0].get(k) is not None
            },
        }
        for side, runs in starts.items()
    }
    first, *others = args.sides
    for side in others:
        a, b = (result["start_to_ready"][s]["median_ready_s"] for s in (side, first))
        result[f"{side}_over_{first}"] = round(a / b, 2)
    if args.reads:
        result["read_mib_s"] = read_throughput(bench, args.reads, say)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


def read_throughput(bench: Bench, rounds: int, say: Any) -> dict[str, Any]:
    pod = bench.reader_pod()
    try:
        reads: dict[str, list[float]] = {"streamer": [], "raw": []}
        bench.read_once(pod, "raw")  # untimed: the store's files into its page cache
        for i in range(rounds):
            for which in ("streamer", "raw"):
                got = bench.read_once(pod, which)
                reads[which].append(got["bytes"] / got["seconds"] / 2**20)
                say(f"read {i + 1} {which}: {got}")
        return {w: {"runs": [round(x) for x in r], "median": median(r)} for w, r in reads.items()}
    finally:
        bench.core.delete_namespaced_pod(pod, NS, grace_period_seconds=0)


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark: the umbrella chart's render time per profile, and install-to-ready time.

1. Render: for each profile, `gridloop render` of the bundled chart with the default
   fleet as values (gridloop's own checks of the values and fleet, then `helm
   template`), against the baseline of plain `helm template` of the same chart and
   values, run alternately `--repeat` times each; the median is reported. KAITO and
   the DCGM exporter are off in every profile (not in the bundle).
2. Install: on a local cluster (the default fleet, the real Kueue controller running),
   `gridloop install --profile local -f fleet-values.yaml --wait` from nothing to every
   Deployment ready, against the baseline of plain `helm install --wait` of the same
   bundled chart and values (Helm applying crds/ itself). Each install is uninstalled
   and its namespaces (the kept ones too) deleted before the next; the two alternate,
   `--installs` times each.

The bundle is built as the chart tests build it (`gridloop bundle`, without KAITO and
the DCGM exporter, whose release files cannot be downloaded here).

Usage (binaries built, nothing else running on the machine):

    .venv/bin/python bench/bench_chart.py [--repeat 5] [--installs 2] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from kubernetes import client

from gridloop import kube, versions
from gridloop.bundle import bundling
from gridloop.local import cluster
from gridloop.local.build import building

REPO = Path(__file__).resolve().parents[1]
BASE_PORT = 28900  # below the ephemeral port range; the other benches use 28400, 28500
GRIDLOOP = str(Path(sys.executable).parent / "gridloop")
SKIPPED = frozenset({"kaito", "dcgm-exporter"})
PROFILES = ("local", "minimal", "production")
# what the bundle here lacks is off in every profile (production turns them on)
NOT_BUNDLED = "kaito.enabled=false,dcgmExporter.enabled=false"
RELEASE = NAMESPACE = "gridloop-bench"


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    took = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} failed: {proc.stderr[-800:]}")
    return took


def run_render(chart: Path, values: Path, repeat: int, env: dict[str, str]) -> dict:
    helm = str(building.binary("helm"))
    out: dict[str, dict[str, float]] = {}
    for profile in PROFILES:
        prof = chart / "profiles" / f"{profile}.yaml"
        ours, plain = [], []
        for _ in range(repeat):
            render = [
                GRIDLOOP, "render", "--chart", str(chart), "--profile", profile,
                "-f", str(values), "--set", NOT_BUNDLED,
            ]  # fmt: skip
            template = [
                helm, "template", RELEASE, str(chart), "--namespace", NAMESPACE,
                "-f", str(prof), "-f", str(values), "--set", NOT_BUNDLED,
            ]  # fmt: skip
            ours.append(_timed(render, env))
            plain.append(_timed(template, env))
        out[profile] = {
            "gridloop_render_s": round(statistics.median(ours), 2),
            "helm_template_s": round(statistics.median(plain), 2),
        }
        print(profile, out[profile], flush=True)
    return out


def _clean(api: client.ApiClient, env: dict[str, str]) -> None:
    helm = str(building.binary("helm"))
    subprocess.run(
        [helm, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "3m"],
        capture_output=True,
        env=env,
        check=False,
    )
    core = client.CoreV1Api(api)
    # the team and sandbox namespaces and agent-sandbox's are kept by uninstall
    names = (NAMESPACE, "team-default", "agents", "agent-sandbox-system")
    for name in names:
        try:
            core.delete_namespace(name)
        except client.ApiException as err:
            if err.status != 404:
                raise
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        left = {n.metadata.name for n in core.list_namespace().items} & set(names)
        if not left:
            return
        time.sleep(0.5)
    raise SystemExit(f"namespaces {sorted(left)} not gone after 180 s")


def run_install(work: Path, chart: Path, values: Path, installs: int) -> dict:
    state_dir = work / "state"
    fleet = REPO / "examples" / "fleets" / "default.yaml"
    res = cluster.up(state_dir, fleet, BASE_PORT, say=lambda _m: None, health_service=False)
    env = dict(os.environ, KUBECONFIG=str(res.state.kubeconfig))
    for key in ("CACHE", "CONFIG", "DATA"):
        env[f"HELM_{key}_HOME"] = str(work / "helm" / key.lower())
    api = kube.api_client(res.state.kubeconfig)
    helm = str(building.binary("helm"))
    ours: list[float] = []
    plain: list[float] = []
    try:
        for i in range(installs):
            install = [
                GRIDLOOP, "install", "--chart", str(chart), "--profile", "local",
                "-f", str(values), "--namespace", NAMESPACE, "--release", RELEASE,
                "--wait", "--timeout", "5m", "--kubeconfig", env["KUBECONFIG"],
            ]  # fmt: skip
            helm_install = [
                helm, "install", RELEASE, str(chart), "--namespace", NAMESPACE,
                "--create-namespace", "-f", str(chart / "profiles" / "local.yaml"),
                "-f", str(values), "--wait", "--timeout", "5m",
            ]  # fmt: skip
            ours.append(_timed(install, env))
            _clean(api, env)
            plain.append(_timed(helm_install, env))
            _clean(api, env)
            print(f"install round {i}: gridloop {ours[-1]:.1f}s, helm {plain[-1]:.1f}s", flush=True)
    finally:
        cluster.down(state_dir)
    return {
        "gridloop_install_s": [round(t, 1) for t in ours],
        "helm_install_s": [round(t, 1) for t in plain],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--installs", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results: dict[str, object] = {
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores",
        "helm": versions.get("helm").version,
        "kubernetes": versions.get("kubernetes").version,
    }
    with tempfile.TemporaryDirectory(prefix="gridloop-bench-chart-") as tmp:
        work = Path(tmp)
        bundle = bundling.bundle(bundling.Request(out=work / "dist", skip=SKIPPED))
        fleet = yaml.safe_load((REPO / "examples" / "fleets" / "default.yaml").read_text())
        values = work / "fleet-values.yaml"
        values.write_text(yaml.safe_dump({"fleet": fleet}, sort_keys=False))
        env = dict(os.environ)
        results["render"] = run_render(bundle.folder, values, args.repeat, env)
        if args.installs:
            results["install"] = run_install(work, bundle.folder, values, args.installs)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

"""`gridloop doctor`: is this cluster ready for these values? Also what install runs first."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

import yaml
from kubernetes import client

from gridloop import kube, versions
from gridloop.bundle import bundling
from gridloop.chart import (
    checks,
    connecting,
    doctoring,
    exits,
    local_fleet,
    network_probing,
    planning,
    preparing,
)
from gridloop.chart.diagnosis import Check, Status
from gridloop.chart.preparing import Prepared

if TYPE_CHECKING:
    from gridloop.chart.preparing import Sub

MARKS = {Status.PASS: "✓", Status.WARN: "!", Status.FAIL: "✗"}
PINNED = ("kueue", "kuberay", "kaito")


def register(sub: Sub) -> None:
    p = preparing.cluster_command(
        sub,
        "doctor",
        "check a cluster before installing: version, permissions, GPU nodes, clashes",
        "Render the chart as install would, then read the cluster (and ask it "
        "what you may do, with SelfSubjectAccessReviews): Kubernetes version, permissions "
        "for every object the install writes, GPU nodes and their labels, RuntimeClass "
        "handlers, an existing Kueue/KubeRay/KAITO/GPU Operator, Prometheus Operator CRDs, "
        "names already taken, the release and its namespace. Each check passes, warns or "
        "fails with a one-line fix. Changes nothing, unless --probe-network.",
    )
    preparing.chart_flags(p)
    p.add_argument("--output", "-o", choices=("table", "json"), default="table")
    p.add_argument(
        "--probe-network",
        action="store_true",
        help="also show that the cluster enforces NetworkPolicy: a pod pair and a deny-all "
        "policy in a namespace of their own (gridloop-network-probe-*), deleted afterwards",
    )
    p.set_defaults(func=cmd_doctor)


def diagnose(prepared: Prepared, api: client.ApiClient, kubeconfig: str) -> list[Check]:
    req = prepared.request
    meta = yaml.safe_load((req.chart / "Chart.yaml").read_text(encoding="utf-8")) or {}
    planned = planning.plan(
        req.release,
        req.namespace,
        prepared.values,
        prepared.docs,
        {key: versions.get(key).version for key in PINNED},
        meta,
        versions.get("kubernetes").version,
        bundling.left_out(req.chart),
    )
    observed = doctoring.observe(api, prepared.crds, prepared.docs, planned, kubeconfig)
    return checks.evaluate(observed, planned)


def cmd_doctor(args: argparse.Namespace) -> int:
    req = preparing.request(args)
    where = preparing.target(args)
    req, _ = local_fleet.with_local_fleet(req, where.kubeconfig)
    prepared = preparing.prepare(req)
    api = connecting.api_client(where)
    found = diagnose(prepared, api, where.kubeconfig)
    if args.probe_network:
        found.append(network_probing.probe(api, prepared.docs))
    if args.output == "json":
        report = {
            "server": kube.server(api),
            "context": where.context,
            "release": prepared.request.release,
            "namespace": prepared.request.namespace,
            "checks": [c.as_dict() for c in found],
            "summary": {s.value: sum(1 for c in found if c.status is s) for s in Status},
        }
        print(json.dumps(report, indent=2))
    else:
        context = f", context {where.context}" if where.context else ""
        print(
            f"doctor: {kube.server(api)}{context}; release {prepared.request.release} "
            f"in {prepared.request.namespace}"
        )
        print_checks(found)
        print(checks.summary(found))
    stop_on_failure(found)
    return 0


def print_checks(found: Sequence[Check], only_problems: bool = False) -> None:
    width = max(len(c.name) for c in found)
    for check in found:
        if only_problems and check.status is Status.PASS:
            continue
        print(f"  {MARKS[check.status]} {check.name:<{width}}  {check.detail}")
        if check.fix and check.status is not Status.PASS:
            print(f"    {'':<{width}}  fix: {check.fix}")


def stop_on_failure(found: Sequence[Check]) -> None:
    bad = checks.failed(found)
    if bad:
        names = ", ".join(c.name for c in bad)
        raise exits.ChecksFailed(f"doctor: failed: {names} (fixes above)")

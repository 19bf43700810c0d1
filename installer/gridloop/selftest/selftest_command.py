"""`gridloop selftest health | policies`: flags, one printed line per check, the exit code.

Exit 0 when every check passed, 1 when one failed (`helm test` reports the pod failed;
`--logs` shows the lines). Every check runs even after one fails, so one run shows all
that is wrong.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from functools import partial
from pathlib import Path

from gridloop.errors import UsageError
from gridloop.selftest import verdicts
from gridloop.selftest.probes import Expect


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    selftest = sub.add_parser(
        "selftest",
        help="check an installed release (what the chart's `helm test` hooks run)",
        description="Check an installed release from inside the cluster: the chart's "
        "`helm test` hooks run these in gridloop's image.",
    )
    verbs = selftest.add_subparsers(dest="verb", metavar="VERB", required=True)

    p = verbs.add_parser(
        "health", help="the health service answers /healthz and serves its /metrics"
    )
    p.add_argument(
        "--url",
        required=True,
        help="the health service, e.g. http://gridloop-health.gridloop-system.svc:9464",
    )
    p.set_defaults(func=cmd_health)

    p = verbs.add_parser(
        "policies",
        help="each admission policy refuses an object it must refuse and admits it compliant",
    )
    p.add_argument(
        "--namespace",
        required=True,
        help="where the objects are submitted, as a dry run: a namespace both policies "
        "match (labelled gridloop.io/sandbox=true and gridloop.io/team)",
    )
    p.add_argument("--image", required=True, help="the image the submitted objects name")
    p.add_argument(
        "--expect",
        choices=[Expect.DENY.value, Expect.WARN.value],
        default=Expect.DENY.value,
        help="what the bindings do with a violation: deny (validationActions Deny) or "
        "warn (Warn without Deny)",
    )
    p.add_argument("--sandbox-policy", help="the sandbox isolation policy's name")
    p.add_argument(
        "--runtime-class", help="a RuntimeClass the sandbox policy allows (with --sandbox-policy)"
    )
    p.add_argument("--gpu-policy", help="the GPU-jobs-queued policy's name")
    p.add_argument(
        "--ray-policy", help="the Ray token policy's name (needs KubeRay's RayCluster kind)"
    )
    p.add_argument(
        "--queue",
        default="default",
        help="the LocalQueue the compliant GPU job (and both Ray clusters) name",
    )
    p.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        help="default: in-cluster, else $KUBECONFIG or ~/.kube/config",
    )
    p.set_defaults(func=cmd_policies)


def _report(command: str, found: Iterable[verdicts.Verdict]) -> int:
    found = list(found)
    failed = [v for v in found if not v.ok]
    for verdict in found:
        print(verdict.line, flush=True)
    if failed:
        print(f"selftest {command}: {len(failed)} of {len(found)} checks failed", flush=True)
        return 1
    print(f"selftest {command}: all {len(found)} checks passed", flush=True)
    return 0


def cmd_health(args: argparse.Namespace) -> int:
    from gridloop.selftest import probing

    base = args.url.rstrip("/")
    found = []
    for path, judge in (("/healthz", verdicts.healthz), ("/metrics", verdicts.metrics)):
        url = base + path
        answer = probing.with_retries(partial(probing.http_get, url), verdicts.http_worth_retrying)
        found.append(judge(url, answer))
    return _report("health", found)


def cmd_policies(args: argparse.Namespace) -> int:
    from gridloop.selftest import probes, probing

    if args.sandbox_policy and not args.runtime_class:
        raise UsageError("--sandbox-policy needs --runtime-class: the class its pod may use")
    if not (args.sandbox_policy or args.gpu_policy or args.ray_policy):
        raise UsageError("nothing to check: give --sandbox-policy, --gpu-policy or --ray-policy")
    expect = Expect(args.expect)
    todo: list[probes.Probe] = []
    if args.sandbox_policy:
        todo += probes.sandbox_probes(
            args.namespace, args.sandbox_policy, args.runtime_class, args.image, expect
        )
    if args.gpu_policy:
        todo += probes.gpu_job_probes(
            args.namespace, args.gpu_policy, args.queue, args.image, expect
        )
    if args.ray_policy:
        todo += probes.ray_cluster_probes(
            args.namespace, args.ray_policy, args.queue, args.image, expect
        )
    from gridloop.health.commands import api_client

    api = api_client(args.kubeconfig)
    found = []
    for probe in todo:
        answer = probing.with_retries(
            partial(probing.submit, api, probe), partial(verdicts.worth_retrying, probe)
        )
        found.append(verdicts.admission(probe, answer))
    return _report("policies", found)

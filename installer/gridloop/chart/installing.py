"""Put a rendered chart on a cluster: its CRDs with kubectl, the release with helm.

Helm installs `crds/` only when a release is first installed and never changes a CRD
after that, so an upgrade that brings a new Kueue would keep the old schema. The
chart's CRDs are therefore applied here, server-side (KubeRay's are too large for
the last-applied annotation of a client-side apply) under the field manager
`gridloop`, on every install and upgrade that finds them changed since it applied them
(crd_marks.py), and helm runs with `--skip-crds`.

The components phase (objects.py) applies objects server-side under the field manager
`helm`, Helm 4's own, with Helm's ownership marks, so the `helm upgrade --install`
that follows owns the same fields and adopts them without a conflict. Both tools are
the project-built ones and get the kubeconfig through KUBECONFIG, which may name
several files, and the context as a flag. Call this only with values that have rendered.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from gridloop import toolchain
from gridloop.chart import crd_marks, messages
from gridloop.chart.connecting import Target
from gridloop.chart.objects import Doc, dump
from gridloop.chart.rendering import Request
from gridloop.errors import ClusterError

FIELD_MANAGER = "gridloop"
HELM_FIELD_MANAGER = "helm"  # Helm 4's server-side apply
DIFF_FIELD_MANAGER = "gridloop-diff"  # a dry run's: owns nothing, so removes nothing
TOOL_TIMEOUT = 60 * 60.0  # seconds; the waits have their own timeouts


@dataclass(frozen=True)
class Installed:
    revision: int
    status: str
    notes: str


def apply_crds(crds: Sequence[Doc], target: Target) -> list[str]:
    """Apply the chart's CRDs server-side, each marked with its digest (crd_marks.py), and
    wait until every one is Established.

    Returns the CRDs' names (`customresourcedefinition.apiextensions.k8s.io/<name>`).
    """
    if not crds:
        return []
    kubectl = str(toolchain.kubectl(target.kubeconfig))
    cmd = [kubectl, *target.kubectl_flags(), "apply", "--server-side", "--force-conflicts"]
    cmd += [f"--field-manager={FIELD_MANAGER}", "-o", "name", "-f", "-"]
    marked = dump(crd_marks.marked(crd) for crd in crds)
    applied = _run(cmd, target, "applying the chart's CRDs", stdin=marked).split()
    wait = [kubectl, *target.kubectl_flags(), "wait", "--for=condition=Established"]
    wait.append(f"--timeout={target.timeout}")
    _run([*wait, *applied], target, "waiting for the CRDs to be Established")
    return applied


def apply_components(groups: dict[str, list[Doc]], target: Target) -> int:
    """Apply each namespace's objects server-side as Helm would; return how many."""
    kubectl = str(toolchain.kubectl(target.kubeconfig))
    applied = 0
    for namespace, docs in groups.items():
        cmd = [kubectl, *target.kubectl_flags(), "apply", "--server-side", "--force-conflicts"]
        cmd += [f"--field-manager={HELM_FIELD_MANAGER}", "-n", namespace, "-o", "name", "-f", "-"]
        out = _run(cmd, target, f"applying the components in {namespace}", stdin=dump(docs))
        applied += len(out.split())
    return applied


def diff(docs: Sequence[Doc], namespace: str, target: Target) -> str:
    """`kubectl diff --server-side` of `docs`: what applying them would change ("" if nothing)."""
    if not docs:
        return ""
    cmd = [
        str(toolchain.kubectl(target.kubeconfig)),
        *target.kubectl_flags(),
        "diff",
        "--server-side",
    ]
    cmd += [
        "--force-conflicts",
        f"--field-manager={DIFF_FIELD_MANAGER}",
        "-n",
        namespace,
        "-f",
        "-",
    ]
    return _run(
        cmd, target, f"diffing against the cluster in {namespace}", stdin=dump(docs), ok=(0, 1)
    )


def uninstall(release: str, namespace: str, target: Target) -> str:
    """`helm uninstall`, without the chart's pre-delete hook: `gridloop uninstall` has
    deleted the release's queues itself, which is all that hook does."""
    cmd = [str(toolchain.helm(target.kubeconfig)), *target.helm_flags(), "uninstall", release]
    cmd += ["--namespace", namespace, "--wait", "--timeout", target.timeout, "--no-hooks"]
    return _run(cmd, target, f"helm uninstall {release}", helm_output=True).strip()


def upgrade(request: Request, target: Target) -> Installed:
    """`helm upgrade --install` the release, CRDs skipped (apply_crds did them)."""
    helm = str(toolchain.helm(target.kubeconfig))
    cmd = [helm, *target.helm_flags(), "upgrade", "--install", request.release, str(request.chart)]
    cmd += ["--namespace", request.namespace, "--create-namespace", "--skip-crds"]
    # Between releases the health service owns the GPU quotas of the team ClusterQueues
    # (lowered to the healthy GPUs: docs/queues.md), and Helm 4's server-side apply would
    # refuse to take them back. The chart's quotas win on upgrade; the service lowers them
    # again within a cycle if GPUs are still out, and takes the chart's new value as the
    # configured quota (health/gridloop/health/queues.py).
    # No --wait: waiting.py waits, and names what is not ready.
    cmd += ["--color", "never", "--force-conflicts"]
    cmd += request.values_args()
    what = f"helm upgrade --install {request.release}"
    return parse_status(_run(cmd, target, what, helm_output=True))


def parse_status(output: str) -> Installed:
    """REVISION, STATUS and NOTES from helm's table output."""
    revision = re.search(r"^REVISION: (\d+)", output, re.MULTILINE)
    status = re.search(r"^STATUS: (.+)$", output, re.MULTILINE)
    _, found, notes = output.partition("\nNOTES:\n")
    return Installed(
        revision=int(revision.group(1)) if revision else 0,
        status=status.group(1).strip() if status else "unknown",
        notes=notes.strip("\n") if found else "",
    )


def _run(
    cmd: list[str],
    target: Target,
    what: str,
    helm_output: bool = False,
    stdin: str | None = None,
    ok: tuple[int, ...] = (0,),
) -> str:
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            env=target.env(),
            input=stdin,
            timeout=TOOL_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise ClusterError(f"{what}: no answer in {TOOL_TIMEOUT:.0f}s") from err
    if proc.returncode not in ok:
        problem = messages.helm_error(proc.stderr) if helm_output else _kubectl_error(proc.stderr)
        raise ClusterError(f"{what}: {problem}")
    return proc.stdout


def _kubectl_error(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if not lines:
        return "kubectl failed without saying why"
    return lines[-1].removeprefix("error: ")

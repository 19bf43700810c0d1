"""Server-side apply of upstream objects into the local cluster with the built kubectl,
then a wait for their CRDs: what `up` does before it starts Kueue's and agent-sandbox's
controllers (kueue_installing.py, sandbox_installing.py).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path

from gridloop.bundle import manifests
from gridloop.bundle.manifests import Doc
from gridloop.errors import ClusterError

FIELD_MANAGER = "gridloop-local"
ESTABLISHED_TIMEOUT = 60  # seconds


def apply_established(
    kubectl: Path, kubeconfig: Path, path: Path, docs: list[Doc], crds: Iterable[str], owner: str
) -> None:
    """Write `docs` to `path`, apply them server-side (conflicts forced: `up` converges
    to upstream's objects) and wait until each CRD named in `crds` is Established.
    `owner` (Kueue, agent-sandbox) names them in a failure."""
    server_side_apply(kubectl, kubeconfig, path, docs, f"{owner}'s")
    base = [str(kubectl), f"--kubeconfig={kubeconfig}"]
    wait = ["wait", "--for=condition=Established", f"--timeout={ESTABLISHED_TIMEOUT}s"]
    names = [f"crd/{name}" for name in crds]
    run_kubectl([*base, *wait, *names], f"waiting for {owner}'s CRDs to be Established")


def server_side_apply(
    kubectl: Path, kubeconfig: Path, path: Path, docs: list[Doc], owner: str = "gridloop's"
) -> None:
    """Write `docs` to `path` and apply them server-side, conflicts forced."""
    path.write_text(manifests.dump(docs))
    base = [str(kubectl), f"--kubeconfig={kubeconfig}"]
    apply = ["apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}"]
    run_kubectl([*base, *apply, "-f", str(path)], f"applying {owner} objects")


def run_kubectl(argv: list[str], what: str) -> None:
    """Run the built kubectl; a failure is one line naming `what` and kubectl's last line."""
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ClusterError(f"{what} failed: {last[:300]}")

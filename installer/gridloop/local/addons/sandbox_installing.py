"""agent-sandbox's CRDs in the local cluster before its controller starts beside it.

kwok runs no container, so the controller the chart deploys (a simulated pod) never
reconciles anything, and a SandboxWarmPool would stay empty. `gridloop local up` runs
the same controller, built from its pinned module, as a process on loopback, as it runs
Kueue. controller-runtime stops when a kind it watches is not served, so its CRDs are
applied first, server-side, from the rendering `gridloop bundle` makes (the rendering
cache, else the Go module); `gridloop install` applies the same CRDs again, unchanged,
and `helm uninstall` leaves them. Only the CRDs: the chart brings
the controller's Namespace, ServiceAccount and RBAC (applying them here would make them
objects the release does not own), and the process uses the cluster admin's
credentials, as kwok does.
"""

from __future__ import annotations

from pathlib import Path

from gridloop import versions
from gridloop.bundle import bundling, manifests
from gridloop.bundle.manifests import CRD, Doc
from gridloop.bundle.sources import source_for
from gridloop.local.addons import applying

COMPONENT = "agent-sandbox"


def crds() -> list[Doc]:
    """agent-sandbox's CRDs as the bundle ships them (annotated keep)."""
    got = bundling.obtain(source_for(COMPONENT), versions.get(COMPONENT), None)
    return [doc for docs in got.files.values() for doc in docs if doc.get("kind") == CRD]


def install(kubectl: Path, kubeconfig: Path, folder: Path) -> int:
    """Apply the CRDs server-side; return how many, once every one is Established."""
    docs = crds()
    folder.mkdir(parents=True, exist_ok=True)
    names = [manifests.name_of(doc) for doc in docs]
    applying.apply_established(
        kubectl, kubeconfig, folder / "crds.yaml", docs, names, "agent-sandbox"
    )
    return len(docs)

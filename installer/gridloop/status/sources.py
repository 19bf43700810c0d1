"""Where `gridloop status` reads from (pure, and light: the command line imports it before
the UI is on screen, and the Kubernetes client only after)."""

from __future__ import annotations

from dataclasses import dataclass

from gridloop import names
from gridloop.health.prometheus_access import Access
from gridloop.local import state as local_state


@dataclass(frozen=True)
class Source:
    """Where to read from."""

    kubeconfig: str
    context: str | None = None
    prometheus_url: str | None = None
    health_namespace: str = names.DEFAULT_NAMESPACE
    exporter_job: str = names.EXPORTER_JOB
    prometheus_access: Access | None = None  # TLS files and a token, when it wants them


def local_prometheus(kubeconfig: str) -> str | None:
    """The Prometheus of a `gridloop local` cluster, when the kubeconfig is one's."""
    state = local_state.for_kubeconfig(kubeconfig)
    return None if state is None else f"http://127.0.0.1:{state.ports.prometheus}"

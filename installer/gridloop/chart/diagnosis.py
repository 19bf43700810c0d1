"""What `gridloop doctor` reasons about, as plain data (pure): what was read from a
cluster (`Observed`), what an install would do (`Planned`), and the verdicts (`Check`).

checks.py and clashes.py decide; doctoring.py fills `Observed` from a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

SHOWN = 4  # items named in one line before "(+N more)"


class Status(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""
    items: tuple[str, ...] = ()  # the whole list the detail abbreviates (JSON output)

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"name": self.name, "status": self.status.value}
        out["detail"] = self.detail
        out["fix"] = self.fix
        if self.items:
            out["items"] = list(self.items)
        return out


# --- what was read ---


@dataclass(frozen=True)
class Node:
    name: str
    labels: Mapping[str, str]
    gpus: int  # allocatable nvidia.com/gpu
    runtime_handlers: tuple[str, ...] | None = None  # status.runtimeHandlers, if reported
    addresses: tuple[str, ...] = ()  # status.addresses: InternalIP, ExternalIP
    pod_cidrs: tuple[str, ...] = ()  # spec.podCIDRs


@dataclass(frozen=True)
class Workload:
    """A Deployment anywhere on the cluster (to find controllers installed by others)."""

    namespace: str
    name: str
    images: tuple[str, ...]
    release: str = ""  # meta.helm.sh/release-name
    release_namespace: str = ""


@dataclass(frozen=True)
class Existing:
    """An object the chart renders that is already on the cluster, and who owns it."""

    kind: str
    namespace: str
    name: str
    release: str = ""
    release_namespace: str = ""
    # annotated helm.sh/resource-policy=keep: it outlives its release's uninstall
    kept: bool = False

    def label(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


@dataclass(frozen=True)
class Release:
    revision: int
    status: str  # helm's: deployed, failed, pending-install, pending-upgrade, ...


@dataclass(frozen=True)
class Observed:
    """A cluster as doctor read it. None: not read; `refused` says why (what -> reason)."""

    server_version: str
    denied: tuple[str, ...] | None = None  # "create clusterroles.rbac.authorization.k8s.io"
    nodes: tuple[Node, ...] | None = None
    runtime_classes: Mapping[str, str] | None = None  # name -> handler
    workloads: tuple[Workload, ...] | None = None
    webhooks: tuple[str, ...] | None = None  # webhook configuration names
    crds: frozenset[str] | None = None
    existing: tuple[Existing, ...] | None = None
    unserved: tuple[str, ...] = ()  # rendered kinds no API serves and no chart CRD defines
    release: Release | None = None
    namespace_phase: str | None = None  # Active, Terminating; None: absent
    refused: Mapping[str, str] = field(default_factory=dict)
    # the kubectl install would run: its version (v1.35.4), or why there is none
    kubectl: str | None = None
    kubectl_problem: str = ""
    # of Planned.secrets, those that exist (None: not read, see refused["secrets"])
    secrets_found: frozenset[str] | None = None
    # the API server's own addresses (the kubernetes Service's ClusterIP and its endpoints)
    api_server: tuple[str, ...] | None = None
    # the Service ranges the ServiceCIDR API lists (Kubernetes 1.33+); None: not served or
    # not readable (the range beyond the kubernetes Service's own address goes unchecked)
    service_cidrs: tuple[str, ...] | None = None


# --- what is planned ---


@dataclass(frozen=True)
class Component:
    """An upstream controller the chart may install, and how to spot someone else's."""

    key: str  # values key and check name
    title: str
    deployments: tuple[str, ...]  # its upstream Deployment names
    image: str  # a part of its image reference
    webhook_prefix: str = ""  # its webhook configurations' name prefix
    kinds: frozenset[str] = frozenset()  # custom resource kinds it acts on
    installable: bool = True  # False: the chart never installs it


@dataclass(frozen=True)
class Planned:
    """What the install would do, from the rendered chart and the merged values."""

    release: str
    namespace: str
    enabled: Mapping[str, bool]  # values key (kueue, kuberay, kaito, dcgmExporter) -> on
    pinned: Mapping[str, str]  # component key -> the version the bundle carries
    kinds: frozenset[str]  # every kind rendered
    flavors: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # name -> nodeLabels
    runtime_classes: Mapping[str, str] = field(default_factory=dict)  # name -> handler
    # values key -> why the bundle left that upstream component out (bundle/bundling.py)
    left_out: Mapping[str, str] = field(default_factory=dict)
    min_kubernetes: str = "v1.30.0"
    tested_kubernetes: str = "v1.35.4"
    # Secrets the values name, in the release namespace: name -> the values key naming it
    secrets: Mapping[str, str] = field(default_factory=dict)
    # agentSandbox.network.egress ("" when the chart makes no sandbox namespace) and the
    # ranges a sandbox may never reach with `internet`
    sandbox_egress: str = ""
    denied_cidrs: tuple[str, ...] = ()


def few(items: Sequence[str]) -> str:
    shown = ", ".join(items[:SHOWN])
    more = len(items) - SHOWN
    return f"{shown} (+{more} more)" if more > 0 else shown


def unread(name: str, what: str, observed: Observed) -> Check:
    reason = observed.refused.get(what, "not read")
    return Check(
        name,
        Status.WARN,
        f"could not check: reading {what} failed ({reason})",
        f"run doctor as a user who may read {what}",
    )

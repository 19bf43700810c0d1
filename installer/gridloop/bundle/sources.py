"""How each upstream component of the bundle is obtained and adjusted (pure data).

Versions and download URLs come from versions.yaml only; this module says how
to render them, as recipes.py does for the binaries. The image is set the way
each project's own release does (Kueue's release runs `kustomize edit set
image controller=registry.k8s.io/kueue/kueue:<version>`), so the bundle never
points at a staging registry or a `:main` tag.

Besides the image, a source names what ties the component to the chart: an
object the chart renders from values (upstream's copy becomes its base), the
namespace upstream hard-codes (moved to the release namespace). Those edits
hold for every origin, mirrors included; see adjustments.py.

The DCGM exporter is not a source: the chart runs it from its own template
(templates/dcgm-exporter.yaml, its image tag pinned by versions.yaml's
dcgm-exporter), since NVIDIA's release file cannot be downloaded everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from gridloop.versions import Component


class Kind(Enum):
    GO_MODULE = "go module + kustomize"  # `go mod download`, then `kubectl kustomize`
    # `go mod download`, then the module's files its release script concatenates
    GO_MODULE_FILES = "go module + release files"
    YAML = "release manifest"  # one multi-document YAML file at the release URL
    HELM_CHART = "release chart"  # a chart tarball at the release URL, `helm template`d


@dataclass(frozen=True)
class ImagePin:
    """Set `container` of the workload `kind`/`name` to `image` ({version} filled in)."""

    kind: str
    name: str
    container: str
    image: str

    def for_version(self, version: str) -> str:
        """`image` with {version} (`v0.12.0`) or {bare} (`0.12.0`) filled in."""
        return self.image.format(version=version, bare=version.lstrip("v"))


@dataclass(frozen=True)
class Source:
    component: str  # its name in versions.yaml and under upstream/
    kind: Kind
    kustomize: str = ""  # GO_MODULE: the kustomize folder inside the module
    # GO_MODULE_FILES: the files inside the module, in the order upstream applies them;
    # an object repeated later replaces the earlier one, as a second `kubectl apply` does
    module_files: tuple[str, ...] = ()
    pin: ImagePin | None = None
    # HELM_CHART: the release name and namespace `helm template` renders with
    chart_release: str = ""
    chart_namespace: str = ""
    # HELM_CHART: the values it is rendered with (`helm template --set`), each with its why
    chart_values: tuple[tuple[str, str], ...] = ()
    # Kueue: the integrations the platform depends on (batch Jobs, Ray). The local
    # cluster's Kueue runs with exactly these; on a real cluster the chart's
    # kueue.integrations decides, and its default is this list (a unit test keeps the
    # two equal).
    kueue_frameworks: tuple[str, ...] = ()
    # (kind, name) of objects the chart renders itself from values; upstream's copy is
    # bundled as their base (manifests.layout), not emitted
    chart_rendered: tuple[tuple[str, str], ...] = ()
    # the namespace upstream puts its objects in, moved to the release namespace
    release_namespace_from: str = ""
    # (Deployment, container, flag) the chart's objects depend on, and where upstream
    # sets it: checked on every origin, so a mirror missing it fails the bundle
    needs_flag: tuple[str, str, str] | None = None
    needs_flag_from: str = ""

    def fingerprint(self, comp: Component) -> str:
        """What the raw rendering depends on: a cached rendering with another is redone."""
        parts = [comp.version, comp.module, comp.release, self.kind.value, self.kustomize]
        if comp.sha256 or comp.mirror_sha256:  # what a download or a mirror is checked by
            parts += [comp.sha256, comp.mirror_sha256, comp.mirror_chart]
        parts += self.module_files
        parts += [self.chart_release, self.chart_namespace]
        parts += [setting for setting, _why in self.chart_values]
        return "|".join(parts)


SOURCES: tuple[Source, ...] = (
    Source(
        component="kueue",
        kind=Kind.GO_MODULE,
        kustomize="config/default",
        pin=ImagePin(
            "Deployment",
            "kueue-controller-manager",
            "manager",
            "registry.k8s.io/kueue/kueue:{version}",
        ),
        # Kueue's controller configuration: templates/kueue-config.yaml renders it with
        # the integrations (kueue.integrations) and metrics settings from values
        chart_rendered=(("ConfigMap", "kueue-manager-config"),),
        kueue_frameworks=("batch/job", "ray.io/rayjob", "ray.io/raycluster"),
    ),
    Source(
        component="kuberay",
        kind=Kind.GO_MODULE,
        kustomize="config/default",
        # No batch-scheduler flag for Kueue: in v1.6.2 `--batch-scheduler` accepts only
        # volcano, yunikorn, scheduler-plugins and kai-scheduler and refuses anything
        # else at start-up. Kueue works through `spec.suspend` and the
        # kueue.x-k8s.io/queue-name label, which needs nothing from the operator; the
        # integration is switched on in Kueue's config (ray.io/rayjob, ray.io/raycluster).
        # Its kustomize base puts everything in `default`.
        release_namespace_from="default",
        pin=ImagePin(
            "Deployment",
            "kuberay-operator",
            "kuberay-operator",
            "quay.io/kuberay/operator:{version}",
        ),
    ),
    Source(
        component="kaito",
        kind=Kind.HELM_CHART,
        chart_release="kaito-workspace",
        chart_namespace="kaito-workspace",
        # Helm's --create-namespace makes upstream's namespace; in the umbrella chart its
        # objects go to the release namespace, as KubeRay's do
        release_namespace_from="kaito-workspace",
        chart_values=(
            # gridloop's GPU nodes are the user's (regions, on-prem racks): KAITO places a
            # Workspace on the nodes its labelSelector picks and provisions none. The
            # controller sets its disableNodeAutoProvisioning gate from this flag itself;
            # the chart's gate stays off, since on it would add NVIDIA's GPU feature
            # discovery sub-chart (the GPU nodes' labels are the cluster's own: GPU Operator)
            ("nodeProvisioner=byo", "bring your own nodes: KAITO provisions none"),
            ("localCSIDriver.useLocalCSIDriver=false", "Azure's local NVMe CSI driver: off"),
            ("nvidiaDevicePlugin.enabled=false", "the GPU nodes' device plugin is the cluster's"),
        ),
        pin=ImagePin(
            "Deployment",
            "kaito-workspace",
            "workspace",
            "mcr.microsoft.com/aks/kaito/workspace:{bare}",
        ),
    ),
    # agent-sandbox's release script (dev/tools/release, read on its main branch: the
    # module zip leaves dev/tools out) writes manifest.yaml from the
    # module's k8s/**/*.yaml files without "extensions" in their name and extensions.yaml
    # from the others, each sorted, and sets the controller image; its docs apply the
    # first, then the second. extensions.controller.yaml restates the controller's
    # Deployment with `--extensions`, which SandboxTemplate and SandboxWarmPool need.
    Source(
        component="agent-sandbox",
        kind=Kind.GO_MODULE_FILES,
        module_files=(
            # manifest.yaml
            "k8s/controller.yaml",
            "k8s/crds/agents.x-k8s.io_sandboxes.yaml",
            "k8s/rbac.generated.yaml",
            # extensions.yaml
            "k8s/crds/extensions.agents.x-k8s.io_sandboxclaims.yaml",
            "k8s/crds/extensions.agents.x-k8s.io_sandboxtemplates.yaml",
            "k8s/crds/extensions.agents.x-k8s.io_sandboxwarmpools.yaml",
            "k8s/extensions-rbac.generated.yaml",
            "k8s/extensions.controller.yaml",
            "k8s/extensions.yaml",
        ),
        pin=ImagePin(
            "Deployment",
            "agent-sandbox-controller",
            "agent-sandbox-controller",
            "registry.k8s.io/agent-sandbox/agent-sandbox-controller:{version}",
        ),
        needs_flag=("agent-sandbox-controller", "agent-sandbox-controller", "--extensions"),
        needs_flag_from=(
            "upstream's extensions.yaml sets it; in a mirror it must come after manifest.yaml "
            "in name order (1-manifest.yaml, 2-extensions.yaml)"
        ),
    ),
)

COMPONENTS: tuple[str, ...] = tuple(s.component for s in SOURCES)


def source_for(component: str) -> Source:
    for source in SOURCES:
        if source.component == component:
            return source
    raise KeyError(component)

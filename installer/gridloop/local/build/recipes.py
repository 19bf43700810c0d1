"""How each upstream binary is built: main packages, tags and version ldflags.

Versions come from versions.yaml only; this module says how to build, not what.
Flags follow upstream's own release builds: CGO off, `-trimpath`, and the
version variables set so `kubectl version` and `--version` report the release.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gridloop import versions
from gridloop.local.build.gomod import staging_version
from gridloop.local.build.netpol_overlays import NETPOL_PATCHES
from gridloop.local.build.overlays import SourcePatch
from gridloop.versions import Component


@dataclass(frozen=True)
class Recipe:
    component: str
    # binary name -> main package (a package in the upstream module)
    binaries: dict[str, str]
    ldflags: Callable[[Component], list[str]]
    tags: tuple[str, ...] = ()
    # binary name -> package whose Main(os.Args) a generated main.go calls, for
    # upstream modules that ship the entrypoint but not a main package
    shims: dict[str, str] = field(default_factory=dict)
    # binary name -> Go source of a main package of gridloop's own, built against the
    # upstream module (the build writes it to cmd/<name>/main.go beside the wrapper)
    mains: dict[str, str] = field(default_factory=dict)
    # version to pin each module the upstream go.mod replaced with a local folder
    pin: Callable[[Component, str], str] = lambda comp, _module: comp.version
    # for a Debian package: binary name -> path inside the package
    debian_files: dict[str, str] = field(default_factory=dict)
    # build-time edits of the upstream source (patches.py); a changed patch rebuilds
    patches: tuple[SourcePatch, ...] = ()
    # GOEXPERIMENT settings the upstream release build uses
    experiments: tuple[str, ...] = ()
    # the cache folder's name, when one component is built by several recipes (the
    # kubernetes module gives the control plane, the node binaries and the pause program)
    # or into something else than its own program (trivy's gives trivy-k8s-config)
    cache: str = ""
    # for C programs in the module: binary name -> source file, built with gcc -static
    c_programs: dict[str, str] = field(default_factory=dict)
    cflags: Callable[[Component], list[str]] = lambda comp: []
    # built from the Go source in the component's release archive (versions.yaml's
    # `mirror`, `mirror_source`), read from a mirror folder, not from the Go module proxy:
    # `binaries` then name packages inside that source (`./cmd/workspace`), its own go.sum
    # checks every module, and the recipe is built only when asked for with the mirror
    from_mirror: bool = False
    # files of that source copied beside the binaries (name in bin/ -> path in the source)
    source_files: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.cache or self.component

    def fingerprint(self, comp: Component) -> str:
        parts = [comp.version, comp.module, *sorted(self.binaries.items())]
        parts += [*sorted(self.c_programs.items()), *self.cflags(comp)]
        parts += [*self.tags, *self.ldflags(comp), *sorted(self.shims.items())]
        parts += [
            f"{name}={hashlib.sha256(source.encode()).hexdigest()}"
            for name, source in sorted(self.mains.items())
        ]
        parts += [comp.debian, *sorted(self.debian_files.items())]
        parts += [patch.fingerprint() for patch in self.patches]
        parts += [f"GOEXPERIMENT={','.join(self.experiments)}"] if self.experiments else []
        if self.from_mirror:
            parts += [comp.mirror_name, comp.mirror_sha256, comp.mirror_source]
            parts += sorted(self.source_files.items())
        return "|".join(map(str, parts))


def _helm3_ldflags(comp: Component) -> list[str]:
    # Helm 3's Makefile sets the Kubernetes version `helm template` and `helm lint` assume
    # (else 1.20, which charts needing a newer cluster refuse); here it is the Kubernetes
    # gridloop pins and tests against.
    kube = versions.get("kubernetes")
    flags = [
        f"-X helm.sh/helm/v3/internal/version.version={comp.version}",
        "-X helm.sh/helm/v3/internal/version.gitTreeState=clean",
    ]
    for pkg in ("pkg/lint/rules", "pkg/chartutil"):
        flags += [
            f"-X helm.sh/helm/v3/{pkg}.k8sVersionMajor=1",
            f"-X helm.sh/helm/v3/{pkg}.k8sVersionMinor={kube.minor}",
        ]
    return flags


def _kubernetes_ldflags(comp: Component) -> list[str]:
    major = comp.version.lstrip("v").split(".")[0]
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={comp.version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={comp.minor}",
            f"-X {pkg}.gitTreeState=clean",
        ]
    return flags


# Kueue, run out of the cluster by `gridloop local up` with its internal certificate
# management off: its certificates come from gridloop's local CA, for 127.0.0.1. Upstream
# then reads the metrics certificate from /etc/kueue/metrics/certs and the visibility
# server's from /visibility, where its Deployment mounts Secrets; no flag or config field
# moves them in v0.19.2. gridloop writes neither into /etc nor into /, so the build makes
# both directories settable by environment variable, with upstream's path as the fallback
# (without the variable the binary behaves as upstream's). Turning internal certificate
# management on would avoid the patch for metrics only: its webhook certificate names the
# in-cluster Service, which the API server cannot reach on loopback, and the visibility
# server would then write a self-signed certificate into /visibility.
KUEUE_METRICS_CERT_ENV = "GRIDLOOP_KUEUE_METRICS_CERT_DIR"
KUEUE_VISIBILITY_CERT_ENV = "GRIDLOOP_KUEUE_VISIBILITY_CERT_DIR"
_KUEUE_METRICS_PATH = 'metricsCertPath := "/etc/kueue/metrics/certs"'
KUEUE_PATCHES: tuple[SourcePatch, ...] = (
    SourcePatch(
        file="cmd/kueue/main.go",
        old=_KUEUE_METRICS_PATH,
        new=(
            f"{_KUEUE_METRICS_PATH}\n"
            f'\t\tif dir := os.Getenv("{KUEUE_METRICS_CERT_ENV}"); dir != "" {{ // gridloop\n'
            "\t\t\tmetricsCertPath = dir\n"
            "\t\t}"
        ),
        why=f"metrics certificate directory from ${KUEUE_METRICS_CERT_ENV}",
    ),
    SourcePatch(
        file="pkg/visibility/server.go",
        old='certDir = "/visibility"',
        new='certDir = gridloopCertDir("/visibility")',
        why=f"visibility server certificate directory from ${KUEUE_VISIBILITY_CERT_ENV}",
    ),
    SourcePatch(
        file="pkg/visibility/zz_gridloop_cert_dir.go",
        old="",
        new=(
            "// Generated by gridloop local build (an overlay, never in the module).\n"
            "package visibility\n\n"
            'import "os"\n\n'
            "func gridloopCertDir(upstream string) string {\n"
            f'\tif dir := os.Getenv("{KUEUE_VISIBILITY_CERT_ENV}"); dir != "" {{\n'
            "\t\treturn dir\n"
            "\t}\n"
            "\treturn upstream\n"
            "}\n"
        ),
        why=f"visibility server certificate directory from ${KUEUE_VISIBILITY_CERT_ENV}",
    ),
)


# gVisor's containerd shim lowers its own OOM score to -999 when it starts, and stops on
# the error. Lowering an OOM score needs CAP_SYS_RESOURCE, which root lacks on some
# machines (containers, CI sandboxes: this one). containerd's own sys.SetOOMScore
# ignores a permission error when unprivileged; the build makes gVisor's shim do the
# same for a permission error, so the shim keeps the score it inherited. Any other error
# still stops it, as upstream's does.
_GVISOR_OOM = (
    "\tif err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil {\n"
    '\t\treturn shim.BootstrapParams{}, fmt.Errorf("failed to set OOM Score on shim: %w", err)'
)
GVISOR_PATCHES: tuple[SourcePatch, ...] = (
    SourcePatch(
        file="pkg/shim/v1/manager.go",
        old=_GVISOR_OOM,
        new=_GVISOR_OOM.replace(
            "err != nil {", "err != nil && !os.IsPermission(err) { // gridloop"
        ),
        why="the shim's OOM score: a permission error is not fatal",
    ),
)


# The chart's security scan (tests/unit/test_chart_security.py) runs Trivy's Kubernetes
# misconfiguration checks, nothing else of Trivy: `trivy config` on rendered manifests.
# The whole CLI (image, SBOM, cloud and VM scanners, every cloud SDK: over 3000 Go
# packages) took ten minutes of a cold build for that, so the build makes a small main
# package of its own instead, trivy-k8s-config, on Trivy's own scanner packages at the
# pinned version: its Kubernetes scanner and Rego engine with the trivy-checks bundle the
# module embeds (about 740 packages). It loads the checks as `trivy config
# --skip-check-update` does, and prints the fields of `trivy config --format=json`.
TRIVY_K8S_CONFIG = "trivy-k8s-config"
# its source, beside this module (package data: the wheel carries it)
TRIVY_K8S_CONFIG_MAIN = (Path(__file__).parent / "trivy_k8s_config.go").read_text()

# CoreDNS's own main.go with core/plugin (every plugin of upstream's plugin.cfg: cloud DNS
# SDKs, etcd, tracing) swapped for the seven the Corefile of container/addons.py uses, as
# CoreDNS's docs build a server with chosen plugins. Upstream's directive order (which
# runs first) is kept: it is core/dnsserver's. From an empty GOCACHE here: 79 s against
# 142 s with every plugin (2026-12-06).
COREDNS_PLUGINS = ("cache", "errors", "health", "kubernetes", "loop", "ready")
COREDNS_MAIN = "\n".join(
    [
        "// gridloop's build of CoreDNS (installer/gridloop/local/build/recipes.py)",
        "package main",
        "",
        "import (",
        *[f'\t_ "github.com/coredns/coredns/plugin/{name}"' for name in COREDNS_PLUGINS],
        '\t"github.com/coredns/coredns/coremain"',
        ")",
        "",
        "func main() {",
        "\tcoremain.Run()",
        "}",
        "",
    ]
)

PAUSE_SOURCE = "build/pause/linux/pause.c"
PAUSE_MAKEFILE = "build/pause/Makefile"


def _containerd_ldflags(comp: Component) -> list[str]:
    # as containerd's Makefile: the version and package it reports (`containerd --version`)
    pkg = "github.com/containerd/containerd/v2/version"
    return [f"-X {pkg}.Version={comp.version}", f"-X {pkg}.Package={comp.module}"]


KAITO_WORKSPACE = "kaito-workspace"  # the controller's binary
KAITO_MODELS = "supported_models.yaml"  # the preset catalogue upstream's image holds

RECIPES: tuple[Recipe, ...] = (
    Recipe(
        component="etcd",
        binaries={},
        shims={"etcd": "go.etcd.io/etcd/server/v3/etcdmain"},
        ldflags=lambda comp: [],
    ),
    Recipe(
        component="kubernetes",
        binaries={
            name: f"k8s.io/kubernetes/cmd/{name}"
            for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
        },
        tags=("selinux", "notest"),
        ldflags=_kubernetes_ldflags,
        pin=lambda comp, _module: staging_version(comp.version),
    ),
    # the container nodes' kubelet and kube-proxy: the same module and flags as the
    # control plane, cached apart so adding them does not rebuild the control plane
    Recipe(
        component="kubernetes",
        cache="kubernetes-node",
        binaries={name: f"k8s.io/kubernetes/cmd/{name}" for name in ("kubelet", "kube-proxy")},
        tags=("selinux", "notest"),
        ldflags=_kubernetes_ldflags,
        pin=lambda comp, _module: staging_version(comp.version),
    ),
    # the pod sandbox ("pause") program, as build/pause/Makefile compiles it
    Recipe(
        component="kubernetes",
        cache="pause",
        binaries={},
        ldflags=lambda comp: [],
        c_programs={"pause": PAUSE_SOURCE},
        cflags=lambda comp: ["-Os", "-Wall", "-Werror", "-static"],
    ),
    Recipe(
        component="containerd",
        binaries={
            name: f"github.com/containerd/containerd/v2/cmd/{name}"
            for name in ("containerd", "containerd-shim-runc-v2", "ctr")
        },
        # as upstream's static release build, without the snapshotters that need cgo
        tags=("no_btrfs", "no_devmapper", "no_zfs"),
        ldflags=_containerd_ldflags,
    ),
    Recipe(
        component="gvisor",
        binaries={
            "runsc": "gvisor.dev/gvisor/runsc",
            "containerd-shim-runsc-v1": "gvisor.dev/gvisor/shim",
        },
        ldflags=lambda comp: [f"-X gvisor.dev/gvisor/runsc/version.version={comp.version}"],
        patches=GVISOR_PATCHES,
    ),
    Recipe(
        component="runc",
        binaries={},
        ldflags=lambda comp: [],
        debian_files={"runc": "usr/sbin/runc"},
    ),
    Recipe(
        component="cni-plugins",
        binaries={},
        ldflags=lambda comp: [],
        debian_files={
            name: f"usr/lib/cni/{name}" for name in ("bridge", "host-local", "loopback", "portmap")
        },
    ),
    # CoreDNS with the plugins the local Corefile uses and no others (COREDNS_MAIN); the
    # commit is left out as for Kueue (a module zip carries none)
    Recipe(
        component="coredns",
        binaries={},
        mains={"coredns": COREDNS_MAIN},
        ldflags=lambda comp: [],
    ),
    # the container nodes' NetworkPolicy enforcement (SIG Network's nfqueue-based one), a
    # host process per node (container/network_policy.py); upstream's Makefile sets no
    # version variable
    Recipe(
        component="kube-network-policies",
        binaries={"kube-network-policies": "sigs.k8s.io/kube-network-policies/cmd"},
        ldflags=lambda comp: [],
        patches=NETPOL_PATCHES,
    ),
    Recipe(
        component="busybox",
        binaries={},
        ldflags=lambda comp: [],
        debian_files={"busybox": "bin/busybox"},
    ),
    Recipe(
        component="distribution",
        binaries={"registry": "github.com/distribution/distribution/v3/cmd/registry"},
        ldflags=lambda comp: [
            f"-X github.com/distribution/distribution/v3/version.version={comp.version}"
        ],
    ),
    # the object store (object_store.py); upstream's Makefile sets main.Version (and a
    # commit and build time, left out: a module zip has no commit)
    Recipe(
        component="versitygw",
        binaries={"versitygw": "github.com/versity/versitygw/cmd/versitygw"},
        ldflags=lambda comp: [f"-X main.Version={comp.version}"],
    ),
    # the proxy the tests put in front of a Prometheus that wants a token
    # (tests/cluster/test_health_prometheus_access.py); upstream's Makefile sets the
    # version and program name (and a commit, left out: a module zip has none)
    Recipe(
        component="kube-rbac-proxy",
        binaries={"kube-rbac-proxy": "github.com/brancz/kube-rbac-proxy/cmd/kube-rbac-proxy"},
        ldflags=lambda comp: [
            f"-X k8s.io/component-base/version.gitVersion={comp.version}",
            "-X k8s.io/component-base/version/verflag.programName=kube-rbac-proxy",
        ],
    ),
    Recipe(
        component="kwok",
        binaries={"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
        ldflags=lambda comp: [f"-X sigs.k8s.io/kwok/pkg/consts.Version={comp.version.lstrip('v')}"],
    ),
    Recipe(
        component="helm",
        binaries={"helm": "helm.sh/helm/v4/cmd/helm"},
        ldflags=lambda comp: [
            f"-X helm.sh/helm/v4/internal/version.version={comp.version}",
            "-X helm.sh/helm/v4/internal/version.gitTreeState=clean",
        ],
    ),
    Recipe(
        component="helm3",
        binaries={"helm3": "helm.sh/helm/v3/cmd/helm"},
        ldflags=_helm3_ldflags,
    ),
    Recipe(
        component="kueue",
        binaries={"kueue": "sigs.k8s.io/kueue/cmd/kueue"},
        # as upstream's Makefile; the commit and build date are left out (a module zip
        # carries no commit, and a date would make every build differ)
        ldflags=lambda comp: [f"-X sigs.k8s.io/kueue/pkg/version.GitVersion={comp.version}"],
        patches=KUEUE_PATCHES,
    ),
    # agent-sandbox's controller and its Go sandbox router (sandbox-router/cmd, a package of
    # the same module), for their images on the container nodes (images/table.py).
    # Upstream's controller Dockerfile sets no version variable (only -s -w); its router's
    # sets internal/version.gitVersion, which both then report.
    Recipe(
        component="agent-sandbox",
        binaries={
            "agent-sandbox-controller": "sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller",
            "sandbox-router": "sigs.k8s.io/agent-sandbox/sandbox-router/cmd",
        },
        ldflags=lambda comp: [
            f"-X sigs.k8s.io/agent-sandbox/internal/version.gitVersion={comp.version}"
        ],
    ),
    # KubeRay's operator, for its image on the container nodes (images/table.py). Upstream's
    # Dockerfile builds it with cgo and the strictfipsruntime tag on a distroless base;
    # here it is static (CGO off) in an image FROM scratch.
    Recipe(
        component="kuberay",
        binaries={"kuberay-operator": "github.com/ray-project/kuberay/ray-operator"},
        ldflags=lambda comp: [],
    ),
    # KAITO's workspace controller, for its image on the container nodes (images/table.py),
    # built as upstream's docker/workspace/Dockerfile does (CGO off, the version variable
    # set, supported_models.yaml beside it) less its GOEXPERIMENT=nosystemcrypto, which only
    # Microsoft's Go toolchain knows. From the release archive: no registry here serves
    # KAITO's Go module.
    Recipe(
        component="kaito",
        binaries={KAITO_WORKSPACE: "./cmd/workspace"},
        ldflags=lambda comp: [
            f"-X github.com/kaito-project/kaito/pkg/version.Version={comp.version}"
        ],
        from_mirror=True,
        source_files={KAITO_MODELS: "presets/workspace/models/supported_models.yaml"},
    ),
    # Trivy's Kubernetes misconfiguration scan alone (TRIVY_K8S_CONFIG_MAIN), in a cache
    # folder of its own: the binary is not Trivy's CLI
    Recipe(
        component="trivy",
        cache=TRIVY_K8S_CONFIG,
        binaries={},
        mains={TRIVY_K8S_CONFIG: TRIVY_K8S_CONFIG_MAIN},
        # its checks (trivy-checks) are embedded at build time: scans need no download
        # encoding/json/v2, as Trivy's own release build (goreleaser) enables it
        experiments=("jsonv2",),
        ldflags=lambda comp: [
            f"-X github.com/aquasecurity/trivy/pkg/version/app.ver={comp.version.lstrip('v')}"
        ],
    ),
    # for the vLLM CPU image (images/locked_images.py): vLLM's CPU ops link libnuma
    Recipe(
        component="libnuma",
        binaries={},
        ldflags=lambda comp: [],
        debian_files={"libnuma.so.1": "usr/lib/x86_64-linux-gnu/libnuma.so.1"},
    ),
    # for the Ray image (images/locked_images.py): GNU wget, which KubeRay's probes run,
    # and libpsl, the one library of it the image base lacks
    Recipe(
        component="wget",
        binaries={},
        ldflags=lambda comp: [],
        debian_files={"wget": "usr/bin/wget"},
    ),
    Recipe(
        component="libpsl",
        binaries={},
        ldflags=lambda comp: [],
        debian_files={"libpsl.so.5": "usr/lib/x86_64-linux-gnu/libpsl.so.5"},
    ),
    Recipe(
        component="prometheus",
        binaries={},
        ldflags=lambda comp: [],
        debian_files={"prometheus": "usr/bin/prometheus", "promtool": "usr/bin/promtool"},
    ),
)


def binary_names(recipe: Recipe) -> list[str]:
    return [
        *recipe.source_files,
        *recipe.shims,
        *recipe.mains,
        *recipe.binaries,
        *recipe.debian_files,
        *recipe.c_programs,
    ]


def recipe_for(name: str) -> Recipe:
    """The recipe named `name` (its cache folder's name: a component, or e.g. `pause`)."""
    for recipe in RECIPES:
        if recipe.name == name:
            return recipe
    raise KeyError(name)

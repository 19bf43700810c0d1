"""How each upstream binary is built: main packages, tags and version ldflags.

Versions come from versions.yaml only; this module says how to build, not what.
Flags follow upstream's own release builds: CGO off, `-trimpath`, and the
version variables set so `kubectl version` and `--version` report the release.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gridloop import versions
from gridloop.local.gomod import staging_version
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
    # version to pin each module the upstream go.mod replaced with a local folder
    pin: Callable[[Component, str], str] = lambda comp, _module: comp.version
    # for a Debian package: binary name -> path inside the package
    debian_files: dict[str, str] = field(default_factory=dict)

    def fingerprint(self, comp: Component) -> str:
        parts = [comp.version, comp.module, *sorted(self.binaries.items())]
        parts += [*self.tags, *self.ldflags(comp), *sorted(self.shims.items())]
        parts += [comp.debian, *sorted(self.debian_files.items())]
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
        component="prometheus",
        binaries={},
        ldflags=lambda comp: [],
        debian_files={"prometheus": "usr/bin/prometheus", "promtool": "usr/bin/promtool"},
    ),
)


def binary_names(recipe: Recipe) -> list[str]:
    return [*recipe.shims, *recipe.binaries, *recipe.debian_files]


def recipe_for(component: str) -> Recipe:
    for recipe in RECIPES:
        if recipe.component == component:
            return recipe
    raise KeyError(component)

"""The wrapper go.mod pins what upstream replaced locally, read from upstream's own go.mod.

The go.mod texts below are short hand-written samples in the shape of
k8s.io/kubernetes's and etcd's server go.mod, not copies of them.
"""

from __future__ import annotations

import pytest

from gridloop.local.build.gomod import (
    WrapperModule,
    directive,
    locally_replaced_modules,
    staging_version,
    wrapper_for,
)

KUBERNETES_GOMOD = """\
// This is a generated file. Do not edit directly.

module k8s.io/kubernetes

go 1.25.0

godebug default=go1.25

require (
\tgithub.com/example/metrics v1.4.0
\tk8s.io/api v0.0.0
\tk8s.io/client-go v0.0.0
\tk8s.io/kubectl v0.0.0
)

replace (
\tgithub.com/example/metrics => github.com/example/metrics v1.4.1
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\t// k8s.io/retired => ./staging/src/k8s.io/retired
\tk8s.io/kubectl => ./staging/src/k8s.io/kubectl
)
"""

ETCD_SERVER_GOMOD = """\
module go.etcd.io/etcd/server/v3

go 1.24

toolchain go1.24.9

require (
\tgo.etcd.io/etcd/api/v3 v3.6.16
\tgo.etcd.io/etcd/client/pkg/v3 v3.6.16
)

replace go.etcd.io/etcd/api/v3 => ../api

replace go.etcd.io/etcd/client/pkg/v3 v3.6.16 => ../client/pkg

// Bad imports are sometimes causing attempts to pull that code.
// This makes the error more explicit.
replace go.etcd.io/etcd => ./FORBIDDEN_DEPENDENCY

replace go.etcd.io/etcd/v3 => ./FORBIDDEN_DEPENDENCY
"""

KUBE_TOOLS = ("k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kubectl")


def kubernetes_wrapper() -> WrapperModule:
    return wrapper_for(
        path="gridloop.local/build/kubernetes",
        module="k8s.io/kubernetes",
        version="v1.35.4",
        upstream_gomod=KUBERNETES_GOMOD,
        tools=KUBE_TOOLS,
        pin_version=lambda _module: staging_version("v1.35.4"),
    )


def etcd_wrapper() -> WrapperModule:
    return wrapper_for(
        path="gridloop.local/build/etcd",
        module="go.etcd.io/etcd/server/v3",
        version="v3.6.16",
        upstream_gomod=ETCD_SERVER_GOMOD,
        tools=(),
        pin_version=lambda _module: "v3.6.16",
    )


@pytest.mark.parametrize(
    ("gomod", "expected"),
    [
        (KUBERNETES_GOMOD, ["k8s.io/api", "k8s.io/client-go", "k8s.io/kubectl"]),
        (ETCD_SERVER_GOMOD, ["go.etcd.io/etcd/api/v3", "go.etcd.io/etcd/client/pkg/v3"]),
        ("module example.com/plain\n\ngo 1.25\n", []),
    ],
    ids=["kubernetes-replace-block", "etcd-one-line-replaces", "no-replaces"],
)
def test_locally_replaced_modules_are_those_pointing_at_a_folder(
    gomod: str, expected: list[str]
) -> None:
    assert locally_replaced_modules(gomod) == expected


def test_forbidden_dependency_guards_are_not_modules() -> None:
    modules = locally_replaced_modules(ETCD_SERVER_GOMOD)

    assert "go.etcd.io/etcd" not in modules
    assert "go.etcd.io/etcd/v3" not in modules


def test_module_replaced_by_another_module_version_is_not_pinned() -> None:
    wrapper = kubernetes_wrapper()

    assert "github.com/example/metrics" not in dict(wrapper.pins)
    assert "github.com/example/metrics" not in wrapper.render()


def test_commented_out_replace_is_ignored() -> None:
    assert "k8s.io/retired" not in locally_replaced_modules(KUBERNETES_GOMOD)


def test_every_kubernetes_staging_module_is_pinned_to_its_v0_release() -> None:
    wrapper = kubernetes_wrapper()

    assert wrapper.pins == (
        ("k8s.io/api", "v0.35.4"),
        ("k8s.io/client-go", "v0.35.4"),
        ("k8s.io/kubectl", "v0.35.4"),
    )
    rendered = wrapper.render()
    for module, version in wrapper.pins:
        assert f"\t{module} => {module} {version}\n" in rendered


def test_every_etcd_sibling_module_is_pinned_to_the_release_version() -> None:
    wrapper = etcd_wrapper()

    assert wrapper.pins == (
        ("go.etcd.io/etcd/api/v3", "v3.6.16"),
        ("go.etcd.io/etcd/client/pkg/v3", "v3.6.16"),
    )


def test_wrapper_requires_the_upstream_module_at_its_release() -> None:
    rendered = kubernetes_wrapper().render()

    assert "module gridloop.local/build/kubernetes\n" in rendered
    assert "require (\n\tk8s.io/kubernetes v1.35.4\n)\n" in rendered


@pytest.mark.parametrize(
    ("wrapper", "go", "godebug"),
    [
        (kubernetes_wrapper(), "1.25.0", "default=go1.25"),
        (etcd_wrapper(), "1.24", None),
    ],
    ids=["kubernetes", "etcd"],
)
def test_go_and_godebug_lines_are_copied_from_upstream(
    wrapper: WrapperModule, go: str, godebug: str | None
) -> None:
    rendered = wrapper.render()

    assert directive(rendered, "go") == go
    assert directive(rendered, "godebug") == godebug


def test_go_version_defaults_when_upstream_has_none() -> None:
    wrapper = wrapper_for("w", "example.com/m", "v1.0.0", "module example.com/m\n", (), str)

    assert directive(wrapper.render(), "go") == "1.25"


def test_tool_block_lists_the_main_packages() -> None:
    rendered = kubernetes_wrapper().render()

    tool_block = "tool (\n" + "".join(f"\t{pkg}\n" for pkg in KUBE_TOOLS) + ")\n"
    assert tool_block in rendered


def test_wrapper_without_tools_or_pins_has_no_empty_blocks() -> None:
    rendered = wrapper_for("w", "example.com/m", "v1.0.0", "go 1.25\n", (), str).render()

    assert "tool (" not in rendered
    assert "replace (" not in rendered


@pytest.mark.parametrize("wrapper", [kubernetes_wrapper(), etcd_wrapper()], ids=["k8s", "etcd"])
def test_rendered_wrapper_pins_versions_not_paths(wrapper: WrapperModule) -> None:
    rendered = wrapper.render()

    assert locally_replaced_modules(rendered) == []
    assert "./" not in rendered
    assert "../" not in rendered


@pytest.mark.parametrize(
    ("kubernetes", "staging"),
    [
        ("v1.35.4", "v0.35.4"),
        ("1.36.0", "v0.36.0"),
        pytest.param("v1.35.0-rc.1", "v0.35.0-rc.1", id="pre-release"),
    ],
)
def test_staging_version_is_v0_minor_patch(kubernetes: str, staging: str) -> None:
    assert staging_version(kubernetes) == staging


@pytest.mark.parametrize("version", ["v2.0.0", "v0.35.4", "v3.6.16"])
def test_staging_version_rejects_a_non_1x_release(version: str) -> None:
    with pytest.raises(ValueError, match=version):
        staging_version(version)

"""The chart's security scanner: Trivy's Kubernetes misconfiguration scan alone
(trivy-k8s-config), a main package of gridloop's own on Trivy's scanner packages,
not Trivy's whole CLI (test_chart_security.py runs it).

The test marked "against the pinned module" reads it from Go's module cache, and skips
only when no build has downloaded it yet.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest

from gridloop import versions
from gridloop.local.build import building
from gridloop.local.build.recipes import (
    TRIVY_K8S_CONFIG,
    TRIVY_K8S_CONFIG_MAIN,
    binary_names,
    recipe_for,
)

TRIVY = "github.com/aquasecurity/trivy"
# Trivy's packages the scanner may link: its Kubernetes scanner, the Rego engine and the
# checks it embeds, and small helpers. Not pkg/misconf or pkg/iac/detection (they link
# the Terraform, CloudFormation, Helm and Ansible scanners and, through Terraform's
# module fetcher, every cloud SDK), nor the CLI's pkg/commands.
ALLOWED = {
    f"{TRIVY}/pkg/iac/rego",
    f"{TRIVY}/pkg/iac/scan",
    f"{TRIVY}/pkg/iac/scanners/kubernetes",
    f"{TRIVY}/pkg/iac/scanners/options",
    f"{TRIVY}/pkg/log",
    f"{TRIVY}/pkg/mapfs",
    f"{TRIVY}/pkg/version/app",
}


def imports(source: str) -> set[str]:
    block = re.search(r"^import \((.*?)^\)", source, re.M | re.S)
    assert block, "no import block"
    return set(re.findall(r'"([^"]+)"', block.group(1)))


def test_the_recipe_builds_only_the_kubernetes_scanner_in_a_cache_of_its_own() -> None:
    recipe = recipe_for(TRIVY_K8S_CONFIG)
    comp = versions.get("trivy")

    assert recipe.component == "trivy"
    assert binary_names(recipe) == [TRIVY_K8S_CONFIG]  # not Trivy's CLI (cmd/trivy)
    assert recipe.mains == {TRIVY_K8S_CONFIG: TRIVY_K8S_CONFIG_MAIN}
    # the checks' minimum_trivy_version is compared with the version the binary reports
    assert f"-X {TRIVY}/pkg/version/app.ver={comp.version.lstrip('v')}" in recipe.ldflags(comp)
    assert recipe.experiments == ("jsonv2",)  # Trivy's encoding/json/v2 code needs it


def test_the_scanner_links_only_trivy_s_kubernetes_scanning_packages() -> None:
    trivy = {pkg for pkg in imports(TRIVY_K8S_CONFIG_MAIN) if pkg.startswith(f"{TRIVY}/")}

    assert trivy <= ALLOWED, sorted(trivy - ALLOWED)
    assert {f"{TRIVY}/pkg/iac/scanners/kubernetes", f"{TRIVY}/pkg/iac/rego"} <= trivy


def test_the_scanner_loads_the_embedded_checks_as_trivy_config_does() -> None:
    for option in (
        "rego.WithEmbeddedPolicies(true)",
        "rego.WithEmbeddedLibraries(true)",
        "rego.WithIncludeDeprecatedChecks(false)",
        "rego.WithTrivyVersion(app.Version())",
        "rego.WithPolicyNamespaces(rego.BuiltinNamespaces()...)",
    ):
        assert option in TRIVY_K8S_CONFIG_MAIN, option


def test_a_changed_scanner_source_rebuilds_it() -> None:
    recipe = recipe_for(TRIVY_K8S_CONFIG)
    comp = versions.get("trivy")
    changed = dataclasses.replace(
        recipe, mains={TRIVY_K8S_CONFIG: TRIVY_K8S_CONFIG_MAIN + "\n// changed\n"}
    )

    assert changed.fingerprint(comp) != recipe.fingerprint(comp)


def test_the_build_writes_the_main_package_and_builds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRIDLOOP_CACHE", str(tmp_path / "cache"))
    gomod = tmp_path / "trivy.mod"
    gomod.write_text(f"module {TRIVY}\n\ngo 1.26.3\n")
    module = {"Dir": str(tmp_path / "module"), "GoMod": str(gomod)}
    ran: list[list[str]] = []

    def run(cmd: list[str], cwd: Path, log: Path, env: dict[str, str], what: str) -> str:
        ran.append(cmd)
        if cmd[1:3] == ["mod", "download"]:
            return json.dumps(module)
        if cmd[1] == "build":
            Path(cmd[cmd.index("-o") + 1]).write_text("binary")
            assert env["GOEXPERIMENT"] == "jsonv2"
        return ""

    monkeypatch.setattr(building, "_run", run)
    recipe, comp = recipe_for(TRIVY_K8S_CONFIG), versions.get("trivy")
    building._build_component("go", recipe, comp, lambda progress: None)

    folder = building.recipe_dir(recipe, comp)
    assert folder.name == f"{TRIVY_K8S_CONFIG}-{comp.version}"
    src = folder / "src"
    assert (src / "cmd" / TRIVY_K8S_CONFIG / "main.go").read_text() == TRIVY_K8S_CONFIG_MAIN
    assert f"\t{TRIVY} {comp.version}" in (src / "go.mod").read_text()
    builds = [cmd for cmd in ran if cmd[1] == "build"]
    assert [cmd[-1] for cmd in builds] == [f"./cmd/{TRIVY_K8S_CONFIG}"]
    assert building.binary(TRIVY_K8S_CONFIG) == folder / "bin" / TRIVY_K8S_CONFIG


def test_the_packages_the_scanner_links_are_in_the_pinned_module() -> None:
    """Against the pinned module: a version bump that moves them fails here, in one line."""
    comp = versions.get("trivy")
    root = Path(os.environ.get("GOMODCACHE") or Path.home() / "go" / "pkg" / "mod")
    module = root / f"{comp.module}@{comp.version}"
    if not module.is_dir():
        pytest.skip(f"{comp.module}@{comp.version} is not in Go's module cache yet")

    missing = [
        pkg
        for pkg in sorted(imports(TRIVY_K8S_CONFIG_MAIN))
        if pkg.startswith(f"{TRIVY}/")
        and not any((module / pkg.removeprefix(f"{TRIVY}/")).glob("*.go"))
    ]
    assert missing == []

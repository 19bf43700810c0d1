"""The chart on Helm 3: users still on it lint and render the same chart gridloop installs
with Helm 4. Both binaries are the ones `gridloop local build` made from versions.yaml."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from chart_files import CHART, EVERYTHING, PROFILE_NAMES, UPSTREAM_OFF

from gridloop.errors import BuildError
from gridloop.local.build.building import binary

# the real helm 4 and helm 3, built by `gridloop local build`
pytestmark = pytest.mark.needs_binaries("helm", "helm3")


def helm_binary(name: str) -> str:
    try:
        return str(binary(name))
    except BuildError as err:
        pytest.fail(f"{err}: these tests run the real {name}", pytrace=False)


def run(helm: str, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    return subprocess.run([helm, *args], capture_output=True, text=True, env=env, check=False)


def objects(helm: str, profile: str, home: Path) -> set[tuple[str, str]]:
    done = run(
        helm,
        "template",
        "gridloop",
        str(CHART),
        "--namespace=gridloop-system",
        f"--values={CHART / 'profiles' / f'{profile}.yaml'}",
        f"--set={UPSTREAM_OFF}",
        home=home,
    )
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    return {(d["kind"], d["metadata"]["name"]) for d in docs}


@pytest.mark.parametrize("values", [CHART / "profiles" / "minimal.yaml", EVERYTHING])
def test_helm3_lints_the_chart_clean(values: Path, tmp_path: Path) -> None:
    done = run(
        helm_binary("helm3"), "lint", "--strict", str(CHART), f"--values={values}", home=tmp_path
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert "funcMap fail" not in done.stderr  # a template `fail` only logs in lint


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_helm3_renders_every_profile_to_the_same_objects_as_helm4(
    profile: str, tmp_path: Path
) -> None:
    helm3 = objects(helm_binary("helm3"), profile, tmp_path)
    helm4 = objects(helm_binary("helm"), profile, tmp_path)

    assert helm3 == helm4 and helm3


def test_helm3_refuses_a_misspelt_key_naming_it(tmp_path: Path) -> None:
    done = run(
        helm_binary("helm3"),
        "template",
        "gridloop",
        str(CHART),
        f"--set={UPSTREAM_OFF},health.replicaz=2",
        home=tmp_path,
    )

    assert done.returncode != 0
    assert "additional properties 'replicaz' not allowed" in done.stderr

"""gridloop's wheel, installed as a user installs it: into a fresh virtualenv outside the
checkout, with no extras. It carries the chart, the policies and the example fleets as
package data and finds them there; its own dependencies are the health service's only
(gridloop's image installs exactly this), and a command that needs an extra says which.

Builds the wheel with pip and installs its dependencies from the package index (pip's
cache when warm): about 15 s (tests/wheel_venv.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from wheel_venv import REPO, install_wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The venv's bin/ with only gridloop's wheel (and its dependencies) installed."""
    return install_wheel(tmp_path_factory.mktemp("wheel"))


def _run(bin_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # outside the checkout, so nothing can be found through it
    return subprocess.run(
        [str(bin_dir / args[0]), *args[1:]],
        capture_output=True,
        text=True,
        cwd=bin_dir.parent,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(bin_dir.parent)},
    )


def _python(bin_dir: Path, code: str) -> subprocess.CompletedProcess[str]:
    return _run(bin_dir, "python", "-c", code)


def test_the_chart_policies_fleets_and_versions_come_from_the_package(installed: Path) -> None:
    found = _python(
        installed,
        "from gridloop import resources, versions\n"
        "for p in (resources.chart() / 'Chart.yaml', resources.chart() / 'profiles',"
        " resources.health_policy(), resources.default_fleet(), versions.versions_file()):\n"
        "    print(p.is_file() or p.is_dir(), p)",
    )

    assert found.returncode == 0, found.stderr
    site = str(installed.parent / "lib")
    for line in found.stdout.splitlines():
        exists, path = line.split(" ", 1)
        assert exists == "True" and path.startswith(site), line
        assert not path.startswith(str(REPO)), line


def test_only_the_health_services_libraries_are_installed(installed: Path) -> None:
    for present in ("kubernetes", "yaml", "prometheus_api_client", "prometheus_client"):
        assert _python(installed, f"import {present}").returncode == 0, present
    for absent in ("textual", "rich", "matplotlib", "grafana_foundation_sdk", "cryptography"):
        assert _python(installed, f"import {absent}").returncode != 0, f"{absent} is installed"

    service = _run(installed, "gridloop", "health", "run", "--help")
    assert service.returncode == 0, service.stderr
    assert "--prometheus-url" in service.stdout


def test_a_command_that_needs_an_extra_names_it_in_one_line(installed: Path) -> None:
    dashboards = _run(installed, "gridloop", "dashboards", "generate")

    assert dashboards.returncode == 2
    assert dashboards.stderr.strip().splitlines() == [
        "error: gridloop dashboards needs the 'cli' extra (grafana_foundation_sdk is not "
        "installed): pip install 'gridloop[cli]'"
    ]
    local = _run(installed, "gridloop", "local", "status")
    assert local.stderr.strip().splitlines() == [
        "error: gridloop local needs the 'local' extra (cryptography is not installed): "
        "pip install 'gridloop[local]'"
    ]
    helped = _run(installed, "gridloop", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "health" in helped.stdout and "not installed: the 'cli' extra" in helped.stdout

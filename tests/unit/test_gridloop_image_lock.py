"""gridloop's image installs its dependencies from a hashed lock (issue 37): every wheel
pinned by version and sha256 in images/gridloop/requirements.txt, and the lock still
satisfies what pyproject.toml asks for. The image build itself (`gridloop local build`,
run by `make test`) downloads with `--require-hashes` and installs with it again."""

from __future__ import annotations

import re
import tomllib

from chart_files import REPO
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from gridloop.local.build.images.gridloop_image import LOCK

# "name==version \" followed by its "--hash=sha256:..." lines
PIN = re.compile(
    r"^([A-Za-z0-9_.\-]+)==(\S+) \\\n((?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)", re.M
)


def _pins() -> dict[str, str]:
    text = (REPO / LOCK).read_text()
    pins = {canonicalize_name(m[1]): m[2] for m in PIN.finditer(text)}
    # every requirement line is a pin with its hashes: nothing unpinned, nothing unhashed
    requirement_lines = [
        line for line in text.splitlines() if line and not line.startswith((" ", "#"))
    ]
    assert len(requirement_lines) == len(pins), requirement_lines
    return pins


def test_every_dependency_of_the_image_is_pinned_with_its_hash() -> None:
    pins = _pins()
    assert "kubernetes" in pins and "prometheus-api-client" in pins


def test_the_lock_satisfies_pyprojects_dependencies() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = _pins()
    for line in project["dependencies"]:
        wanted = Requirement(line)
        name = canonicalize_name(wanted.name)
        assert name in pins, f"{LOCK} pins no {wanted.name} (pyproject.toml: {line})"
        assert wanted.specifier.contains(pins[name], prereleases=True), (
            f"{LOCK} pins {name}=={pins[name]}, outside pyproject.toml's {line}: re-lock it"
        )


def test_the_containerfile_installs_only_what_the_lock_names() -> None:
    text = (REPO / "Containerfile").read_text()
    assert "--no-index --require-hashes" in text and "-r /tmp/wheels/requirements.txt" in text
    # gridloop's own wheel is built here, so it has no hash to check: it goes in alone
    assert "--no-index --no-deps /tmp/wheels/gridloop-*.whl" in text

"""agent-sandbox's own Python client e2e tests, unchanged, against the chart's installation.

The tests are `test/e2e/clients/python` of the agent-sandbox Go module at the version
versions.yaml pins (read from the module proxy with its go.sum hash checked, like every
build of it), run by their own pytest from a copy of the module's files they read, with
only what they take from their environment set: `KUBECONFIG` (the local cluster),
`IMAGE_PREFIX` and `IMAGE_TAG` (the images they deploy: the router, and the Python runtime
their SandboxTemplate runs), and `kubectl` on PATH. What they run against is the chart's:
the agent-sandbox controller and its extensions (CRDs and Deployment as `gridloop bundle`
took them from the module), installed by `gridloop install --profile local`. What they
deploy themselves, in namespaces of their own, is upstream's test setup: their
SandboxTemplate and warm pools, and upstream's router manifest
(`sandbox_router.yaml`, its authorization left off as the tests ask).

The images they name as `<IMAGE_PREFIX><name>:<IMAGE_TAG>` are the bundle's own, given
those names in the local registry (a manifest put under a second name; no image is
built for this test): `sandbox-router` is the Go router built from the module's
`sandbox-router/cmd` (what its Makefile's `build-sandbox-router` builds; the manifest's
environment settings, written for the Python router, mean nothing to it, and it allows
every caller by default, as the tests' ALLOW_UNAUTHENTICATED_ROUTER asks),
`python-runtime-sandbox` the runtime built from the module's
`examples/python-runtime-sandbox`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import registry_images
from kubernetes.client.rest import ApiException

from gridloop import versions
from gridloop.bundle import modules
from gridloop.local.build.images import python_images, table

pytestmark = pytest.mark.cluster

TESTS = "test/e2e/clients/python"
# what the tests read from the module besides themselves, by paths from its root
READS = (
    TESTS,
    "clients/python/agentic-sandbox-client/sandbox-router/sandbox_router.yaml",
    "clients/python/agentic-sandbox-client/gateway-kind",
)
PACKAGES = ("test/__init__.py", "test/e2e/__init__.py", "test/e2e/clients/__init__.py")
PREFIX = "registry.k8s.io/agent-sandbox/"
NAMESPACE_PREFIX = "py-sdk-e2e-"  # their temporary namespaces

GATEWAY = (
    "needs a Gateway of class cloud-provider-kind (gateway-kind.yaml: kind's cloud "
    "provider) to get an address; no Gateway API implementation runs here"
)
# upstream's tests, as pytest names them, that this machine can run: each must pass
PASSES = (
    "test_e2e_python_sdk.py::test_python_sdk_router_mode",
    "test_e2e_python_sdk.py::test_python_sdk_annotation",
    "test_e2e_python_sdk.py::test_python_sdk_router_mode_warmpool",
)
# and the ones it cannot, with why (docs/sandboxes.md lists both)
CANNOT_RUN = {
    "test_e2e_python_sdk.py::test_python_sdk_gateway_mode": GATEWAY,
    "test_e2e_python_sdk.py::test_python_sdk_gateway_mode_warmpool": GATEWAY,
    "test_async_client_e2e.py::test_async_client_concurrent_sandbox_creation": (
        f"the async client takes only the Gateway connection: it {GATEWAY}"
    ),
    "test_async_client_e2e.py::test_async_client_event_loop_not_blocked": (
        f"the async client takes only the Gateway connection: it {GATEWAY}"
    ),
    "test_e2e_python_sdk.py::test_python_sdk_volume_claim_templates": (
        "its sandbox mounts a PersistentVolumeClaim a dynamic provisioner must bind; the "
        "local cluster has no StorageClass, so the claim stays Pending"
    ),
}


def upstream_tests(into: Path) -> Path:
    """The files the tests read, copied from the pinned module into `into`, laid out as in
    the module (the tests open them by paths from its root)."""
    module = modules.module_dir(versions.get("agent-sandbox"))
    for path in (*READS, *PACKAGES):
        source, target = module / path, into / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copyfile(source, target)
    return into


def outcomes(junit: Path) -> dict[str, str]:
    """`file::test` -> passed, failed, error or skipped, from pytest's JUnit report."""
    found = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}.py::{case.get('name')}"
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        found[name] = {"failure": "failed"}.get(kinds[0], kinds[0]) if kinds else "passed"
    return found


@pytest.fixture
def their_namespaces_removed(local_cluster: Any) -> Iterator[None]:
    """Their fixtures delete the namespaces they make; if a run is cut short, this does."""
    yield
    for ns in local_cluster.core.list_namespace().items:
        if ns.metadata.name.startswith(NAMESPACE_PREFIX):
            try:
                local_cluster.core.delete_namespace(ns.metadata.name)
            except ApiException as err:
                if err.status != 404:
                    raise


def test_upstreams_python_client_e2e_tests_pass_against_the_chart(
    local_cluster: Any, kueue_platform: Any, tmp_path: Path, their_namespaces_removed: None
) -> None:
    root = upstream_tests(tmp_path / "agent-sandbox")
    tag = versions.get("agent-sandbox").version
    port = local_cluster.state.ports.registry
    runtime = python_images.by_name(python_images.RUNTIME).ref
    for name, ref in (("sandbox-router", table.router_ref()), ("python-runtime-sandbox", runtime)):
        registry_images.alias(port, ref, f"{PREFIX}{name}:{tag}")
    env = {
        **os.environ,
        "KUBECONFIG": str(local_cluster.kubeconfig),
        "PATH": f"{local_cluster.state.dir / 'bin'}:{os.environ['PATH']}",
        "IMAGE_PREFIX": PREFIX,
        "IMAGE_TAG": tag,
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    pytest_argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", TESTS]

    listed = subprocess.run(
        [*pytest_argv, "--collect-only", "-q"], cwd=root, env=env, capture_output=True, text=True
    )
    collected = {
        line.removeprefix(f"{TESTS}/") for line in listed.stdout.splitlines() if "::" in line
    }
    # a new version's tests are noticed here, and sorted into one list or the other
    assert collected == {*PASSES, *CANNOT_RUN}, listed.stdout + listed.stderr

    junit = tmp_path / "junit.xml"
    deselect = [arg for test in CANNOT_RUN for arg in ("--deselect", f"{TESTS}/{test}")]
    run = subprocess.run(
        [*pytest_argv, *deselect, "-v", f"--junitxml={junit}", "-o", "junit_family=xunit2"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert outcomes(junit) == dict.fromkeys(PASSES, "passed"), run.stdout[-6000:] + run.stderr

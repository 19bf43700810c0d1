"""`gridloop bundle --digests-from local`: the bundle pins every image by the digest the
local cluster's registry holds, the chart renders `image@sha256:...`, and a container node
pulls an image by that digest (containerd asks the local registry for exactly it)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from container_pods import pod_spec

from doc_blocks import doc_block
from gridloop.bundle import digests
from gridloop.local.build.images import gridloop_image, registry

pytestmark = pytest.mark.cluster

# not built on this machine: the GPU exporter's and vLLM's GPU image (the local cluster
# runs the simulator and vLLM's CPU build instead)
NOT_LOCAL = {"nvcr.io/nvidia/k8s/dcgm-exporter", "vllm/vllm-openai"}


def manifest_digest(port: int, image: str) -> str:
    """The sha256 of the manifest's own bytes, as the registry serves them for the tag."""
    host, repository, tag = registry.ref_parts(image)
    url = f"http://127.0.0.1:{port}/v2/{host}/{repository}/manifests/{tag}"
    request = urllib.request.Request(url, headers={"Accept": registry.MANIFEST_TYPES})
    with urllib.request.urlopen(request, timeout=10) as response:
        return "sha256:" + hashlib.sha256(response.read()).hexdigest()


@dataclass(frozen=True)
class Pinned:
    out: Path  # the folder `gridloop bundle` wrote (./dist where the block ran)
    said: str  # what the block's bundle command printed
    rendered: str  # what its render pipeline printed: each image once


@pytest.fixture(scope="module")
def pinned(local_cluster, tmp_path_factory) -> Pinned:
    """docs/chart.md's block, run in a fresh folder: the bundle command, then the render
    pipeline, with $GRIDLOOP_STATE naming the container lane's cluster."""
    here = tmp_path_factory.mktemp("digests")
    env = {
        **os.environ,
        "GRIDLOOP_STATE": str(local_cluster.state.dir),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    said = []
    for command in commands(doc_block("docs/chart.md", "Images pinned by digest")):
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", command],
            cwd=here,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, f"{command}: {done.stderr}"
        said.append(done.stdout)
    bundle_said, rendered = said
    return Pinned(here / "dist", bundle_said, rendered)


def commands(block: str) -> list[str]:
    return [line.removeprefix("$ ") for line in block.splitlines() if line.startswith("$ ")]


def test_the_bundle_lists_each_image_the_local_registry_holds_by_its_digest(
    local_cluster, pinned
) -> None:
    port = local_cluster.state.ports.registry
    listed = (pinned.out / "images.txt").read_text().split()
    by_digest = [line for line in listed if "@" in line]
    by_tag = [line for line in listed if "@" not in line]

    assert {line.rsplit(":", 1)[0] for line in by_tag} == NOT_LOCAL
    assert f"not in http://127.0.0.1:{port}, pinned by tag only: " in pinned.said
    assert len(by_digest) >= 5, listed  # Kueue, KubeRay, agent-sandbox, gridloop, sandboxes
    for line in by_digest:
        image, digest = line.split("@")
        assert digest == manifest_digest(port, image), line


def test_render_shows_every_image_of_the_local_profile_by_its_digest(pinned) -> None:
    shown = set(re.findall(r"^image: [\"']?([^\"'\s]+)", pinned.rendered, re.M))
    assert len(shown) >= 5, shown
    unpinned = [image for image in shown if not re.search(r"@sha256:[0-9a-f]{64}$", image)]
    assert not unpinned, unpinned
    assert shown <= set((pinned.out / "images.txt").read_text().split())


def test_a_container_node_pulls_gridloops_image_by_the_pinned_digest(
    local_cluster, pinned, namespace, eventually
) -> None:
    ref = gridloop_image.image_ref()
    (line,) = [
        x for x in (pinned.out / "images.txt").read_text().split() if x.startswith(f"{ref}@")
    ]
    digest = line.split("@")[1]
    spec = pod_spec("by-digest", ["python3", "-c", "import gridloop; print(gridloop.__name__)"])
    container = spec["spec"]["containers"][0]
    container["image"] = line
    container["securityContext"]["runAsUser"] = 65532
    core = local_cluster.core
    core.create_namespaced_pod(namespace, spec)

    def finished() -> str | None:
        pod = core.read_namespaced_pod("by-digest", namespace)
        return pod.status.phase if pod.status.phase in ("Succeeded", "Failed") else None

    assert eventually(finished, "the pod pulled by digest to finish", 120) == "Succeeded"
    assert core.read_namespaced_pod_log("by-digest", namespace).strip() == "gridloop"
    (status,) = core.read_namespaced_pod("by-digest", namespace).status.container_statuses
    assert status.image_id.endswith(f"@{digest}"), status.image_id
    assert digests.DIGEST.fullmatch(digest)

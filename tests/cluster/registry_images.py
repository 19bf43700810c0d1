"""Images taken out of the local cluster's registry, as if built after `local up`: the
README's path builds an image on a running cluster and needs the build to push it."""

from __future__ import annotations

import urllib.request

from gridloop.local.build.images import registry
from gridloop.local.ports import LOOPBACK


def forget(port: int, ref: str) -> None:
    """Delete `ref`'s manifest from the registry on `port` (its layers stay)."""
    host, repository, tag = registry.ref_parts(ref)
    manifest = f"http://{LOOPBACK}:{port}/v2/{host}/{repository}/manifests"
    head = urllib.request.Request(
        f"{manifest}/{tag}", method="HEAD", headers={"Accept": registry.MANIFEST_TYPES}
    )
    with urllib.request.urlopen(head, timeout=5) as found:
        digest = found.headers["Docker-Content-Digest"]
    urllib.request.urlopen(
        urllib.request.Request(f"{manifest}/{digest}", method="DELETE"), timeout=5
    ).close()
    assert not holds(port, ref)


def holds(port: int, ref: str) -> bool:
    return registry.has(port, *registry.ref_parts(ref))

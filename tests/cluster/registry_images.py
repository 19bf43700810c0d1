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


def alias(port: int, ref: str, new_ref: str) -> None:
    """Make `new_ref` name the image `ref` names, in the registry on `port`: its blobs
    mounted across repositories (nothing copied), its manifest put under the new name."""
    import json

    host, repository, tag = registry.ref_parts(ref)
    new_host, new_repository, new_tag = registry.ref_parts(new_ref)
    base = f"http://{LOOPBACK}:{port}/v2"
    source, target = f"{host}/{repository}", f"{new_host}/{new_repository}"
    get = urllib.request.Request(
        f"{base}/{source}/manifests/{tag}", headers={"Accept": registry.MANIFEST_TYPES}
    )
    with urllib.request.urlopen(get, timeout=10) as resp:
        body, media_type = resp.read(), resp.headers["Content-Type"]
    manifest = json.loads(body)
    assert "layers" in manifest, f"{ref} is not a single image manifest: {media_type}"
    for blob in [manifest["config"], *manifest["layers"]]:
        mount = urllib.request.Request(
            f"{base}/{target}/blobs/uploads/?mount={blob['digest']}&from={source}",
            method="POST",
        )
        with urllib.request.urlopen(mount, timeout=10) as resp:
            assert resp.status == 201, f"{blob['digest']} not mounted into {target}"
    put = urllib.request.Request(
        f"{base}/{target}/manifests/{new_tag}",
        data=body,
        method="PUT",
        headers={"Content-Type": media_type},
    )
    urllib.request.urlopen(put, timeout=10).close()
    assert holds(port, new_ref)

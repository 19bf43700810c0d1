"""The local image registry: CNCF distribution on 127.0.0.1, its storage in the cache.

Its storage lives in the build cache (`<cache>/registry/`), not in a cluster's state:
an image pushed once is there for every later cluster, and `down --purge` keeps it.
It listens on loopback only; the container nodes' containerd reach it there, since they
run in the host's network namespace.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import yaml

from gridloop import paths
from gridloop.bundle.digests import MANIFEST_TYPES  # what a registry may answer for a tag
from gridloop.local.ports import LOOPBACK


def storage() -> Path:
    return paths.cache_root() / "registry"


def config(port: int, root: Path) -> str:
    doc = {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(root)}, "delete": {"enabled": True}},
        "http": {"addr": f"{LOOPBACK}:{port}"},
    }
    return yaml.safe_dump(doc, sort_keys=False)


def argv(binary: Path, config_file: Path) -> list[str]:
    return [str(binary), "serve", str(config_file)]


def health_url(port: int) -> str:
    return f"http://{LOOPBACK}:{port}/v2/"


def ref_parts(ref: str) -> tuple[str, str, str]:
    """`ghcr.io/gridloop/x:1.0` -> ("ghcr.io", "gridloop/x", "1.0"): the registry a
    reference names, its repository there and the tag; the local registry stores the image
    under the path `<registry>/<repository>`."""
    host, rest = ref.split("/", 1)
    repository, tag = rest.rsplit(":", 1)
    return host, repository, tag


def pulled_bytes(port: int, ref: str) -> int:
    """What a node downloads for `ref`: the sum of its compressed layers and config, from
    the manifest the registry serves."""
    import json

    host, repository, tag = ref_parts(ref)
    url = f"http://{LOOPBACK}:{port}/v2/{host}/{repository}/manifests/{tag}"
    req = urllib.request.Request(url, headers={"Accept": MANIFEST_TYPES})
    with urllib.request.urlopen(req, timeout=5) as resp:
        manifest = json.loads(resp.read())
    parts = [*manifest.get("layers", []), manifest.get("config", {})]
    return sum(int(p.get("size", 0)) for p in parts)


def has(port: int, registry: str, repository: str, tag: str) -> bool:
    """Whether the registry holds `registry/repository:tag` (stored under that path)."""
    url = f"http://{LOOPBACK}:{port}/v2/{registry}/{repository}/manifests/{tag}"
    req = urllib.request.Request(url, method="HEAD", headers={"Accept": MANIFEST_TYPES})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False

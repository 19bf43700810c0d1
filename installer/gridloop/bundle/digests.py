"""Every image of a bundle pinned by its digest, read from a registry that holds them
(`gridloop bundle --digests-from`): the pure part decides where to look and what the
answers mean; `head` is the one call that asks.

The registry holds each image under its full name, `<registry>/<image>`: the layout
`imageRegistry` pulls from (an air-gapped mirror filled from images.txt) and the local
cluster's own registry. An image listed without a registry host (`vllm/vllm-openai:...`)
is looked for as listed, then under Docker Hub's full name (`docker.io/vllm/...`).
What is found goes into the chart as `upstream/digests.yaml`; the chart then renders
`<image>@sha256:...` for it (templates/_helpers.tpl `gridloop.image`, upstream.yaml).
"""

from __future__ import annotations

import hashlib
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gridloop.errors import UsageError

FILE = "digests.yaml"  # under the bundled chart's upstream/
# what a registry may answer for a tag: a single manifest or an index (multi-arch)
MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    ]
)
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
TIMEOUT = 10.0  # seconds per request (a registry nearby answers in milliseconds)


@dataclass(frozen=True)
class Registry:
    base: str  # scheme://host[:port]
    prefix: str  # the path every image sits under ("" for none)
    shown: str  # as the user gave it

    def manifest_url(self, repository: str, reference: str) -> str:
        path = "/".join(p for p in (self.prefix, repository) if p)
        return f"{self.base}/v2/{path}/manifests/{reference}"


@dataclass(frozen=True)
class Resolved:
    digests: dict[str, str]  # image as listed -> sha256:...
    missing: list[str]  # images the registry does not hold

    def pinned(self, image: str) -> str:
        digest = self.digests.get(image)
        return f"{image}@{digest}" if digest else image


# url -> the manifest's digest, or None when the registry does not hold it
Head = Callable[[str], "str | None"]


def registry(text: str) -> Registry:
    """`http://127.0.0.1:26413` or `https://mirror.example/prefix`; a bare host is https."""
    given = text if "://" in text else f"https://{text}"
    parts = urllib.parse.urlsplit(given)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"--digests-from {text}: not a registry URL (http://HOST:PORT[/PATH])")
    if parts.query or parts.fragment:
        raise UsageError(f"--digests-from {text}: a registry URL has no query or fragment")
    return Registry(f"{parts.scheme}://{parts.netloc}", parts.path.strip("/"), text)


def split(image: str) -> tuple[str, str] | None:
    """(repository, tag) of a tagged image; None for one already pinned by digest."""
    if "@" in image:
        return None
    slash = image.rfind("/")
    colon = image.rfind(":")
    if colon > slash:
        return image[:colon], image[colon + 1 :]
    return image, "latest"


def places(repository: str) -> list[str]:
    """Where a registry laid out as `<registry>/<image>` may hold `repository`."""
    first = repository.split("/", 1)[0]
    if "/" in repository and ("." in first or ":" in first or first == "localhost"):
        return [repository]  # it names its registry
    hub = repository if "/" in repository else f"library/{repository}"
    return [repository, f"docker.io/{hub}"]


def resolve(images: Iterable[str], where: Registry, head: Head) -> Resolved:
    digests: dict[str, str] = {}
    missing: list[str] = []
    for image in sorted(set(images)):
        parsed = split(image)
        if parsed is None:
            continue  # already pinned
        repository, tag = parsed
        for place in places(repository):
            digest = head(where.manifest_url(place, tag))
            if digest is not None:
                digests[image] = digest
                break
        else:
            missing.append(image)
    return Resolved(digests, missing)


def file_text(resolved: Resolved) -> str:
    """upstream/digests.yaml: what the chart reads (sorted, one image per line)."""
    lines = ["# written by gridloop bundle --digests-from; the chart renders image@digest", ""]
    lines.append("images:" + ("" if resolved.digests else " {}"))
    lines += [f'  "{image}": "{d}"' for image, d in sorted(resolved.digests.items())]
    return "\n".join(lines) + "\n"


def head(url: str) -> str | None:
    """The digest of the manifest at `url` (Docker-Content-Digest, or the bytes' own
    sha256 when the registry leaves that header out); None when it is not there."""
    request = urllib.request.Request(url, method="HEAD", headers={"Accept": MANIFEST_TYPES})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            digest = str(response.headers.get("Docker-Content-Digest", ""))
        if not digest:
            get = urllib.request.Request(url, headers={"Accept": MANIFEST_TYPES})
            with urllib.request.urlopen(get, timeout=TIMEOUT) as response:
                digest = "sha256:" + hashlib.sha256(response.read()).hexdigest()
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise UsageError(f"--digests-from: {url} answered {err.code} {err.reason}") from err
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise UsageError(f"--digests-from: cannot reach {url}: {reason}") from err
    if not DIGEST.fullmatch(digest):
        raise UsageError(f"--digests-from: {url} answered a digest that is not sha256: {digest}")
    return digest

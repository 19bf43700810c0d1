"""Object-storage URIs of model weights (pure): what `models push` and the chart accept."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gridloop.errors import UsageError

# S3's bucket naming rules: 3-63 characters, lower-case letters, digits, dots, hyphens
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


@dataclass(frozen=True)
class S3Uri:
    bucket: str
    prefix: str  # no leading slash; ends with "/" unless empty

    def key(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def parse_s3(uri: str, field: str) -> S3Uri:
    """`s3://bucket/some/prefix/` -> S3Uri; anything else is refused naming `field`."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        raise UsageError(f"{field}: {uri!r} is not a URI; give s3://BUCKET/PREFIX/")
    if scheme != "s3":
        raise UsageError(
            f"{field}: {scheme}:// is not supported here; the local object store and "
            "`gridloop models push` speak S3 only (s3://BUCKET/PREFIX/)"
        )
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise UsageError(f"{field}: {bucket!r} is not an S3 bucket name (3-63 of a-z 0-9 . -)")
    parts = [p for p in prefix.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise UsageError(f"{field}: {uri!r} has a '.' or '..' segment")
    return S3Uri(bucket, "".join(f"{p}/" for p in parts))

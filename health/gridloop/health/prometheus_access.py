"""How the health service reaches a Prometheus that wants TLS and a token.

Managed Prometheus and kube-prometheus installs usually answer only over HTTPS, often
behind a proxy that checks a bearer token (kube-rbac-proxy, with a TokenReview and a
SubjectAccessReview), sometimes asking for a client certificate (Prometheus's own
`web.config.file`). `Access` is what the service was told (`gridloop health run
--prometheus-ca-file/--prometheus-cert-file/--prometheus-key-file/--prometheus-token-file`;
the chart mounts them from `health.prometheus`); `problem` checks it before the service
starts; `auth` sends the token, read again at every request, since a projected
ServiceAccount token is rotated by the kubelet while the service runs. `gridloop status`
takes the same flags (`add_flags`, `from_args`). Light to import: requests only when a
session is made.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import requests

FLAGS = {  # flag -> what it is
    "--prometheus-ca-file": "the CA that signed Prometheus's certificate (https; default: "
    "the system's)",
    "--prometheus-cert-file": "a client certificate Prometheus asks for",
    "--prometheus-key-file": "the client certificate's key",
    "--prometheus-token-file": "a bearer token sent with every query, read again each time "
    "(a projected ServiceAccount token rotates)",
}


def add_flags(parser: argparse.ArgumentParser) -> None:
    for flag, help in FLAGS.items():
        parser.add_argument(flag, type=Path, help=help)


def from_args(args: argparse.Namespace, url: str | None) -> Access:
    """The flags' Access, or a UsageError naming the flag that is wrong."""
    from gridloop.errors import UsageError

    access = Access(
        args.prometheus_ca_file,
        args.prometheus_cert_file,
        args.prometheus_key_file,
        args.prometheus_token_file,
    )
    problem = access.problem(url or "")
    if problem:
        raise UsageError(problem)
    return access


@dataclass(frozen=True)
class Access:
    ca_file: Path | None = None  # the CA that signed Prometheus's certificate
    cert_file: Path | None = None  # the client certificate Prometheus asks for, and its key
    key_file: Path | None = None
    token_file: Path | None = None  # a bearer token, sent with every query

    def files(self) -> dict[str, Path | None]:
        """Each flag of FLAGS with the file it names (None: not given)."""
        named = (self.ca_file, self.cert_file, self.key_file, self.token_file)
        return dict(zip(FLAGS, named, strict=True))

    def problem(self, url: str) -> str | None:
        """One line naming the flag that is wrong, or None."""
        for flag, path in self.files().items():
            if path is not None and not path.is_file():
                return f"{flag} {path}: no such file"
        if (self.cert_file is None) != (self.key_file is None):
            given = "--prometheus-cert-file" if self.cert_file else "--prometheus-key-file"
            return f"{given}: needs the other of --prometheus-cert-file and --prometheus-key-file"
        tls = self.ca_file or self.cert_file
        if tls and url and not url.startswith("https://"):
            return f"--prometheus-url {url}: TLS files given, so an https:// URL is expected"
        return None


class TokenFile:
    """`Authorization: Bearer <the file's content>`, read at each request (a requests
    auth: any callable that takes and returns the request)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers["Authorization"] = f"Bearer {self.path.read_text().strip()}"
        return request


def session(access: Access) -> requests.Session:
    """A session that checks Prometheus's certificate against `ca_file` (else the system's
    CAs) and presents the client certificate, if any."""
    import requests

    s = requests.Session()
    s.verify = str(access.ca_file) if access.ca_file else True
    if access.cert_file and access.key_file:
        s.cert = (str(access.cert_file), str(access.key_file))
    return s


def auth(access: Access) -> TokenFile | None:
    return TokenFile(access.token_file) if access.token_file else None

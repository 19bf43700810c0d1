"""The images the local cluster builds, one row each (pure).

A row names the image exactly as a cluster pulls it (`registry.k8s.io/pause:3.10.1`):
containerd on the container nodes takes those registries from the local one
(container/configs.registry_hosts), so nothing is renamed for the local cluster. Each
row is built `FROM scratch` out of files from the build cache (a static program), so
no base image is fetched from anywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gridloop import versions

# busybox applets the test pods use; each becomes a link to /bin/busybox
BUSYBOX_APPLETS = (
    "sh",
    "httpd",
    "cat",
    "dmesg",
    "echo",
    "env",
    "hostname",
    "id",
    "ls",
    "nc",
    "nslookup",
    "ps",
    "sleep",
    "touch",
    "uname",
    "wget",
    "grep",
    "head",
    "true",
    "false",
    "test",
    "mkdir",
)


# the users the images run as, by name: root, nobody, and the images' own non-root user
PASSWD = (
    "root:x:0:0:root:/root:/bin/sh\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
    "gridloop:x:65535:65535:gridloop:/tmp:/bin/sh\n"
)
GROUP = "root:x:0:\nnobody:x:65534:\ngridloop:x:65535:\n"


@dataclass(frozen=True)
class Image:
    """One image: `ref` as the cluster pulls it; `files` (path in the image -> a binary
    of the build cache, by its binary name); `links` (path -> target)."""

    ref: str
    files: dict[str, str]
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...] = ()
    user: str = "65535:65535"
    links: dict[str, str] = field(default_factory=dict)
    # path in the image -> its text (small files such as /etc/passwd)
    texts: dict[str, str] = field(default_factory=dict)
    # folders the image has, world-writable with the sticky bit, as /tmp is
    scratch_dirs: tuple[str, ...] = ()
    why: str = ""

    @property
    def registry(self) -> str:
        return self.ref.split("/", 1)[0]

    @property
    def repository(self) -> str:
        return self.ref.split("/", 1)[1].rsplit(":", 1)[0]

    @property
    def tag(self) -> str:
        return self.ref.rsplit(":", 1)[1]

    def fingerprint(self, digest_of: Callable[[str], str]) -> str:
        """What the image is made of: a changed binary (by content) or setting rebuilds it."""
        parts = [self.ref, *self.entrypoint, "|", *self.cmd, self.user]
        parts += [f"{p}={digest_of(name)}" for p, name in sorted(self.files.items())]
        parts += [f"{p}->{t}" for p, t in sorted(self.links.items())]
        parts += [f"{p}:{t}" for p, t in sorted(self.texts.items())]
        parts += list(self.scratch_dirs)
        return "|".join(parts)


def upstream_version(debian_version: str) -> str:
    """`1:1.35.0-4+deb12u1+b1` -> `1.35.0` (no epoch, no Debian revision)."""
    bare = debian_version.split(":", 1)[-1]
    return bare.rsplit("-", 1)[0] if "-" in bare else bare


def pause_ref(pause_version: str) -> str:
    return f"registry.k8s.io/pause:{pause_version}"


def busybox_ref() -> str:
    return f"ghcr.io/gridloop/busybox:{upstream_version(versions.get('busybox').version)}"


def images(pause_version: str) -> tuple[Image, ...]:
    return (
        Image(
            ref=pause_ref(pause_version),
            files={"/pause": "pause"},
            entrypoint=("/pause",),
            why="the pod sandbox image containerd pins (build/pause of the kubernetes module)",
        ),
        Image(
            ref=busybox_ref(),
            files={"/bin/busybox": "busybox"},
            links={f"/bin/{applet}": "busybox" for applet in BUSYBOX_APPLETS},
            texts={"/etc/passwd": PASSWD, "/etc/group": GROUP},
            scratch_dirs=("/tmp",),
            entrypoint=(),
            cmd=("/bin/sh",),
            why="a shell for the local cluster's test pods (Debian's busybox-static)",
        ),
    )

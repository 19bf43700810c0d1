"""The images the local cluster builds, one row each (pure).

A row names the image exactly as a cluster pulls it (`registry.k8s.io/pause:3.10.1`,
`registry.k8s.io/kueue/kueue:v0.19.2`: the bundle's pins): containerd on the container
nodes takes those registries from the local one (container/configs.registry_hosts), so
nothing is renamed for the local cluster. Each row is built `FROM scratch` out of files
from the build cache (static programs built from their Go modules), so no base image is
fetched from anywhere. These images are rebuilt locally, not pulled: the upstream
controllers' released images are distroless (static-debian or base-debian12) with the
same program at the same path, run as 65532.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gridloop import versions
from gridloop.local.build.recipes import KAITO_MODELS, KAITO_WORKSPACE

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
    "nonroot:x:65532:65532:nonroot:/tmp:/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
    "gridloop:x:65535:65535:gridloop:/tmp:/bin/sh\n"
)
GROUP = "root:x:0:\nnonroot:x:65532:\nnobody:x:65534:\ngridloop:x:65535:\n"


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


# upstream controllers the chart deploys: (component, binary in the build cache, path in
# the image as upstream's Dockerfile puts it); the name and tag are the bundle's pin
CONTROLLERS = (
    ("kueue", "kueue", "/manager"),
    ("kuberay", "kuberay-operator", "/manager"),
    ("agent-sandbox", "agent-sandbox-controller", "/agent-sandbox-controller"),
)
NONROOT = "65532:65532"  # distroless' nonroot, as upstream's images run


def controller_ref(component: str) -> str:
    """The image the bundle pins the component's controller to (bundle/sources.py)."""
    from gridloop.bundle.sources import source_for

    pin = source_for(component).pin
    assert pin is not None, component
    return pin.for_version(versions.get(component).version)


def controllers() -> tuple[Image, ...]:
    return tuple(
        _controller(component, {path: binary}, path, "its Go module")
        for component, binary, path in CONTROLLERS
    )


def _controller(component: str, files: dict[str, str], entry: str, source: str) -> Image:
    return Image(
        ref=controller_ref(component),
        files=files,
        entrypoint=(entry,),
        user=NONROOT,
        texts={"/etc/passwd": PASSWD, "/etc/group": GROUP},
        scratch_dirs=("/tmp",),
        why=f"{component}'s controller, built from {source} (recipes.py)",
    )


# agent-sandbox's Go router, named as upstream's release names it (its README: the image
# is `sandbox-router-go`, apart from the retired Python router's `sandbox-router`)
ROUTER_REPOSITORY = "registry.k8s.io/agent-sandbox/sandbox-router-go"
ROUTER_BINARY = "sandbox-router"


def router_ref() -> str:
    return f"{ROUTER_REPOSITORY}:{versions.get('agent-sandbox').version}"


def router() -> Image:
    """The router as upstream's sandbox-router/Dockerfile lays it out: /sandbox-router,
    distroless' nonroot user."""
    return _one_binary(
        router_ref(),
        ROUTER_BINARY,
        "agent-sandbox's Go sandbox router, built from its Go module (recipes.py)",
    )


def _one_binary(ref: str, binary: str, why: str) -> Image:
    """`/<binary>` FROM scratch, run as distroless' nonroot user, as upstream lays out
    its Go images."""
    return Image(
        ref=ref,
        files={f"/{binary}": binary},
        entrypoint=(f"/{binary}",),
        user=NONROOT,
        texts={"/etc/passwd": PASSWD, "/etc/group": GROUP},
        scratch_dirs=("/tmp",),
        why=why,
    )


# the local cluster's DNS (container/addons.py), named as upstream's release names it
COREDNS_REPOSITORY = "registry.k8s.io/coredns/coredns"
COREDNS_BINARY = "coredns"


def coredns_ref() -> str:
    return f"{COREDNS_REPOSITORY}:{versions.get('coredns').version}"


def coredns() -> Image:
    """CoreDNS as upstream's Dockerfile lays it out (/coredns, distroless' nonroot user),
    with the plugins the local Corefile uses (recipes.py)."""
    return _one_binary(
        coredns_ref(),
        COREDNS_BINARY,
        "the local cluster's DNS, CoreDNS built from its Go module (recipes.py)",
    )


def on_request() -> tuple[Image, ...]:
    """Controller images built only once their binary is (`gridloop local build kaito
    --mirror DIR`: its source is a release archive no registry serves), then pushed by
    `local up` and `local build` like the rest. KAITO's as upstream's Dockerfile lays it
    out: /manager, and the preset catalogue beside it."""
    files = {"/manager": KAITO_WORKSPACE, f"/{KAITO_MODELS}": KAITO_MODELS}
    return (_controller("kaito", files, "/manager", "its release archive (a mirror)"),)


def images(pause_version: str) -> tuple[Image, ...]:
    """The images built FROM scratch: the pause image, a busybox for tests, the upstream
    controllers and the local cluster's CoreDNS (gridloop's own image is built from its
    Containerfile)."""
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
        *controllers(),
        router(),
        coredns(),
    )

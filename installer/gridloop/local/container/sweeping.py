"""What `down` leaves behind of the container nodes: nothing.

A probe showed what outlives a kubelet and containerd: shims, pause processes, gVisor
sandboxes, CNI network namespaces, overlay and tmpfs mounts, shim sockets, the bridge.
`sweep` removes each, in the order that lets the next go: processes (by cgroup, see
cgroups.py), then mounts below the node's folder (deepest first; the network namespaces
are among them, containerd keeps them under its state), then the shim sockets and the
kubelet's log links outside it, then the bridge. `leftovers` says what is still there,
for `down`'s check and for the tests.

The planning is pure (mountinfo text and paths in, lists out); the sweep is the shell.
"""

from __future__ import annotations

import contextlib
import hashlib
import socket
import stat
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gridloop.local.container import cgroups, hostnet, kube_chains
from gridloop.local.container.layout import SOCKETS_ROOT, NodeLayout

MOUNTINFO = Path("/proc/self/mountinfo")
SHIM_SOCKETS = Path("/run/containerd/s")  # containerd's defaults.DefaultStateDir + "/s"
RULES_RECORD = SOCKETS_ROOT / "kubelet-chains.json"  # machine-wide (kube_chains.py)
CONTAINER_LOG_LINKS = Path("/var/log/containers")  # the kubelet's, compiled in
TASKS = "io.containerd.runtime.v2.task"


def _unescape(field_: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field_ = field_.replace(code, char)
    return field_


def mounts_below(mountinfo: str, roots: Iterable[Path]) -> list[str]:
    """Mount points at or below any of `roots`, deepest first (pure)."""
    prefixes = [str(r).rstrip("/") for r in roots]
    found = []
    for line in mountinfo.splitlines():
        parts = line.split()
        if len(parts) < 5:
            continue
        point = _unescape(parts[4])
        if any(point == p or point.startswith(p + "/") for p in prefixes):
            found.append(point)
    return sorted(set(found), key=lambda p: (-p.count("/"), p))


def shim_socket(containerd_socket: Path, namespace: str, task: str, debug: bool = False) -> Path:
    """Where a shim of containerd at `containerd_socket` listens for task `namespace/task`:
    containerd's shim.SocketAddress, the sha256 of that path under its compiled-in root
    (pure)."""
    key = f"{containerd_socket}/{namespace}/{task}" + ("/debug" if debug else "")
    return SHIM_SOCKETS / hashlib.sha256(key.encode()).hexdigest()


def shim_sockets(layout: NodeLayout) -> list[Path]:
    """The shim sockets of the node's tasks (`<state>/io.containerd.runtime.v2.task/<ns>/<id>`):
    the address each shim reported (its `address` file, where there is one), and the ones
    containerd's naming gives every task (gVisor's sandbox writes no address file)."""
    out: set[Path] = set()
    for task in sorted((layout.containerd_state / TASKS).glob("*/*")):
        for debug in (False, True):
            out.add(shim_socket(layout.containerd_socket, task.parent.name, task.name, debug))
        with contextlib.suppress(OSError):
            text = (task / "address").read_text().strip()
            if text.startswith("unix://"):
                out.add(Path(text.removeprefix("unix://")))
    return sorted(out)


def log_links(layout: NodeLayout, links: Path = CONTAINER_LOG_LINKS) -> list[Path]:
    """The kubelet's links in /var/log/containers that point into this node's pod logs."""
    if not links.is_dir():
        return []
    out = []
    for link in sorted(links.iterdir()):
        with contextlib.suppress(OSError):
            # by path, not by text: `<pod_logs>-old/...` is not below `<pod_logs>`
            if link.is_symlink() and link.readlink().is_relative_to(layout.pod_logs):
                out.append(link)
    return out


@dataclass
class Leftovers:
    processes: dict[str, set[int]] = field(default_factory=dict)
    mounts: list[str] = field(default_factory=list)
    sockets: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    addresses: list[str] = field(default_factory=list)  # this cluster's, on the bridge
    rules: list[str] = field(default_factory=list)  # the kubelets' iptables chains

    def __bool__(self) -> bool:
        return bool(
            any(self.processes.values())
            or self.mounts
            or self.sockets
            or self.links
            or self.addresses
            or self.rules
        )

    def describe(self) -> str:
        parts = [f"{len(p)} processes of {n}" for n, p in self.processes.items() if p]
        parts += [f"{len(self.mounts)} mounts"] if self.mounts else []
        parts += [f"{len(self.sockets)} sockets"] if self.sockets else []
        parts += [f"{len(self.links)} log links"] if self.links else []
        parts += [f"addresses {', '.join(self.addresses)} on the bridge"] if self.addresses else []
        parts += [f"iptables chains {', '.join(self.rules)}"] if self.rules else []
        return ", ".join(parts)


@dataclass(frozen=True)
class Network:
    """The cluster's part of the host bridge: its nodes' addresses in its pod subnet."""

    node_ips: tuple[str, ...]
    pod_subnet: str


def leftovers(layouts: list[NodeLayout], state_dir: Path, network: Network) -> Leftovers:
    found = Leftovers()
    for layout in layouts:
        found.processes[layout.name] = cgroups.pids(layout.cgroup)
        found.sockets += [str(s) for s in shim_sockets(layout) if s.exists()]
        found.links += [str(link) for link in log_links(layout)]
    # the kernel records mount points by their real path: a state dir reached through a
    # link is resolved first
    roots = [state_dir.resolve() / "nodes", *((layouts[0].sockets,) if layouts else ())]
    found.mounts = mounts_below(MOUNTINFO.read_text(), roots)
    if layouts and layouts[0].sockets.exists():
        found.sockets += [str(p) for p in layouts[0].sockets.iterdir()]
    have = {a.split("/")[0] for a in hostnet.addresses()}
    found.addresses = [ip for ip in network.node_ips if ip in have]
    if not hostnet.bridge_exists():  # no local cluster has a container node
        found.rules = kube_chains.present(RULES_RECORD)
        found.rules += hostnet.gridloop_chains()
    return found


def _unmount(point: str) -> None:
    proc = subprocess.run(["umount", point], capture_output=True, check=False)
    if proc.returncode != 0:  # busy: detach it now, the kernel frees it when it can
        subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)


def socket_answers(path: Path) -> bool:
    """Whether a process listens on the unix socket at `path`."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)
        try:
            sock.connect(str(path))
        except OSError:
            return False
        return True


def dead_socket_folders(root: Path = SOCKETS_ROOT) -> list[Path]:
    """The clusters' folders under `root` holding only sockets nobody listens on: what a
    containerd killed without `down` leaves (a folder with anything else is kept)."""
    if not root.is_dir():
        return []
    dead = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        entries = list(folder.iterdir())
        if all(stat.S_ISSOCK(e.lstat().st_mode) and not socket_answers(e) for e in entries):
            dead.append(folder)
    return dead


def remove_dead_sockets(root: Path = SOCKETS_ROOT) -> list[Path]:
    """Remove `dead_socket_folders`; return them."""
    dead = dead_socket_folders(root)
    for folder in dead:
        for entry in folder.iterdir():
            entry.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            folder.rmdir()
    return dead


def sweep(layouts: list[NodeLayout], state_dir: Path, network: Network) -> Leftovers:
    """Remove everything the nodes left; return what is still there (empty: all gone)."""
    sockets = {layout.name: shim_sockets(layout) for layout in layouts}
    for layout in layouts:
        cgroups.kill_all(layout.cgroup)
    for point in mounts_below(MOUNTINFO.read_text(), [state_dir.resolve() / "nodes"]):
        _unmount(point)
    for layout in layouts:
        for path in [*sockets[layout.name], *log_links(layout)]:
            path.unlink(missing_ok=True)
        cgroups.remove(layout.cgroup)
    if layouts and layouts[0].sockets.exists():
        for path in layouts[0].sockets.iterdir():
            path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            layouts[0].sockets.rmdir()
    if hostnet.release(network.node_ips, network.pod_subnet):
        kube_chains.remove(RULES_RECORD)
        (SOCKETS_ROOT / "owner").unlink(missing_ok=True)  # starting.OWNER: no cluster now
        remove_dead_sockets()  # and those of clusters that died without `down`
        for folder in (SHIM_SOCKETS, SOCKETS_ROOT):  # made by the first node, if empty now
            with contextlib.suppress(OSError):
                folder.rmdir()
    return leftovers(layouts, state_dir, network)

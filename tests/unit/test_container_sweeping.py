"""What `down` finds to remove of a container node: its mounts, shim sockets and log links.

The planning is pure or reads only files: mountinfo is given as text in the kernel's own
format, and containerd's task folders and the kubelet's log links are laid out in a
temporary folder as containerd and the kubelet write them.
"""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path

import pytest

from gridloop.local.container.layout import NodeLayout
from gridloop.local.container.sweeping import (
    TASKS,
    Leftovers,
    dead_socket_folders,
    log_links,
    mounts_below,
    remove_dead_sockets,
    shim_socket,
    shim_sockets,
)

NODES = Path("/state/nodes")
SOCKETS = Path("/run/gridloop/0123456789ab")


def mountinfo(*points: str) -> str:
    """/proc/self/mountinfo lines (points as the kernel escapes them), after the host's own."""
    lines = [
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw",
        "23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw",
    ]
    lines += [
        f"{100 + i} 22 0:{50 + i} / {point} rw,relatime shared:{40 + i} - overlay overlay rw"
        for i, point in enumerate(points)
    ]
    return "\n".join(lines) + "\n"


SNAPSHOT = "/state/nodes/system-000/containerd/root/snapshots/1/fs"
NETNS = "/state/nodes/system-000/containerd/state/netns/cni-1234"
VOLUME = "/state/nodes/system-001/kubelet/pods/uid/volumes/kubernetes.io~projected/token"


@pytest.mark.parametrize(
    ("points", "roots", "expected"),
    [
        pytest.param((), [NODES], [], id="nothing-mounted"),
        pytest.param((SNAPSHOT,), [NODES], [SNAPSHOT], id="a-snapshot"),
        pytest.param(("/state/nodes",), [NODES], ["/state/nodes"], id="the-root-itself"),
        pytest.param(
            ("/state/nodes/system-000/kubelet", VOLUME, NETNS, SNAPSHOT),
            [NODES],
            [VOLUME, SNAPSHOT, NETNS, "/state/nodes/system-000/kubelet"],
            id="deepest-first",
        ),
        pytest.param(
            ("/state/nodes2/system-000/x", "/state/node", "/state"),
            [NODES],
            [],
            id="a-sibling-prefix-is-not-below",
        ),
        pytest.param((SNAPSHOT,), [Path("/state/nodes/")], [SNAPSHOT], id="root-with-slash"),
        pytest.param(
            ("/state/nodes/my\\040pod/fs", "/state/nodes/tab\\011x", "/state/nodes/back\\134s"),
            [NODES],
            ["/state/nodes/my pod/fs", "/state/nodes/back\\s", "/state/nodes/tab\tx"],
            id="kernel-escapes-undone",
        ),
        pytest.param(
            ("/state/my\\040nodes/a",),
            [Path("/state/my nodes")],
            ["/state/my nodes/a"],
            id="a-root-with-a-space",
        ),
        pytest.param(
            (SNAPSHOT, f"{SOCKETS}/shm", "/run/gridloop/other/shm"),
            [NODES, SOCKETS],
            [SNAPSHOT, f"{SOCKETS}/shm"],
            id="several-roots",
        ),
        pytest.param((SNAPSHOT, SNAPSHOT), [NODES], [SNAPSHOT], id="listed-once"),
    ],
)
def test_mounts_below_the_nodes_folders_only_deepest_first(
    points: tuple[str, ...], roots: list[Path], expected: list[str]
) -> None:
    assert mounts_below(mountinfo(*points), roots) == expected


def test_short_or_blank_mountinfo_lines_are_skipped() -> None:
    text = "\n  \n22 1 8:1\n" + mountinfo(SNAPSHOT)

    assert mounts_below(text, [NODES]) == [SNAPSHOT]


# --- shim sockets, from the address files containerd writes ---


def write_task(layout: NodeLayout, namespace: str, task: str, address: str | None) -> None:
    folder = layout.containerd_state / TASKS / namespace / task
    folder.mkdir(parents=True)
    if address is not None:
        (folder / "address").write_text(address)


def containerds_name(containerd_socket: Path, namespace: str, task: str, debug: bool) -> Path:
    """containerd's shim.SocketAddress: sha256 of `<socket>/<ns>/<id>[/debug]`, under
    /run/containerd/s, whatever containerd's own state directory is."""
    path = f"{containerd_socket}/{namespace}/{task}" + ("/debug" if debug else "")
    return Path("/run/containerd/s") / hashlib.sha256(path.encode()).hexdigest()


def test_a_tasks_shim_sockets_are_named_as_containerd_names_them() -> None:
    layout = NodeLayout.of(Path("/state"), "system-000")

    for debug in (False, True):
        assert shim_socket(layout.containerd_socket, "k8s.io", "abc", debug) == containerds_name(
            layout.containerd_socket, "k8s.io", "abc", debug
        )
    assert shim_socket(layout.containerd_socket, "k8s.io", "abc") != shim_socket(
        NodeLayout.of(Path("/state"), "system-001").containerd_socket, "k8s.io", "abc"
    )


def test_shim_sockets_are_each_tasks_reported_address_and_containerds_names(
    tmp_path: Path,
) -> None:
    layout = NodeLayout.of(tmp_path, "system-000")
    write_task(layout, "k8s.io", "sandbox", "unix:///run/containerd/s/reported\n")
    write_task(layout, "moby", "c", None)  # gVisor's sandbox writes no address file
    write_task(layout, "k8s.io", "tcp", "tcp://127.0.0.1:1234")  # not a socket file
    named = {
        containerds_name(layout.containerd_socket, ns, task, debug)
        for ns, task in (("k8s.io", "sandbox"), ("moby", "c"), ("k8s.io", "tcp"))
        for debug in (False, True)
    }

    found = shim_sockets(layout)

    assert found == sorted(found)
    assert set(found) == named | {Path("/run/containerd/s/reported")}


def test_a_node_whose_containerd_never_ran_has_no_shim_sockets(tmp_path: Path) -> None:
    assert shim_sockets(NodeLayout.of(tmp_path, "system-000")) == []


def test_shim_sockets_are_the_nodes_own(tmp_path: Path) -> None:
    mine, other = NodeLayout.of(tmp_path, "system-000"), NodeLayout.of(tmp_path, "system-001")
    write_task(other, "k8s.io", "x", "unix:///run/containerd/s/other")

    assert shim_sockets(mine) == []


# --- the kubelet's links in /var/log/containers ---


def test_log_links_into_this_nodes_pod_logs_are_found_and_no_others(tmp_path: Path) -> None:
    layout = NodeLayout.of(tmp_path / "state", "system-000")
    other = NodeLayout.of(tmp_path / "state", "system-001")
    logs = layout.pod_logs / "default_web_uid" / "web"
    logs.mkdir(parents=True)
    (logs / "0.log").write_text("hello\n")
    links = tmp_path / "containers"
    links.mkdir()
    (links / "web_default_web-1.log").symlink_to(logs / "0.log")
    (links / "gone_default_web-2.log").symlink_to(layout.pod_logs / "gone" / "0.log")  # dangling
    (links / "theirs.log").symlink_to(other.pod_logs / "x" / "0.log")
    (links / "sibling.log").symlink_to(Path(f"{layout.pod_logs}-old") / "x" / "0.log")
    (links / "host.log").symlink_to("/var/log/syslog")
    (links / "a-file.log").write_text("not a link\n")

    assert log_links(layout, links) == [
        links / "gone_default_web-2.log",
        links / "web_default_web-1.log",
    ]


def test_no_log_links_folder_means_no_links(tmp_path: Path) -> None:
    assert log_links(NodeLayout.of(tmp_path, "system-000"), tmp_path / "missing") == []


# --- what is left ---


@pytest.mark.parametrize(
    ("left", "description"),
    [
        (Leftovers(processes={"system-000": {12, 13}}), "2 processes of system-000"),
        (Leftovers(mounts=["/a", "/b"]), "2 mounts"),
        (Leftovers(sockets=["/run/containerd/s/a"]), "1 sockets"),
        (Leftovers(links=["/var/log/containers/x.log"]), "1 log links"),
        (
            Leftovers(addresses=["10.200.0.1", "10.200.1.1"]),
            "addresses 10.200.0.1, 10.200.1.1 on the bridge",
        ),
        (Leftovers(rules=["KUBE-FIREWALL"]), "iptables chains KUBE-FIREWALL"),
        (
            Leftovers(processes={"system-000": set(), "system-001": {7}}, mounts=["/a"]),
            "1 processes of system-001, 1 mounts",
        ),
    ],
)
def test_anything_left_is_named_in_the_description(left: Leftovers, description: str) -> None:
    assert left
    assert left.describe() == description


@pytest.mark.parametrize(
    "left",
    [Leftovers(), Leftovers(processes={"system-000": set(), "system-001": set()})],
    ids=["empty", "nodes-without-processes"],
)
def test_nothing_left_is_false_and_describes_as_nothing(left: Leftovers) -> None:
    assert not left
    assert left.describe() == ""


def _socket(path: Path, listen: bool) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    if listen:
        sock.listen()
    return sock


def test_only_folders_of_sockets_nobody_listens_on_are_dead(tmp_path: Path) -> None:
    for name in ("dead", "live", "other"):
        (tmp_path / name).mkdir()
    bound = [
        _socket(tmp_path / "dead" / "a.sock", listen=False),  # a killed containerd's
        _socket(tmp_path / "dead" / "a.sock.ttrpc", listen=False),
        _socket(tmp_path / "live" / "a.sock", listen=True),  # a running one's
    ]
    (tmp_path / "other" / "notes").write_text("not a socket")
    try:
        assert dead_socket_folders(tmp_path) == [tmp_path / "dead"]

        assert remove_dead_sockets(tmp_path) == [tmp_path / "dead"]

        assert sorted(p.name for p in tmp_path.iterdir()) == ["live", "other"]
        assert (tmp_path / "live" / "a.sock").exists()
    finally:
        for sock in bound:
            sock.close()


def test_no_sockets_root_means_nothing_dead(tmp_path: Path) -> None:
    assert dead_socket_folders(tmp_path / "absent") == []

"""The cgroups a container node runs in, against a fake cgroup tree in a temporary folder.

Simulated: each hierarchy is a folder with a `cgroup.procs` file (as every mounted
hierarchy has, the v1 ones and the hybrid cgroup2 `unified` mount), a cpuset's
`cpuset.cpus`/`cpuset.mems` and a cgroup's `cgroup.procs` are plain files written by the
test, and a cgroup that cannot be removed is one holding a file (the kernel says EBUSY
for a cgroup with processes; a plain folder says ENOTEMPTY). The real /sys/fs/cgroup is
never touched.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gridloop.local.container import cgroups

NODE = "/gridloop/0123456789ab/system-000"
HIERARCHIES = ("cpu,cpuacct", "cpuset", "memory", "pids", "systemd")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A hybrid cgroup root as the kernel and systemd mount it: a folder per v1 hierarchy,
    links for co-mounted controllers, and the cgroup2 'unified' mount (runc makes a
    container's cgroup there too, so `down` must find it)."""
    fs = tmp_path / "cgroup"
    for name in HIERARCHIES:
        (fs / name).mkdir(parents=True)
        (fs / name / "tasks").write_text("1\n")
        (fs / name / "cgroup.procs").write_text("1\n")
    (fs / "cpu").symlink_to("cpu,cpuacct")
    (fs / "cpuacct").symlink_to("cpu,cpuacct")
    (fs / "unified").mkdir()  # cgroup2: cgroup.procs, no `tasks`
    (fs / "unified" / "cgroup.procs").write_text("1\n")
    (fs / "notes").mkdir()  # a folder that is no cgroup at all
    (fs / "cpuset" / "cpuset.cpus").write_text("0-1\n")
    (fs / "cpuset" / "cpuset.mems").write_text("0\n")
    return fs


def test_hierarchies_are_the_mounted_ones_once_each_unified_included(root: Path) -> None:
    expected = sorted([*HIERARCHIES, "unified"])
    assert cgroups.hierarchies(root) == [root / name for name in expected]


def test_no_cgroup_filesystem_means_no_hierarchies(tmp_path: Path) -> None:
    assert cgroups.hierarchies(tmp_path / "missing") == []


def test_ensure_creates_the_path_in_every_hierarchy(root: Path) -> None:
    cgroups.ensure(f"{NODE}/runtime", root)

    made = [h.name for h in cgroups.hierarchies(root) if (h / NODE[1:] / "runtime").is_dir()]
    assert made == sorted([*HIERARCHIES, "unified"])
    assert not (root / "notes" / "gridloop").exists()


def test_ensure_gives_each_empty_cpuset_its_parents_cpus_and_mems_top_down(root: Path) -> None:
    # the kernel creates a new cpuset's knobs empty; here the folders exist already
    cpuset = root / "cpuset"
    levels = [cpuset / "gridloop", cpuset / NODE[1:].rsplit("/", 1)[0], cpuset / NODE[1:]]
    for folder in levels:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cpuset.cpus").write_text("\n")
        (folder / "cpuset.mems").write_text("")

    cgroups.ensure(NODE, root)

    assert [(f / "cpuset.cpus").read_text().strip() for f in levels] == ["0-1"] * 3
    assert [(f / "cpuset.mems").read_text().strip() for f in levels] == ["0"] * 3


def test_ensure_keeps_a_cpuset_that_already_has_cpus(root: Path) -> None:
    mine = root / "cpuset" / "gridloop"
    mine.mkdir()
    (mine / "cpuset.cpus").write_text("1\n")
    (mine / "cpuset.mems").write_text("0\n")

    cgroups.ensure(NODE, root)

    assert (mine / "cpuset.cpus").read_text() == "1\n"


def test_ensure_twice_changes_nothing(root: Path) -> None:
    cgroups.ensure(NODE, root)
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))

    cgroups.ensure(NODE, root)

    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before


def write_procs(root: Path, path: str, pids: list[int], hierarchy: str = "pids") -> None:
    folder = root / hierarchy / path.strip("/")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cgroup.procs").write_text("".join(f"{pid}\n" for pid in pids))


def test_pids_are_every_process_in_the_node_and_below_it(root: Path) -> None:
    write_procs(root, NODE, [])
    write_procs(root, f"{NODE}/runtime", [100, 101])
    write_procs(root, f"{NODE}/kubepods/besteffort/pod1/abc", [200])
    write_procs(root, "/gridloop/0123456789ab/system-001/runtime", [300])  # another node
    write_procs(root, "/gridloop/0123456789ab/system-0001", [400])  # a sibling by prefix
    write_procs(root, f"{NODE}/runtime", [999], hierarchy="memory")  # not the tracking one

    assert cgroups.pids(NODE, root) == {100, 101, 200}


@pytest.mark.parametrize(
    "path", [NODE, f"{NODE}/", NODE.lstrip("/")], ids=["absolute", "trailing-slash", "relative"]
)
def test_a_cgroup_path_is_the_same_however_it_is_written(root: Path, path: str) -> None:
    write_procs(root, f"{NODE}/runtime", [100])

    assert cgroups.pids(path, root) == {100}


def test_a_node_that_never_ran_has_no_pids(root: Path) -> None:
    assert cgroups.pids(NODE, root) == set()


def test_remove_takes_the_node_and_its_children_out_of_every_hierarchy(root: Path) -> None:
    cgroups.ensure(f"{NODE}/runtime", root)
    cgroups.ensure(f"{NODE}/kubepods/besteffort", root)
    cgroups.ensure("/gridloop/0123456789ab/system-001", root)

    assert cgroups.remove(NODE, root) == []

    for hierarchy in cgroups.hierarchies(root):
        assert not (hierarchy / NODE[1:]).exists()
        assert (hierarchy / "gridloop" / "0123456789ab" / "system-001").is_dir()


def test_remove_names_what_it_could_not_and_removes_the_rest(root: Path) -> None:
    cgroups.ensure(f"{NODE}/runtime", root)
    write_procs(root, f"{NODE}/runtime", [100])  # busy in pids only

    stuck = cgroups.remove(NODE, root)

    assert [s.split(" (")[0] for s in stuck] == [
        str(root / "pids" / NODE[1:] / "runtime"),
        str(root / "pids" / NODE[1:]),
    ]
    assert all(s.endswith(")") for s in stuck)
    assert [h.name for h in cgroups.hierarchies(root) if (h / NODE[1:]).exists()] == ["pids"]


def test_removing_a_node_that_never_ran_is_nothing_to_do(root: Path) -> None:
    assert cgroups.remove(NODE, root) == []

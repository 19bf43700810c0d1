"""The iptables chains the kubelets and kube-proxy add to the host, and taking them out.

A kubelet on a host with iptables creates, in both iptables and ip6tables, the canary
chains `KUBE-KUBELET-CANARY` (mangle, filter, nat), `KUBE-IPTABLES-HINT` (mangle) and
`KUBE-FIREWALL` (filter, jumped to from INPUT and OUTPUT: it drops packets to
127.0.0.0/8 from other sources); kube-proxy adds its Service chains (`KUBE-SERVICES`,
`KUBE-SVC-...`, jumped to from PREROUTING, OUTPUT, FORWARD, POSTROUTING). All outlive
their processes. `up` records which `KUBE-` chains the host already had before the first
container node started (a real kubelet on the same host owns those: they are never
touched), and `down` removes the others once no container node is left.

`chains` and `plan_removal` are pure (iptables-save text in, iptables arguments out).
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

PREFIX = "KUBE-"
TOOLS = ("iptables", "ip6tables")


def chains(saved: str) -> set[tuple[str, str]]:
    """(table, chain) of every `KUBE-` chain in an iptables-save output (pure)."""
    found: set[tuple[str, str]] = set()
    table = ""
    for line in saved.splitlines():
        if line.startswith("*"):
            table = line[1:].strip()
        elif line.startswith(":"):
            name = line[1:].split()[0]
            if name.startswith(PREFIX):
                found.add((table, name))
    return found


def plan_removal(saved: str, keep: set[tuple[str, str]]) -> list[list[str]]:
    """The iptables arguments that delete the `KUBE-` chains not in `keep`: first every
    rule that jumps to one (as `-D` of the same rule), then the chains' own rules, then
    the chains (pure)."""
    gone = chains(saved) - keep
    deletes: list[list[str]] = []
    table = ""
    for line in saved.splitlines():
        if line.startswith("*"):
            table = line[1:].strip()
        elif line.startswith("-A "):
            parts = shlex.split(line)  # comments are quoted: "kubernetes service portals"
            target = parts[parts.index("-j") + 1] if "-j" in parts else ""
            if (table, target) in gone and (table, parts[1]) not in gone:
                deletes.append(["-t", table, "-D", *parts[1:]])
    for table, chain in sorted(gone):
        deletes.append(["-t", table, "-F", chain])
    for table, chain in sorted(gone):
        deletes.append(["-t", table, "-X", chain])
    return deletes


def _save(tool: str) -> str | None:
    binary = shutil.which(f"{tool}-save")
    if binary is None:
        return None
    proc = subprocess.run([binary], capture_output=True, text=True, check=False)
    return proc.stdout if proc.returncode == 0 else None


def record(path: Path) -> None:
    """Write which `KUBE-` chains the host has now, unless a record exists (an earlier
    `up` of this cluster made it, before its kubelets added theirs)."""
    if path.exists():
        return
    had = {tool: sorted(map(list, chains(_save(tool) or ""))) for tool in TOOLS}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(had) + "\n")


def remove(path: Path) -> list[str]:
    """Delete the `KUBE-` chains the record says the host did not have; return what is
    left of them (empty: all gone). Without a record nothing is touched."""
    try:
        had = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    left: list[str] = []
    for tool in TOOLS:
        saved, binary = _save(tool), shutil.which(tool)
        if saved is None or binary is None:
            continue
        keep = {(t, c) for t, c in had.get(tool, [])}
        for args in plan_removal(saved, keep):
            subprocess.run([binary, *args], capture_output=True, check=False)
        after = chains(_save(tool) or "") - keep
        left += [f"{tool} {t}/{c}" for t, c in sorted(after)]
    if not left:  # else kept: `present` reads it, and the next `down` tries again
        path.unlink(missing_ok=True)
    return left


def present(path: Path) -> list[str]:
    """The `KUBE-` chains on the host that the record says were not there before (none
    without a record: then no container node ran, and every chain is the host's own)."""
    try:
        had = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    out: list[str] = []
    for tool in TOOLS:
        keep = {(t, c) for t, c in had.get(tool, [])}
        out += [f"{tool} {t}/{c}" for t, c in sorted(chains(_save(tool) or "") - keep)]
    return out

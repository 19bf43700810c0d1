"""The host bridge the container nodes' pods live on (a thin shell over `ip`).

One bridge, `gridloop0`, carries every container node's pods; each node's address (the
gateway of its /24, and its InternalIP) is put on it before the kubelet starts, since a
kubelet refuses a node IP the host does not have. Nothing is routed or NATed off the
machine: no forwarding is switched on, no masquerade rule is added, and pods get no
default route (configs.cni_config). Service traffic between pods is routed through
the host (kube-proxy's DNAT), so forwarding is switched on for packets that arrive on
the bridge only (`net.ipv4.conf.gridloop0.forwarding`, never the host-wide
`ip_forward`), and the chain GRIDLOOP-ISOLATE drops any of them that would leave
through another interface. `down` deletes the chain and the bridge, and with the
bridge every address on it.
"""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from gridloop.errors import ClusterError
from gridloop.local.container import network_policy
from gridloop.local.container.layout import BRIDGE, METADATA_IP, OUTSIDE_IP


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    ip = shutil.which("ip")
    if ip is None:
        raise ClusterError(
            "`ip` not found: container nodes need iproute2 (apt-get install iproute2)"
        )
    proc = subprocess.run([ip, *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise ClusterError(f"ip {' '.join(args)}: {proc.stderr.strip() or proc.returncode}")
    return proc


def bridge_exists() -> bool:
    return _ip("link", "show", "dev", BRIDGE, check=False).returncode == 0


def addresses() -> set[str]:
    """The IPv4 addresses (with prefix) on the bridge, empty when it does not exist."""
    proc = _ip("-o", "-4", "addr", "show", "dev", BRIDGE, check=False)
    return {line.split()[3] for line in proc.stdout.splitlines() if len(line.split()) > 3}


ISOLATE = "GRIDLOOP-ISOLATE"
# the FORWARD rule that sends bridge traffic through ISOLATE, and ISOLATE's one rule
_JUMP = ["FORWARD", "-i", BRIDGE, "-j", ISOLATE]
_DROP = [ISOLATE, "!", "-o", BRIDGE, "-j", "DROP"]


def _iptables(*args: str) -> subprocess.CompletedProcess[str] | None:
    tool = shutil.which("iptables")
    if tool is None:
        return None
    return subprocess.run([tool, *args], capture_output=True, text=True, check=False)


def ensure_bridge(node_ips: Sequence[str], pod_subnet: str) -> None:
    """The bridge exists, is up, carries each node's address in the pod subnet, forwards
    what arrives on it, and drops what would leave the machine."""
    if not bridge_exists():
        _ip("link", "add", BRIDGE, "type", "bridge")
    prefix = ipaddress.ip_network(pod_subnet).prefixlen
    have = addresses()
    for ip in node_ips:
        if f"{ip}/{prefix}" not in have:
            _ip("addr", "add", f"{ip}/{prefix}", "dev", BRIDGE)
    for cidr in STAND_INS:
        if cidr not in have:
            _ip("addr", "add", cidr, "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")
    if _iptables("-n", "-L", ISOLATE) is None:
        raise ClusterError(
            "`iptables` not found: container nodes need it (apt-get install iptables)"
        )
    isolated = _iptables("-C", *_JUMP)
    if isolated is not None and isolated.returncode != 0:
        _iptables("-N", ISOLATE)
        _iptables("-F", ISOLATE)
        _iptables("-A", *_DROP)
        _iptables("-I", *_JUMP)
    FORWARDING.write_text("1\n")
    _ensure_policy_queue()


FORWARDING = Path(f"/proc/sys/net/ipv4/conf/{BRIDGE}/forwarding")


# The cloud metadata server's address, on the bridge: a pod's packets to it reach the host
# (pods have a route to it through their node, configs.cni_config), where nothing
# listens on it, so a pod no policy restricts is refused and a sandbox's are dropped by
# its egress NetworkPolicy: the test can tell the two apart. As on a cloud VM, the
# address is link-local and never routed off the machine.
METADATA_CIDR = f"{METADATA_IP}/32"
# and an address standing in for a host on the internet (layout.OUTSIDE_IP), likewise
STAND_INS = (METADATA_CIDR, f"{OUTSIDE_IP}/32")


def _ensure_policy_queue() -> None:
    """The mangle chain that hands packets kube-network-policies marked to its nfqueue,
    hooked from POSTROUTING and INPUT (container/network_policy.py)."""
    _iptables("-t", "mangle", "-N", network_policy.CHAIN)
    _iptables("-t", "mangle", "-F", network_policy.CHAIN)
    for rule in network_policy.queue_rules():
        _iptables("-t", "mangle", "-A", *rule)
    for hook in network_policy.HOOKS:
        jump = [hook, "-j", network_policy.CHAIN]
        found = _iptables("-t", "mangle", "-C", *jump)
        if found is not None and found.returncode != 0:
            _iptables("-t", "mangle", "-I", *jump)


def _remove_policy_queue() -> None:
    for hook in network_policy.HOOKS:
        jump = [hook, "-j", network_policy.CHAIN]
        while (
            check := _iptables("-t", "mangle", "-C", *jump)
        ) is not None and check.returncode == 0:
            _iptables("-t", "mangle", "-D", *jump)
    _iptables("-t", "mangle", "-F", network_policy.CHAIN)
    _iptables("-t", "mangle", "-X", network_policy.CHAIN)
    # what a kube-network-policies that did not stop cleanly left (it deletes it itself)
    nft = shutil.which("nft")
    if nft is not None:
        subprocess.run([nft, "delete", "table", "inet", network_policy.TABLE], capture_output=True)


def policy_table_present() -> bool:
    nft = shutil.which("nft")
    if nft is None:
        return False
    listed = subprocess.run(
        [nft, "list", "table", "inet", network_policy.TABLE], capture_output=True
    )
    return listed.returncode == 0


def gridloop_chains() -> list[str]:
    """The GRIDLOOP- chains (ISOLATE, HOST, NETPOL) still on the host."""
    out = []
    for chain in (ISOLATE, HOST):
        found = _iptables("-n", "-L", chain)
        if found is not None and found.returncode == 0:
            out.append(f"iptables filter/{chain}")
    found = _iptables("-t", "mangle", "-n", "-L", network_policy.CHAIN)
    if found is not None and found.returncode == 0:
        out.append(f"iptables mangle/{network_policy.CHAIN}")
    if policy_table_present():
        out.append(f"nftables inet/{network_policy.TABLE}")
    return out


HOST = "GRIDLOOP-HOST"


def _host_jump(port: int) -> list[str]:
    return ["INPUT", "-p", "tcp", "--dport", str(port), "-j", HOST]


def guard_host_ports(ports: Sequence[int]) -> None:
    """Host services that listen on every address (the API server, for pods) take
    connections from loopback and the pod bridge only: GRIDLOOP-HOST drops the rest."""
    if _iptables("-n", "-L", HOST) is None:
        raise ClusterError(
            "`iptables` not found: container nodes need it (apt-get install iptables)"
        )
    _iptables("-N", HOST)
    _iptables("-F", HOST)
    _iptables("-A", HOST, "-i", "lo", "-j", "RETURN")
    _iptables("-A", HOST, "-i", BRIDGE, "-j", "RETURN")
    _iptables("-A", HOST, "-j", "DROP")
    for port in ports:
        found = _iptables("-C", *_host_jump(port))
        if found is not None and found.returncode != 0:
            _iptables("-I", *_host_jump(port))


def _remove_isolation() -> None:
    while (check := _iptables("-C", *_JUMP)) is not None and check.returncode == 0:
        _iptables("-D", *_JUMP)
    _iptables("-F", ISOLATE)
    _iptables("-X", ISOLATE)
    saved = subprocess.run(["iptables-save", "-t", "filter"], capture_output=True, text=True)
    for line in saved.stdout.splitlines():
        if line.startswith("-A INPUT ") and line.endswith(f"-j {HOST}"):
            _iptables("-D", *line.split()[1:])
    _iptables("-F", HOST)
    _iptables("-X", HOST)
    _remove_policy_queue()


def release(node_ips: Sequence[str], pod_subnet: str) -> bool:
    """Take this cluster's node addresses off the bridge, and delete the bridge once no
    other local cluster has an address on it; True when the bridge is gone."""
    if not bridge_exists():
        _remove_isolation()
        return True
    prefix = ipaddress.ip_network(pod_subnet).prefixlen
    have = addresses()
    for ip in node_ips:
        if f"{ip}/{prefix}" in have:
            _ip("addr", "del", f"{ip}/{prefix}", "dev", BRIDGE, check=False)
    if addresses() - set(STAND_INS):
        return False
    _ip("link", "del", BRIDGE)
    _remove_isolation()
    return True

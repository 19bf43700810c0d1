"""Whether the disk under a local cluster's state has room for its container nodes (pure).

Each node's kubelet evicts its pods, and admits none, once the filesystem holding the
node's state has less than EVICTION_PERCENT of its size free (configs.kubelet_config);
the node's containerd unpacks the images its pods run on that same filesystem. A node
whose disk fills while it pulls shows up later as pods evicted or Pending and a wait that
times out, far from the cause: `up` says it first.
"""

from __future__ import annotations

from pathlib import Path

GIB = 1024**3
EVICTION_PERCENT = 2  # the kubelets' evictionHard nodefs/imagefs.available
# the chart's own images (controllers, the health service, pause, sandboxes) on a node
PLATFORM_BYTES = 2 * GIB
# a node that has served the tiny model, trained and run the loop: 12 GiB of state
# (the vLLM CPU image unpacks to 7 GiB; the trainer and Ray images on top), measured
# 2026-12-03 after tests/cluster/test_loop.py
MODEL_BYTES = 12 * GIB


def eviction_bytes(total: int) -> int:
    return total * EVICTION_PERCENT // 100


def gib(size: int) -> str:
    return f"{size / GIB:.1f} GiB"


def refusal(where: Path, free: int, total: int) -> str | None:
    """Why a node cannot run the platform on this disk, or None."""
    floor = eviction_bytes(total)
    if free >= floor + PLATFORM_BYTES:
        return None
    return (
        f"{gib(free)} free on the filesystem of {where} ({gib(total)}): the container "
        f"nodes' kubelets evict every pod below {gib(floor)} free ({EVICTION_PERCENT}%) and "
        f"their images need about {gib(PLATFORM_BYTES)} more: free some space first"
    )


def shortfall_for_models(where: Path, free: int, total: int) -> str | None:
    """Why serving a model (the vLLM CPU image) would fill this disk, or None."""
    floor = eviction_bytes(total)
    if free >= floor + MODEL_BYTES:
        return None
    return (
        f"{gib(free)} free on the filesystem of {where}: a model served with the vLLM CPU "
        f"image (and training on it) takes about {gib(MODEL_BYTES)} of node state, and the "
        f"kubelets evict every pod below {gib(floor)} free"
    )

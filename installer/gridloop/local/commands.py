"""`gridloop local ...`: the command-line shell around the local cluster.

Parses flags, calls building/cluster, prints. Decisions live elsewhere.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from gridloop import paths
from gridloop.local.build import building, recipes
from gridloop.local.build.building import Progress


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    local = sub.add_parser(
        "local",
        help="a real Kubernetes control plane with a simulated GPU fleet on this machine",
        description="Run a real kube-apiserver, etcd, controller-manager, scheduler and kwok "
        "on loopback, with GPU nodes simulated from a fleet file.",
    )
    verbs = local.add_subparsers(dest="verb", metavar="VERB", required=True)

    p = verbs.add_parser(
        "build", help="build the local cluster's binaries and images into the cache"
    )
    p.add_argument(
        "components",
        nargs="*",
        help="only these recipes (etcd, kubernetes, kubernetes-node, containerd, gvisor, ..., "
        "or `images` for the container nodes' images); default: everything but the heavy "
        "images, the vLLM CPU image (`vllm-cpu`, about 7 GiB), the Ray image (`ray`, about "
        "0.6 GB) and the trainer image (`trainer`: Ray on the vLLM image's layers, which it "
        "builds first); `all`: everything and those images, built beside the Go builds",
    )
    p.add_argument(
        "--mirror",
        type=Path,
        default=None,
        metavar="DIR",
        help="a folder holding upstream releases no registry serves (KAITO's source archive, "
        "as versions.yaml names it, checked by its sha256): `kaito` builds its workspace "
        "controller and image from it; with no component named, it is built with the rest",
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="the local cluster whose registry gets what was built, when it runs "
        f"(default {paths.state_root()}); a cluster started later gets it from `local up`",
    )
    p.set_defaults(func=cmd_build)

    from gridloop.local import cluster_commands, store_key_command

    cluster_commands.register(verbs)
    store_key_command.register(verbs)


class _BuildPrinter:
    def __init__(self) -> None:
        self.start = time.monotonic()

    def __call__(self, p: Progress) -> None:
        label = f"{p.binary} {p.version}"
        if p.status == "cached":
            print(f"  ✓ {label:<34} cached", flush=True)
        elif p.status == "building":
            print(f"  … {label:<34} building (log: {p.log})", flush=True)
        else:
            print(f"  ✓ {label:<34} built in {p.seconds:.0f}s", flush=True)


IMAGES = "images"
ALL = "all"


def cmd_build(args: argparse.Namespace) -> int:
    printer = _BuildPrinter()
    print(f"building into {paths.cache_root()}", flush=True)
    from gridloop.local.build.images import gridloop_image, locked_images

    everything = ALL in args.components
    heavy = tuple(locked_images.by_name(c) for c in args.components if c in locked_images.names())
    named = [c for c in args.components if c not in (IMAGES, ALL, *locked_images.names())]
    side: Future[list[gridloop_image.Built]] | None = None
    pool = ThreadPoolExecutor(max_workers=1)
    if everything:
        # The heavy images need only their base and a few Debian files: made first, they
        # build one after the other on their own thread while the Go builds run. Their
        # wheels come over the network and buildah mostly copies files, so they overlap
        # the compilers' CPU time (a cold build is these images' minutes shorter).
        building.build(locked_images.needs(), printer)
        gridloop_image.base_image()
        print("the heavy images (vLLM CPU, Ray, trainer): building beside the rest", flush=True)
        side = pool.submit(lambda: [image.build() for image in locked_images.IMAGES])
    try:
        if named or everything or not args.components:
            building.build(named or None, printer, mirror=args.mirror)
        # a controller built from a release archive is wanted as its image (table.on_request)
        archived = {r.component for r in recipes.RECIPES if r.from_mirror} & set(named)
        if IMAGES in args.components or everything or not args.components or archived:
            from gridloop.local.build.images import pushing

            print("images (buildah, FROM scratch and gridloop's Containerfile):", flush=True)
            binaries = {name: building.binary(name) for name in pushing.BINARIES}
            pushing.build_all(binaries, lambda line: print(line, flush=True))
        if heavy or side is not None:
            print("the heavy images (images/*/Containerfile on a hashed lock):", flush=True)
            if side is not None:
                made = side.result()
            else:
                building.build(locked_images.needs(heavy), printer)
                made = [image.build() for image in heavy]
            for one in made:
                state = "built" if one.fresh else "cached"
                print(f"  ✓ {one.ref:<62} {state} in {one.seconds:.1f}s", flush=True)
    finally:
        pool.shutdown(wait=True)
    from gridloop.local import cluster

    if said := cluster.push_new_images(args.state_dir or paths.state_root()):
        print(said, flush=True)
    print(f"done in {time.monotonic() - printer.start:.1f}s", file=sys.stderr)
    return 0

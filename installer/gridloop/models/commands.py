"""`gridloop models make | push`: a model with no hub, and its upload to object storage."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from gridloop.errors import UsageError


def register(sub: Any) -> None:
    p = sub.add_parser("models", help="make a small model locally; push a model folder to S3")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)

    make = verbs.add_parser(
        "make",
        help="write a Llama-architecture model with random weights and a locally trained "
        "tokenizer (no hub)",
    )
    make.add_argument("dir", type=Path, metavar="DIR", help="the folder to write (made if absent)")
    make.add_argument(
        "--size",
        default="tiny",
        help="tiny (under 1 MiB, for tests) or 1g (just over 1 GiB, for load benchmarks)",
    )
    make.add_argument("--seed", type=int, default=0, help="the weights' seed (default 0)")
    make.set_defaults(func=cmd_make)

    push = verbs.add_parser("push", help="upload a model folder to s3://BUCKET/PREFIX/")
    push.add_argument(
        "dir", type=Path, metavar="DIR", help="a folder with config.json and safetensors"
    )
    push.add_argument(
        "uri", metavar="URI", help="where the revision goes, e.g. s3://models/tiny/r1/"
    )
    push.add_argument(
        "--endpoint",
        default=None,
        help="the S3 endpoint (default: $AWS_ENDPOINT_URL, which `gridloop local env` sets)",
    )
    push.add_argument("--concurrency", type=int, default=8, help="parallel uploads (default 8)")
    push.set_defaults(func=cmd_push)


def cmd_make(args: argparse.Namespace) -> int:
    from gridloop.models import making
    from gridloop.models.shapes import PRESETS

    if args.size not in PRESETS:
        raise UsageError(f"--size: {args.size!r} is not one of {', '.join(PRESETS)}")
    if args.dir.exists() and any(args.dir.iterdir()):
        raise UsageError(f"DIR: {args.dir} is not empty; nothing written")
    made = making.make(args.dir, PRESETS[args.size], seed=args.seed)
    print(
        f"made {made.folder}: {len(made.files)} files, {made.parameters:,} parameters, "
        f"{made.weight_bytes / 2**20:,.1f} MiB of float16 weights"
    )
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    from gridloop.models import pushing, uris

    uri = uris.parse_s3(args.uri, "URI")
    if args.concurrency < 1:
        raise UsageError(f"--concurrency: {args.concurrency} is below 1")
    if not uri.prefix:
        raise UsageError(f"URI: {args.uri!r} names a bucket only; give s3://BUCKET/MODEL/REVISION/")
    endpoint = args.endpoint or os.environ.get("AWS_ENDPOINT_URL")
    pushing.model_files(args.dir)  # a bad folder is refused before any connection
    done = pushing.push(args.dir, uri, endpoint, args.concurrency)
    rate = done.nbytes / 2**20 / done.seconds if done.seconds > 0 else 0.0
    print(
        f"pushed {done.files} files ({done.nbytes / 2**20:,.1f} MiB) to {done.uri} "
        f"in {done.seconds:.1f}s ({rate:,.0f} MiB/s)"
    )
    return 0

"""`gridloop local store-key ROLE`: a role's keys to the local object store, written to an
env file (0600) for `kubectl create secret generic NAME --from-env-file=FILE`.

The keys never pass through a command line (the shell's history, `ps`): the file is the
hand-over. A training run's keys are minted on first use and made a user of the store with
the run's rights at once (store_admin.mint); asking again gives the same keys.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from gridloop import paths
from gridloop.errors import UsageError
from gridloop.local.addons import object_store, store_access, store_admin
from gridloop.local.state import load

ROLES = (store_access.TRAINING, store_access.SERVING)


def register(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = verbs.add_parser(
        "store-key",
        help="a role's keys to the local object store, as an env file for "
        "`kubectl create secret generic NAME --from-env-file=FILE`",
    )
    p.add_argument(
        "role",
        choices=ROLES,
        help="training: one run's job (reads s3://loop/RUN/, reads and writes "
        "s3://checkpoints/RUN/; with --model reads s3://models/MODEL, with --revision "
        "writes s3://models/MODEL/REVISION/); serving: model servers (reads s3://models/)",
    )
    p.add_argument("--run", default=None, help="the training run (a DNS label)")
    p.add_argument(
        "--model", default=None, help="the folder of s3://models/ the run fine-tunes, e.g. tiny/"
    )
    p.add_argument("--revision", default=None, help="the revision of --model the run writes")
    p.add_argument(
        "--env-file",
        type=Path,
        required=True,
        help="where the keys go (created 0600; an existing file is replaced)",
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help=f"the local cluster (default {paths.state_root()})",
    )
    p.set_defaults(func=cmd_store_key)


def role_from(args: argparse.Namespace) -> store_access.Role:
    """The role the flags ask for, or one line naming the flag that is wrong."""
    if args.role == store_access.SERVING:
        if args.run or args.model or args.revision:
            raise UsageError("--run, --model, --revision: only a training role has them")
        return store_access.serving()
    if not args.run:
        raise UsageError("--run: a training key is one run's; name it (e.g. --run train-tiny)")
    try:
        store_access.check_run(args.run)
    except ValueError as err:
        raise UsageError(f"--{err}") from None
    try:
        return store_access.training(args.run, args.model, args.revision)
    except ValueError as err:
        raise UsageError(f"--{err}") from None


def env_file_text(keys: object_store.Keys) -> str:
    return "".join(f"{k}={v}\n" for k, v in object_store.key_env(keys).items())


def cmd_store_key(args: argparse.Namespace) -> int:
    role = role_from(args)
    state_dir = Path(args.state_dir) if args.state_dir else paths.state_root()
    state = load(state_dir)
    if state is None or object_store.PROCESS not in state.components:
        raise UsageError(
            f"--state-dir: no local cluster with an object store in {state_dir}: "
            "run `gridloop local up` first"
        )
    target: Path = args.env_file
    if not target.parent.is_dir():
        raise UsageError(f"--env-file: no such folder: {target.parent}")
    keys = store_admin.mint(state_dir, state.ports.object_store, role)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(out.fileno(), 0o600)
        out.write(env_file_text(keys))
    print(f"{role.name}: keys in {target} (0600); what they may do:")
    for line in store_access.describe(role):
        print(f"  {line}")
    return 0

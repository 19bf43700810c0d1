"""The state directory of one local cluster, and the record of what runs there.

<state>/state.json     ports, pids and command lines, fleet, start time
<state>/kubeconfig     admin kubeconfig (what `gridloop local env` exports)
<state>/bin/           kubectl and helm (links into the build cache)
<state>/pki/           certificates, keys, per-component kubeconfigs
<state>/etcd/          etcd's data
<state>/logs/          one log per process
<state>/kwok.yaml      kwok's configuration and stages
<state>/fleet.yaml     the fleet the cluster was started with
<state>/kueue/         Kueue's config, serving certificate (certs/), applied objects, and
                       the token Prometheus scrapes it with (when the fleet asks for Kueue)
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gridloop import paths
from gridloop.errors import ClusterError
from gridloop.local.ports import Ports
from gridloop.local.processes import Proc


@dataclass
class State:
    dir: Path
    base_port: int
    ports: Ports
    processes: list[Proc] = field(default_factory=list)
    fleet_name: str = ""
    nodes: int = 0
    started_at: float = 0.0
    # the processes this cluster runs, in start order (the GPU-health ones are optional)
    components: list[str] = field(default_factory=list)

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        data = asdict(self)
        data["dir"] = str(self.dir)
        tmp = self.dir / ".state.json.tmp"
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, self.dir / paths.STATE_FILE)


def load(dir: Path) -> State | None:
    """The recorded state, None if there is none; a damaged record is one clear error."""
    path = dir / paths.STATE_FILE
    if not path.is_file():
        return None
    try:
        return _parse(dir, json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError) as err:
        raise ClusterError(
            f"{path} is damaged or from another gridloop version ({err}): stop what it "
            "started by hand if anything runs, then "
            f"`gridloop local down --purge --state-dir {dir}`"
        ) from err


def for_kubeconfig(kubeconfig: str) -> State | None:
    """The local cluster a kubeconfig (or the first file of a $KUBECONFIG list) belongs
    to: the state recorded beside it, when that state's kubeconfig is this file."""
    dir = paths.local_state_dir(kubeconfig)
    state = load(dir) if dir is not None else None
    path = Path(kubeconfig.split(os.pathsep)[0])
    return state if state is not None and state.kubeconfig == path else None


def _parse(dir: Path, data: dict[str, Any]) -> State:
    return State(
        dir=dir,
        base_port=data["base_port"],
        # ports follow from the base port; the recorded copy is for people reading the file
        ports=Ports.from_base(data["base_port"]),
        processes=[
            Proc(p["name"], p["pid"], tuple(p["argv"]), p["log"], p.get("start_ticks", 0))
            for p in data.get("processes", [])
        ],
        fleet_name=data.get("fleet_name", ""),
        nodes=data.get("nodes", 0),
        started_at=data.get("started_at", 0.0),
        components=list(data.get("components", [])),
    )

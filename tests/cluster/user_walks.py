"""The docs' walks run as a user runs them: a shell script (the docs' block, taken from the
Markdown) in a folder of the user's holding the repository's examples, with the built
commands first on PATH, no KUBECONFIG or store keys of the test's, `gridloop local env`
finding the suite's running cluster (GRIDLOOP_STATE) and Helm homes of the walk's own."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from platform_install import GRIDLOOP, Installed, cluster_fleet

from examples import EXAMPLES

BIN_DIR = str(Path(GRIDLOOP).parent)  # where `.venv/bin/` of the docs points


@dataclass(frozen=True)
class Walk:
    work: Path
    env: dict[str, str]  # the user's shell

    def run(self, script: str, timeout: float = 1800) -> str:
        """`bash -euxo pipefail` of the script in the folder; its output (it must pass)."""
        walked = subprocess.run(
            ["bash", "-euxo", "pipefail", "-c", script],
            cwd=self.work, env=self.env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        said = walked.stdout + walked.stderr
        assert walked.returncode == 0, said[-6000:]
        return said

    def installed(self, local_cluster, chart: Path, said: str = "") -> Installed:
        """The release the walk installs, for the tests' own `gridloop` calls."""
        env = {**self.env, "KUBECONFIG": str(local_cluster.kubeconfig)}
        return Installed(chart, cluster_fleet(local_cluster), self.work, env, said)


def walk_folder(local_cluster, work: Path) -> Walk:
    (work / "examples").symlink_to(EXAMPLES)
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG" and not k.startswith("AWS_")}
    env |= {"GRIDLOOP_STATE": str(local_cluster.state.dir), "PATH": f"{BIN_DIR}:{env['PATH']}"}
    for key in ("CACHE", "CONFIG", "DATA"):
        env[f"HELM_{key}_HOME"] = str(work / "helm" / key.lower())
    return Walk(work, env)

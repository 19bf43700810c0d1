"""Where the chart, its profiles, values files and the cluster's kubeconfig are.

Every answer comes from a flag, the environment or a default that is documented in
the command's help, and every missing thing is a one-line UsageError naming the flag.
Nothing here runs a tool or opens a connection.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from gridloop import paths
from gridloop.documents import DocumentProblem, read_document
from gridloop.errors import UsageError

DEFAULT_BUNDLE = paths.DEFAULT_BUNDLE
PROFILES = "profiles"


def chart_folder(
    flag: Path | None, say: Callable[[str], None] = lambda _m: None, mirror: Path | None = None
) -> Path:
    """`--chart`, else ./dist/gridloop when a bundle is there, else the package's chart
    bundled into the cache (bundle/assembling.py; what it left out is said). `--mirror`
    asks for the last, with what the mirror holds (./dist is then not used)."""
    if flag is not None:
        if mirror is not None:
            raise UsageError(
                "--mirror and --chart: --mirror is for the bundle gridloop "
                "assembles itself; a chart given is used as it is"
            )
        if not (flag / "Chart.yaml").is_file():
            raise UsageError(f"--chart {flag}: no Chart.yaml there")
        return flag
    if mirror is None and (DEFAULT_BUNDLE / "Chart.yaml").is_file():
        return DEFAULT_BUNDLE
    from gridloop.bundle import assembling, charting  # here: `status` needs only kubeconfig()

    if not (charting.REPO_CHART / "Chart.yaml").is_file():
        raise UsageError(
            f"no chart: run `gridloop bundle` (writes {DEFAULT_BUNDLE}) or pass --chart DIR"
        )
    assembled = assembling.assemble(say, mirror)
    if assembled.left_out:
        names = ", ".join(assembled.left_out)
        say(
            f"note: left out of the bundle, as they cannot be fetched here: {names}; the chart "
            "goes on without them (--bundle FILE or `gridloop bundle --mirror DIR` adds them)"
        )
    return assembled.chart


def known_profiles(chart: Path) -> list[str]:
    return sorted(p.stem for p in (chart / PROFILES).glob("*.yaml") if p.is_file())


def profile_file(chart: Path, name: str | None) -> Path | None:
    """`<chart>/profiles/<name>.yaml`, or a UsageError listing the profiles there are."""
    if name is None:
        return None
    known = known_profiles(chart)
    if name not in known:
        listed = ", ".join(known) or "none"
        raise UsageError(f"--profile {name}: no such profile in {chart} (known: {listed})")
    return chart / PROFILES / f"{name}.yaml"


def values_file(path: Path, flag: str = "-f") -> dict[str, object]:
    """A values file as a mapping (empty file: no values); read errors name the flag."""
    if not path.is_file():
        raise UsageError(f"{flag} {path}: no such file")
    try:
        data = read_document(path, "the file")
    except DocumentProblem as err:
        raise UsageError(f"{flag} {path}: {err}") from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"{flag} {path}: must be a mapping of values, not {type(data).__name__}")
    return data


def kubeconfig(flag: Path | None) -> str:
    """`--kubeconfig`, else $KUBECONFIG (it may list several files), else the local
    cluster's if it has been started, else ~/.kube/config."""
    if flag is not None:
        if not flag.is_file():
            raise UsageError(f"--kubeconfig {flag}: no such file")
        return str(flag)
    env = os.environ.get("KUBECONFIG")
    if env:
        return env
    local = paths.state_root() / "kubeconfig"
    if local.is_file():
        return str(local)
    home = Path.home() / ".kube" / "config"
    if home.is_file():
        return str(home)
    raise UsageError(
        "no kubeconfig: pass --kubeconfig, set KUBECONFIG, or start the local cluster "
        "(`gridloop local up`)"
    )

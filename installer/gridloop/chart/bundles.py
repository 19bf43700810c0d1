"""`install --bundle FILE`: the chart from a tarball `gridloop bundle --tarball` wrote.

The tarball is `helm package`'s: one top folder holding Chart.yaml, crds/ and upstream/,
so everything an air-gapped install applies is in it. It is unpacked into a private
temporary folder (removed when the command ends) with the `data` filter, which refuses
absolute paths, `..`, links out of the folder and device files.
"""

from __future__ import annotations

import atexit
import shutil
import tarfile
import tempfile
from pathlib import Path

from gridloop.errors import UsageError


def unpack(bundle: Path) -> Path:
    """The chart folder inside `bundle`, unpacked; bad files are a UsageError naming --bundle."""
    if not bundle.is_file():
        raise UsageError(f"--bundle {bundle}: no such file")
    work = Path(tempfile.mkdtemp(prefix="gridloop-bundle-"))
    atexit.register(shutil.rmtree, work, True)
    try:
        with tarfile.open(bundle, "r:*") as tar:
            tar.extractall(work, filter="data")
    except (tarfile.TarError, OSError, EOFError) as err:
        raise UsageError(f"--bundle {bundle}: not a chart tarball ({err})") from err
    charts = sorted(p.parent for p in work.glob("*/Chart.yaml"))
    if len(charts) != 1:
        raise UsageError(
            f"--bundle {bundle}: want one chart folder with a Chart.yaml, found {len(charts)} "
            "(write it with `gridloop bundle --tarball`)"
        )
    return charts[0]

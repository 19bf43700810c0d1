"""gridloop's wheel in a fresh virtualenv outside the checkout, as a user installs it
(shared by tests/unit/test_wheel.py and tests/cluster/test_installer_from_wheel.py).

pip builds the wheel from the repository and installs it, with `extras` if given, and
its dependencies from the package index (pip's cache when warm): about 15 s.
"""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def install_wheel(work: Path, extras: str = "") -> Path:
    """The venv's bin/ with only gridloop's wheel (and its dependencies) installed."""
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(work), str(REPO)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = work.glob("gridloop-*.whl")
    venv.create(work / "venv", with_pip=True)
    bin_dir = work / "venv" / "bin"
    wanted = f"{wheel}[{extras}]" if extras else str(wheel)
    done = subprocess.run(
        [str(bin_dir / "pip"), "install", "--quiet", wanted], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return bin_dir

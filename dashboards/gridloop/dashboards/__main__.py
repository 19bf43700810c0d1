"""`python -m gridloop.dashboards generate|preview`: the same as `gridloop dashboards`."""

from __future__ import annotations

import sys

from gridloop.cli import main

if __name__ == "__main__":
    sys.exit(main(["dashboards", *sys.argv[1:]]))

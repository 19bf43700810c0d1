"""Images for the container nodes, built here and served by the local registry.

- `table.py`          one row per image built FROM scratch (the pause image, a busybox
                      for tests, the upstream controllers): its name and tag as a cluster
                      pulls it, and what it is made of (pure)
- `buildah.py`        builds a row with buildah into a cache keyed by its inputs, and
                      pushes an image to the local registry
- `gridloop_image.py` gridloop's own image, from the repository's Containerfile on a
                      Debian base made with debootstrap
- `pushing.py`        builds every image and pushes what the registry lacks (what `build`
                      and `up` call)
- `registry.py`       the local registry (CNCF distribution) on 127.0.0.1: its config, and
                      what it holds
"""

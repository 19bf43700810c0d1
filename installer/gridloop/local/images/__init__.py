"""Images for the container nodes, built here and served by the local registry.

- `table.py`     one row per image: its name and tag as a cluster pulls it, and what it
                 is made of (pure)
- `buildah.py`   builds a row with buildah into a cache keyed by its inputs, and pushes
                 it to the local registry
- `registry.py`  the local registry (CNCF distribution) on 127.0.0.1: its config, and
                 whether it already holds an image
"""

"""`gridloop status`: the fleet, its GPU health, the queues, inference and sandboxes.

A pure core (`snapshot.py` holds what was seen, `views.py` turns it into the rows
of each view) and a thin shell: `collecting.py` reads the cluster and Prometheus
(nodes and pods through watches, the small things by polling), `printing.py`
writes `--once` output, `app.py` is the Textual UI over the same views.
"""

"""What `gridloop status` looks like, view by view: SVG snapshots of the real Textual app
over one fixed Snapshot (status_sample.py). The UI is fed data, not a cluster: the
cluster-fed app is driven in tests/cluster/test_status_live.py.

Regenerate after an intended change: pytest tests/unit/test_status_screens.py --snapshot-update
"""

from __future__ import annotations

from status_sample import SAMPLE

from gridloop.status.app import StatusApp

SIZE = (150, 24)


def app(view: str = "fleet") -> StatusApp:
    return StatusApp(lambda: SAMPLE, view=view, live=False)


async def first_data(pilot) -> None:
    while pilot.app.first_data_at is None:
        await pilot.pause(0.01)


def test_fleet_view(snap_compare):
    assert snap_compare(app(), terminal_size=SIZE, run_before=first_data)


def test_queues_view(snap_compare):
    assert snap_compare(app("queues"), terminal_size=SIZE, run_before=first_data)


def test_inference_view(snap_compare):
    assert snap_compare(app("inference"), terminal_size=SIZE, run_before=first_data)


def test_sandboxes_view(snap_compare):
    # each template and its pods: wider than the other views
    assert snap_compare(app("sandboxes"), terminal_size=(180, 24), run_before=first_data)


def test_events_view(snap_compare):
    assert snap_compare(app("events"), terminal_size=SIZE, run_before=first_data)


def test_filtered_and_sorted(snap_compare):
    keys = ["slash", *"a100", "enter", "s", "s", "s", "s", "s", "s", "s", "S"]
    assert snap_compare(app(), terminal_size=SIZE, run_before=first_data, press=keys)


def test_node_detail(snap_compare):
    keys = ["slash", *"quarantined", "enter", "enter"]
    assert snap_compare(app(), terminal_size=(150, 30), run_before=first_data, press=keys)


def test_help(snap_compare):
    assert snap_compare(app(), terminal_size=(150, 30), run_before=first_data, press=["?"])

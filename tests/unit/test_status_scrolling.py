"""The table holds one screenful and the window moves: 300 nodes in a 20-line terminal, and
the cursor keys still reach every one of them (the real Textual app, fed fixed data)."""

from __future__ import annotations

import asyncio

from textual.widgets import DataTable

from gridloop.status.app import Detail, StatusApp
from gridloop.status.snapshot import Node, Snapshot

NODES = tuple(
    Node(name=f"node-{i:03d}", site="s", pool="p", region="r", product="H100", gpus=8)
    for i in range(300)
)


def run(check) -> None:
    app = StatusApp(lambda: Snapshot(taken_at=0.0, nodes=NODES), live=False)

    async def scenario() -> None:
        async with app.run_test(size=(120, 20)) as pilot:
            while app.first_data_at is None:
                await pilot.pause(0.01)
            await check(app, pilot)

    asyncio.run(scenario())


def on_screen(app: StatusApp) -> list[str]:
    table = app.query_one(DataTable)
    return [str(table.get_row_at(i)[0]) for i in range(table.row_count)]


def test_the_table_holds_a_screenful_not_every_row():
    async def check(app, pilot):
        rows = on_screen(app)
        assert 5 < len(rows) < 20 and rows[0] == "node-000"
        assert len(app.shown) == 300

    run(check)


def test_cursor_keys_scroll_the_window_over_all_rows():
    async def check(app, pilot):
        page = len(on_screen(app))
        await pilot.press(*["down"] * (page + 4))
        assert app.selected_key() == f"node-{page + 4:03d}"
        assert on_screen(app)[-1] == f"node-{page + 4:03d}"
        await pilot.press("ctrl+end")
        assert app.selected_key() == "node-299" and on_screen(app)[-1] == "node-299"
        await pilot.press("pageup")
        assert app.selected_key() == f"node-{299 - page:03d}"
        await pilot.press("ctrl+home")
        assert app.selected_key() == "node-000" and on_screen(app)[0] == "node-000"

    run(check)


def test_enter_opens_the_row_under_the_cursor_even_far_down():
    async def check(app, pilot):
        page = len(on_screen(app))
        await pilot.press("pagedown", "pagedown", "pagedown", "up", "enter")
        assert isinstance(app.screen, Detail)
        assert dict(app.screen.lines)["node"] == f"node-{3 * page - 1:03d}"

    run(check)

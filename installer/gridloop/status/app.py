"""The live terminal UI of `gridloop status`, in Textual, k9s-style.

Five views over one Snapshot (views.py decides every row): `:` switches view,
`/` filters, `s` sorts by the next column (`S` reverses), Enter
drills into a node or queue, `?` shows the keys, `q` quits. Snapshots come from a
worker thread, so a slow or unreachable API server never blocks the UI; when a
source is stale the header says so in red and the last data stays on screen.
With `--allow-actions`, `c`/`u` cordon/uncordon the selected node and `R` resets the
health service's breaker, each after a confirmation.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from rich.console import JustifyMethod
from rich.text import Text
from textual import events, on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Input, Static

from gridloop.errors import ClusterError
from gridloop.status import views
from gridloop.status.snapshot import Node, Snapshot

ALIASES = {
    "fleet": "fleet",
    "nodes": "fleet",
    "node": "fleet",
    "no": "fleet",
    "queues": "queues",
    "queue": "queues",
    "cq": "queues",
    "clusterqueues": "queues",
    "inference": "inference",
    "models": "inference",
    "model": "inference",
    "sandboxes": "sandboxes",
    "sandbox": "sandboxes",
    "sb": "sandboxes",
    "events": "events",
    "event": "events",
    "ev": "events",
}

HELP = """\
[b]gridloop status[/b] — keys

  :VIEW    switch view: fleet (nodes, no), queues (cq), inference (models),
           sandboxes (sb), events (ev); also 1-5
  /TEXT    filter rows: every word must match a cell; !word excludes
  Esc      clear the filter, close a panel
  s        sort by the next column; S reverses; or click a column title
  Enter    details of the selected node or ClusterQueue
  r        refresh now
  ?        this help
  q        quit
{actions}"""

ACTIONS_HELP = """
  c        cordon the selected node        (--allow-actions, asks first)
  u        uncordon the selected node      (--allow-actions, asks first)
  R        reset the health breaker         (--allow-actions, asks first)
"""

MAX_WIDTH = 90  # a column wider than this (a long REASON or MESSAGE) is cut on screen


def _widths(columns: tuple[views.Column, ...], rows: tuple[views.Row, ...]) -> tuple[int, ...]:
    """Each column as wide as its widest cell over all rows, so scrolling never jitters."""
    widths = [len(c.title) for c in columns]
    for row in rows:
        for i, cell in enumerate(row.cells):
            if len(cell) > widths[i]:
                widths[i] = len(cell)
    return tuple(min(w, MAX_WIDTH) for w in widths)


class WindowTable(DataTable[Text]):
    """A DataTable over a window of the rows: its cursor keys move over all rows."""

    def _app(self) -> StatusApp:
        app = self.app
        assert isinstance(app, StatusApp)
        return app

    def action_cursor_up(self) -> None:
        self._app().move(-1)

    def action_cursor_down(self) -> None:
        self._app().move(+1)

    def action_page_up(self) -> None:
        self._app().move(-self._app()._page())

    def action_page_down(self) -> None:
        self._app().move(+self._app()._page())

    def action_scroll_top(self) -> None:
        self._app().move(to=0)

    def action_scroll_bottom(self) -> None:
        self._app().move(to=len(self._app().shown) - 1)

    def _on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        event.stop()
        self._app().move(+3)

    def _on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        event.stop()
        self._app().move(-3)


Source = Callable[[], Snapshot]
Act = Callable[[str, str], str]  # (action, node) -> what was done


class Detail(ModalScreen[None]):
    BINDINGS: ClassVar = [Binding("escape,q,enter", "dismiss", "close")]
    DEFAULT_CSS = """
    Detail { align: center middle; }
    Detail > Vertical { width: 90%; height: auto; max-height: 90%; border: round $accent;
                        background: $surface; padding: 0 1; }
    """

    def __init__(self, title: str, lines: list[tuple[str, str]]) -> None:
        super().__init__()
        self.title_text = title
        self.lines = lines

    def compose(self) -> ComposeResult:
        width = max((len(k) for k, _ in self.lines), default=0)
        body = Text()
        for k, v in self.lines:
            body.append(f"{k:<{width}}  ", style="bold")
            body.append(f"{v}\n")
        with Vertical():
            yield Static(Text(self.title_text, style="bold"), id="detail-title")
            yield Static(body, id="detail-body")


class Confirm(ModalScreen[bool]):
    BINDINGS: ClassVar = [
        Binding("y", "answer(True)", "yes"),
        Binding("n,escape", "answer(False)", "no"),
    ]
    DEFAULT_CSS = """
    Confirm { align: center middle; }
    Confirm > Static { width: auto; border: round $warning; background: $surface; padding: 1 2; }
    """

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        yield Static(f"{self.question}  [b]y[/b]es / [b]n[/b]o", id="confirm")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class Help(ModalScreen[None]):
    BINDINGS: ClassVar = [Binding("escape,q,question_mark", "dismiss", "close")]
    DEFAULT_CSS = """
    Help { align: center middle; }
    Help > Static { width: auto; border: round $accent; background: $surface; padding: 0 2; }
    """

    def __init__(self, actions: bool) -> None:
        super().__init__()
        self.actions = actions

    def compose(self) -> ComposeResult:
        yield Static(HELP.format(actions=ACTIONS_HELP if self.actions else ""), id="help")


class StatusApp(App[None]):
    TITLE = "gridloop status"
    CSS = """
    #header { height: 2; padding: 0 1; background: $panel; }
    #stale { height: auto; padding: 0 1; background: $error; color: $text; display: none; }
    #stale.shown { display: block; }
    #empty { display: none; padding: 1 2; color: $text-muted; }
    #empty.shown { display: block; }
    #prompt { display: none; height: 1; border: none; padding: 0 1; }
    #prompt.shown { display: block; }
    DataTable { height: 1fr; }
    """
    BINDINGS: ClassVar = [
        Binding("q", "quit", "quit"),
        Binding("colon", "prompt(':')", "view"),
        Binding("slash", "prompt('/')", "filter"),
        Binding("question_mark", "help", "help"),
        Binding("s", "sort", "sort"),
        Binding("S", "reverse", "reverse", show=False),
        Binding("r", "refresh", "refresh"),
        Binding("escape", "clear_filter", "clear", show=False),
        Binding("1", "view('fleet')", show=False),
        Binding("2", "view('queues')", show=False),
        Binding("3", "view('inference')", show=False),
        Binding("4", "view('sandboxes')", show=False),
        Binding("5", "view('events')", show=False),
        Binding("c", "act('cordon')", "cordon", show=False),
        Binding("u", "act('uncordon')", "uncordon", show=False),
        Binding("R", "act('reset-breaker')", "reset breaker", show=False),
    ]

    def __init__(
        self,
        source: Source,
        view: str = "fleet",
        interval: float = 2.0,
        act: Act | None = None,
        live: bool = True,
        filter_text: str = "",
    ) -> None:
        super().__init__()
        self.source = source
        self.view = view
        self.interval = interval
        self.act = act  # None: read-only
        self.live = live  # False: one snapshot, no refresh loop (screenshots, tests)
        self.snapshot: Snapshot | None = None
        self.filter_text = filter_text
        self.sort_column: int | None = None
        self.sort_reverse = False
        self.prompt_kind = ""
        self.shown: tuple[views.Row, ...] = ()  # every row of the view, filtered and sorted
        self.shown_view = ""
        self.widths: tuple[int, ...] = ()
        self.window: tuple[views.Row, ...] = ()  # the rows the DataTable holds
        self.layout: tuple[str, tuple[int, ...]] = ("", ())
        self.offset = 0  # index in `shown` of the window's first row
        self.cursor = 0  # index in `shown` of the selected row
        self.good_at = 0.0  # when the last snapshot with no problems came in
        self.first_frame_at: float | None = None  # monotonic: the UI is on screen
        self.first_data_at: float | None = None  # monotonic: the first data is on screen
        self.refreshes = 0
        self._header: Text | None = None  # what the header and STALE line show now
        # the summary line, and what it was computed from (5 ms at 5,000 nodes): the
        # nodes (the same tuple while no node changed), the breaker and the queues
        self._summary: tuple[object, object, str] = (None, None, "")
        self._stale = ""
        self._fleet_cache: tuple[tuple[Node, ...], views.Table] | None = None
        self._row_cache: dict[int, tuple[Node, views.Row]] = {}
        self._rows_cache: (
            tuple[views.Table, tuple[str, int | None, bool], tuple[views.Row, ...]] | None
        ) = None

    def compose(self) -> ComposeResult:
        yield Static("gridloop status: connecting…", id="header")
        yield Static("", id="stale")
        yield Input(id="prompt")
        yield WindowTable(cursor_type="row", zebra_stripes=True, id="table")
        yield Static("", id="empty")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self.call_after_refresh(self._first_frame)

    def _first_frame(self) -> None:
        """The UI is on screen: only now start polling (the source's first call may
        import and connect, and would otherwise hold the first paint back)."""
        if self.first_frame_at is None:
            self.first_frame_at = time.monotonic()
            self.poll()

    @work(thread=True, exclusive=True, group="poll")
    def poll(self) -> None:
        from textual.worker import get_current_worker

        worker = get_current_worker()
        while not worker.is_cancelled:
            snapshot = self.source()
            if worker.is_cancelled:
                return
            self.call_from_thread(self.show, snapshot)
            if not self.live:
                return
            deadline = time.monotonic() + self.interval
            while time.monotonic() < deadline and not worker.is_cancelled:
                time.sleep(0.05)

    # --- drawing -------------------------------------------------------------------
    def show(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.refreshes += 1
        if not snapshot.problems:
            self.good_at = snapshot.taken_at
        self._draw_header()
        self._draw_table()
        if self.first_data_at is None:
            self.call_after_refresh(self._first_data)

    def _first_data(self) -> None:
        if self.first_data_at is None:
            self.first_data_at = time.monotonic()

    def _draw_header(self) -> None:
        s = self.snapshot
        if s is None:
            return
        title = Text()
        title.append("gridloop status", style="bold")
        title.append(f"  context {s.context or '?'}  ·  view ")
        title.append(self.view, style="bold reverse")
        if self.filter_text:
            title.append(f"  ·  filter /{self.filter_text}", style="bold yellow")
        if self.sort_column is not None:
            column = views.columns(self.view)[self.sort_column].title
            title.append(f"  ·  sorted by {column} {'↓' if self.sort_reverse else '↑'}")
        if self.act is not None:
            title.append("  ·  actions allowed", style="bold red")
        nodes, others, line = self._summary
        if nodes is not s.nodes or others != (s.breaker, s.queues):
            line = views.summary(s)
            self._summary = (s.nodes, (s.breaker, s.queues), line)
        title.append("\n" + line)
        if ignored := views.ignored(s):
            title.append(f"\nIGNORED: {ignored}", style="bold yellow")
        # an update lays the screen out again and redraws the table: only when it changed
        if title != self._header:
            self._header = title
            self.query_one("#header", Static).update(title)
        stale = self.query_one("#stale", Static)
        problem = views.stale(s)
        if problem:
            since = f" since {time.strftime('%H:%M:%S', time.localtime(self.good_at))}"
            age = since if self.good_at else ""
            line = f"STALE{age}: {problem}"
            if line != self._stale:
                self._stale = line
                stale.update(line)
            stale.add_class("shown")
        else:
            stale.remove_class("shown")

    def _table(self) -> views.Table:
        """The view's table; the fleet's is kept while the nodes are the same objects
        (the collector hands back the same tuple when no watch event changed a node)."""
        assert self.snapshot is not None
        if self.view != "fleet":
            return views.table(self.snapshot, self.view)
        nodes = self.snapshot.nodes
        if self._fleet_cache is None or self._fleet_cache[0] is not nodes:
            self._fleet_cache = (nodes, views.fleet(self.snapshot, self._fleet_row))
            self._row_cache = {
                id(n): self._row_cache[id(n)] for n in nodes if id(n) in self._row_cache
            }
        return self._fleet_cache[1]

    def _fleet_row(self, node: Node) -> views.Row:
        """A node's row, built once per node object (the collector keeps the object while
        nothing about the node changed)."""
        cached = self._row_cache.get(id(node))
        if cached is not None and cached[0] is node:
            return cached[1]
        row = views.fleet_row(node)
        self._row_cache[id(node)] = (node, row)
        return row

    def _rows(self) -> tuple[tuple[views.Column, ...], tuple[views.Row, ...], str]:
        table = self._table()
        how = (self.filter_text, self.sort_column, self.sort_reverse)
        cached = self._rows_cache
        if cached is not None and cached[0] is table and cached[1] == how:
            return table.columns, cached[2], table.empty
        rows = views.filtered(table.rows, self.filter_text)
        if self.sort_column is not None and self.sort_column < len(table.columns):
            rows = views.sorted_rows(rows, self.sort_column, self.sort_reverse)
        self._rows_cache = (table, how, rows)
        return table.columns, rows, table.empty

    def _draw_table(self) -> None:
        """Work out the rows (filtered, sorted), then paint the window of them on screen."""
        if self.snapshot is None:
            return
        columns, rows, empty = self._rows()
        if self.shown_view != self.view or rows != self.shown:
            self.shown, self.shown_view = rows, self.view
            self.widths = _widths(columns, rows)
        self._paint(columns)
        self._draw_empty(empty)

    def _page(self) -> int:
        """How many rows the table shows at once (its height less the header line)."""
        height = self.query_one(DataTable).size.height or self.size.height - 5
        return max(1, height - 1)

    def _paint(self, columns: tuple[views.Column, ...]) -> None:
        """Put rows[offset:offset+page] into the DataTable, changing only what changed.

        Textual's DataTable measures every cell of every row it holds: with 5,000 nodes
        that is seconds per redraw. It holds one screenful; the window moves instead.
        """
        rows, page = self.shown, self._page()
        self.cursor = max(0, min(self.cursor, len(rows) - 1))
        if self.cursor < self.offset:
            self.offset = self.cursor
        elif self.cursor >= self.offset + page:
            self.offset = self.cursor - page + 1
        self.offset = max(0, min(self.offset, len(rows) - page))
        window = rows[self.offset : self.offset + page]
        widget = self.query_one(DataTable)
        layout = (self.view, self.widths)
        if layout != self.layout:
            widget.clear(columns=True)
            for i, (c, width) in enumerate(zip(columns, self.widths, strict=True)):
                label = Text(c.title, justify="right" if c.numeric else "left")
                widget.add_column(label, key=str(i), width=width)
            self.layout, self.window = layout, ()
        if [r.key for r in window] == [r.key for r in self.window]:
            for new, old in zip(window, self.window, strict=True):
                if new == old:
                    continue
                for i, (cell, was) in enumerate(zip(new.cells, old.cells, strict=True)):
                    if cell != was or new.alert != old.alert:
                        widget.update_cell(new.key, str(i), self._cell(new, cell, columns[i]))
        else:
            widget.clear()
            for row in window:
                cells = (self._cell(row, v, c) for v, c in zip(row.cells, columns, strict=True))
                widget.add_row(*cells, key=row.key)
        self.window = window
        if window and widget.cursor_row != self.cursor - self.offset:
            widget.move_cursor(row=self.cursor - self.offset, animate=False)
        self._draw_position()

    def _draw_position(self) -> None:
        total = len(self.shown)
        where = f"{self.cursor + 1}/{total}" if total else "0/0"
        if where != self.sub_title:  # setting a border title redraws the whole table
            self.query_one(DataTable).border_subtitle = where
            self.sub_title = where

    def move(self, delta: int | None = None, to: int | None = None) -> None:
        """Move the cursor over all rows (not just the window), scrolling the window."""
        if not self.shown:
            return
        target = to if to is not None else self.cursor + (delta or 0)
        self.cursor = max(0, min(target, len(self.shown) - 1))
        self._paint(views.columns(self.view))

    def on_resize(self) -> None:
        if self.snapshot is not None:
            self.call_after_refresh(self._paint, views.columns(self.view))

    def _draw_empty(self, empty: str) -> None:
        note = self.query_one("#empty", Static)
        if self.shown:
            note.remove_class("shown")
            return
        note.update(f"no rows match /{self.filter_text}" if self.filter_text else empty)
        note.add_class("shown")

    @staticmethod
    def _cell(row: views.Row, value: str, column: views.Column) -> Text:
        justify: JustifyMethod = "right" if column.numeric else "left"
        return Text(value, style="red" if row.alert else "", justify=justify, no_wrap=True)

    # --- keys ----------------------------------------------------------------------
    def action_prompt(self, kind: str) -> None:
        prompt = self.query_one("#prompt", Input)
        self.prompt_kind = kind
        prompt.placeholder = (
            "view: fleet, queues, inference, sandboxes, events" if kind == ":" else "filter"
        )
        prompt.value = "" if kind == ":" else self.filter_text
        prompt.add_class("shown")
        prompt.focus()

    @on(Input.Submitted, "#prompt")
    def submitted(self, event: Input.Submitted) -> None:
        prompt = self.query_one("#prompt", Input)
        prompt.remove_class("shown")
        self.query_one(DataTable).focus()
        text = event.value.strip()
        if self.prompt_kind == ":":
            view = ALIASES.get(text.lower())
            if view is None:
                self.notify(
                    f":{text}: no such view (fleet, queues, inference, sandboxes, events)",
                    severity="error",
                )
                return
            self.action_view(view)
        else:
            self.filter_text = text
            self._redraw()

    def action_view(self, view: str) -> None:
        if view != self.view:
            self.view = view
            self.cursor = self.offset = 0
            self.sort_column = None
            self.sort_reverse = False
            self.filter_text = ""
        self._redraw()

    def action_clear_filter(self) -> None:
        prompt = self.query_one("#prompt", Input)
        if prompt.has_class("shown"):
            prompt.remove_class("shown")
            self.query_one(DataTable).focus()
            return
        if self.filter_text:
            self.filter_text = ""
            self._redraw()

    def action_sort(self) -> None:
        """Sort by the next column (after the last one: back to the view's own order)."""
        count = len(views.columns(self.view))
        following = 0 if self.sort_column is None else self.sort_column + 1
        self.sort_column = following if following < count else None
        self.sort_reverse = False
        self._redraw()

    def action_reverse(self) -> None:
        if self.sort_column is None:
            self.sort_column = 0
        self.sort_reverse = not self.sort_reverse
        self._redraw()

    @on(DataTable.HeaderSelected)
    def header_clicked(self, event: DataTable.HeaderSelected) -> None:
        self._sort_by(event.column_index)

    def _sort_by(self, column: int) -> None:
        if self.sort_column == column:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_column, self.sort_reverse = column, False
        self._redraw()

    def _redraw(self) -> None:
        self.shown_view = ""  # rows, widths and window are worked out again
        self.cursor = self.offset = 0
        self._draw_header()
        self._draw_table()

    def action_refresh(self) -> None:
        self.poll()

    def action_help(self) -> None:
        self.push_screen(Help(self.act is not None))

    def selected_key(self) -> str | None:
        if not self.shown:
            return None
        return self.shown[self.cursor].key if 0 <= self.cursor < len(self.shown) else None

    @on(DataTable.RowSelected)
    def drill(self, event: DataTable.RowSelected) -> None:
        self.cursor = self.offset + event.cursor_row  # Enter, or a click on a row
        key = event.row_key.value
        if self.snapshot is None or key is None:
            return
        lines = views.detail(self.snapshot, self.view, key)
        self.push_screen(Detail(f"{self.view}: {key}", lines))

    def action_act(self, action: str) -> None:
        if self.act is None:
            self.notify(
                "read-only: start with --allow-actions to cordon, uncordon or reset",
                severity="warning",
            )
            return
        node = "" if action == "reset-breaker" else (self.selected_key() or "")
        if action != "reset-breaker" and (self.view != "fleet" or not node):
            self.notify(f"{action}: select a node in the fleet view", severity="warning")
            return
        question = f"{action} {node}?" if node else "reset the health service's breaker?"
        act = self.act

        def answered(yes: bool | None) -> None:
            if yes:
                self._run_action(act, action, node)

        self.push_screen(Confirm(question), answered)

    @work(thread=True, group="act")
    def _run_action(self, act: Act, action: str, node: str) -> None:
        try:
            done = act(action, node)
        except Exception as err:  # shown, never fatal: the UI keeps running
            self.call_from_thread(self.notify, f"{action} failed: {err}", severity="error")
            return
        self.call_from_thread(self.notify, done)
        self.call_from_thread(self.poll)


def screenshot(
    app: StatusApp, path: Path, size: tuple[int, int] = (210, 36), timeout: float = 60.0
) -> None:
    """Run `app` headless until its first data is drawn, and save the screen as SVG."""

    async def draw() -> None:
        async with app.run_test(size=size) as pilot:
            deadline = time.monotonic() + timeout
            while app.first_data_at is None:
                if time.monotonic() > deadline:
                    raise ClusterError(f"no data to draw within {timeout:.0f}s")
                await pilot.pause(0.02)
            await pilot.pause(0.1)
            path.write_text(app.export_screenshot(title="gridloop status"))

    asyncio.run(draw())

"""`gridloop status` against the real local cluster: the Textual app driven by its pilot,
fed by the real collector (watches on the real API server, the real Prometheus), while
the real health service quarantines a node and lowers a real Kueue quota.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from kueue_scenario import POLICY, QUOTA, TeamQueues
from textual.widgets import DataTable, Static

from gridloop.health.reading import connect
from gridloop.health.service import HealthService
from gridloop.status.acting import Actions
from gridloop.status.app import Detail, StatusApp
from gridloop.status.collecting import Collector, Source

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("kueue_platform")]

FAILING = "us-east-h100-003"


@pytest.fixture
def team(local_cluster, namespace) -> Iterator[TeamQueues]:
    queues = TeamQueues(local_cluster.api, namespace, f"st{uuid.uuid4().hex[:4]}")
    yield queues
    queues.delete()


@pytest.fixture
def health(local_cluster, namespace, settle) -> Iterator[HealthService]:
    """The real health service, one cycle a second in a thread, until the test ends."""
    url = f"http://127.0.0.1:{local_cluster.state.ports.prometheus}"
    service = HealthService(local_cluster.api, connect(url), POLICY, namespace, log=print)
    settle(service)
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(1.0, stop), daemon=True)
    thread.start()
    yield service
    stop.set()
    thread.join(timeout=30)


def collector(local_cluster, namespace: str, **kw) -> Collector:
    url = f"http://127.0.0.1:{local_cluster.state.ports.prometheus}"
    source = Source(str(local_cluster.kubeconfig), prometheus_url=url, health_namespace=namespace)
    return Collector(dataclasses.replace(source, **kw)).start(interval=0.5)


async def until(pilot, check: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        await pilot.pause(0.1)


def cells(app: StatusApp, key: str) -> dict[str, str]:
    """The row the table shows for `key`, by column title (what is on screen)."""
    table = app.query_one(DataTable)
    titles = [str(c.label) for c in table.columns.values()]
    row = table.get_row(key)
    return dict(zip(titles, (str(c) for c in row), strict=True))


def test_a_quarantine_and_its_quota_change_show_up_live_and_can_be_found(
    local_cluster, namespace, team, health, sim
):
    team.create(QUOTA)
    source = collector(local_cluster, namespace)
    app = StatusApp(source.snapshot, interval=0.5)

    async def scenario() -> None:
        async with app.run_test(size=(220, 50)) as pilot:
            await until(pilot, lambda: app.shown and len(app.shown) == 24, "the 24 GPU nodes")
            assert cells(app, FAILING)["VERDICT"] == "healthy"

            sim("--node", FAILING, "--gpu", "2", "--xid", "79")
            await until(
                pilot,
                lambda: cells(app, FAILING)["VERDICT"] == "quarantined",
                f"{FAILING} quarantined on screen",
            )
            row = cells(app, FAILING)
            assert row["REASON"].startswith("xid-79 on GPU 2")
            assert (row["CORDONED BY"], row["HEALTHY"]) == ("gridloop-health", "7")
            header = str(app.query_one("#header", Static).render())
            assert "1 quarantined" in header

            # `/` filters down to the node; Enter drills into it
            await pilot.press("slash", *FAILING, "enter")
            assert [r.key for r in app.shown] == [FAILING]
            await pilot.press("enter")
            assert isinstance(app.screen, Detail)
            lines = dict(app.screen.lines)
            assert lines["quarantined by"] == "gridloop-health"
            taints = [v for k, v in app.screen.lines if k == "taint"]
            assert "gridloop.io/gpu-unhealthy=true:NoSchedule" in taints
            await pilot.press("escape", "escape")  # close the panel, clear the filter
            assert len(app.shown) == 24

            # `:cq` switches to the queues: the team's us-east quota lost the node's 8 GPUs
            await pilot.press("colon", "c", "q", "enter")
            assert app.view == "queues"
            lowered = f"{team.flavor_of('us-east')} 64→56"
            await until(
                pilot,
                lambda: (
                    team.queue in {r.key for r in app.shown}
                    and cells(app, team.queue)["LOWERED BY HEALTH"] == lowered
                ),
                "the lowered quota in the queues view",
            )
            assert cells(app, team.queue)["QUOTA GPUS"] == str(sum(QUOTA.values()) - 8)

            # the health service's Event is in the events view, newest first
            await pilot.press("5")
            await until(
                pilot,
                lambda: any(
                    r.cells[2] == "GPUQuarantined" and r.cells[3] == f"Node/{FAILING}"
                    for r in app.shown
                ),
                "the GPUQuarantined event",
            )
            await pilot.press("q")

    try:
        asyncio.run(scenario())
    finally:
        source.stop()


def test_with_prometheus_and_the_api_server_unreachable_the_ui_runs_and_says_stale(
    local_cluster, namespace, tmp_path
):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    # a copy of the kubeconfig that points at a port nothing listens on
    text = local_cluster.kubeconfig.read_text()
    server = f"https://127.0.0.1:{local_cluster.state.ports.apiserver}"
    assert server in text
    away = tmp_path / "kubeconfig"
    away.write_text(text.replace(server, f"https://127.0.0.1:{closed}"))

    # Prometheus away, API server there: the fleet shows, the header says what is stale
    live = collector(local_cluster, namespace, prometheus_url=f"http://127.0.0.1:{closed}")
    # both away: nothing to show, the UI still starts, says why, and quits on `q`
    dead = Collector(Source(str(away), prometheus_url=f"http://127.0.0.1:{closed}"))
    dead.start(wait=0, interval=0.5)

    async def scenario() -> None:
        app = StatusApp(live.snapshot, interval=0.5)
        async with app.run_test(size=(200, 40)) as pilot:
            await until(pilot, lambda: len(app.shown) == 24, "the fleet without Prometheus")
            stale = str(app.query_one("#stale", Static).render())
            assert stale.startswith("STALE") and "prometheus" in stale
            assert cells(app, "us-east-h100-000")["HEALTHY"] == "?"
        app = StatusApp(dead.snapshot, interval=0.5)
        async with app.run_test(size=(200, 40)) as pilot:
            await until(
                pilot,
                lambda: (
                    "api:" in (stale := str(app.query_one("#stale", Static).render()))
                    and "prometheus:" in stale
                ),
                "STALE naming the API server and Prometheus",
            )
            await pilot.press("q")

    try:
        asyncio.run(scenario())
    finally:
        live.stop()
        dead.stop()


def test_cordon_needs_allow_actions_and_a_yes(local_cluster, namespace):
    node = "eu-west-a100-002"
    core = local_cluster.core
    source = collector(local_cluster, namespace)

    def cordoned() -> bool:
        return bool(core.read_node(node).spec.unschedulable)

    async def select(app: StatusApp, pilot) -> None:
        await until(pilot, lambda: len(app.shown) == 24, "the fleet")
        await pilot.press("slash", *node, "enter")
        assert app.selected_key() == node

    async def scenario() -> None:
        # read-only (the default): `c` does nothing but say so
        app = StatusApp(source.snapshot, interval=0.5)
        async with app.run_test(size=(200, 40)) as pilot:
            await select(app, pilot)
            await pilot.press("c")
            assert app.screen is app.screen_stack[0] and not cordoned()

        app = StatusApp(source.snapshot, interval=0.5, act=Actions(source.api, namespace))
        async with app.run_test(size=(200, 40)) as pilot:
            await select(app, pilot)
            await pilot.press("c", "n")  # asked, answered no
            await pilot.pause(0.5)
            assert not cordoned()
            await pilot.press("c", "y")
            await until(pilot, lambda: cells(app, node)["VERDICT"] == "cordoned", "cordoned")
            assert cordoned()
            await pilot.press("u", "y")
            await until(pilot, lambda: cells(app, node)["VERDICT"] == "healthy", "uncordoned")
            assert not cordoned()

    try:
        asyncio.run(scenario())
    finally:
        source.stop()
        core.patch_node(node, {"spec": {"unschedulable": None}})


def test_a_changed_node_rebuilds_its_row_alone_and_the_rest_stay_the_same_objects(
    local_cluster, namespace
):
    """A label on one node gives that node a new row; every other row is the very
    object it was (which is what lets the UI skip them), and the fleet keeps its order."""
    node, label = "eu-west-a100-002", f"test.gridloop.io/{namespace}"
    source = collector(local_cluster, namespace)
    try:
        assert source.nodes.wait_synced(30)
        before = source.snapshot().nodes
        local_cluster.core.patch_node(node, {"metadata": {"labels": {label: "x"}}})

        def labelled() -> tuple:
            rows = source.snapshot().nodes
            return rows if (label, "x") in next(n for n in rows if n.name == node).labels else ()

        after = _wait(labelled, "the label in the node's row")
        assert [n.name for n in after] == [n.name for n in before]
        moved = [a.name for a, b in zip(after, before, strict=True) if a is not b]
        assert moved == [node]
    finally:
        source.stop()
        local_cluster.core.patch_node(node, {"metadata": {"labels": {label: None}}})


def _wait(check: Callable[[], object], what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)
    return found

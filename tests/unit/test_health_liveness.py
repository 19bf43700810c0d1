"""/healthz says when the health service's loop is stuck, so the kubelet restarts it."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from gridloop.health import liveness
from gridloop.health.metrics import Metrics, serve


@pytest.mark.parametrize(
    ("since_beat", "interval", "alive"),
    [
        (0.0, 5.0, True),
        (59.0, 5.0, True),  # a long storm cycle is not a stuck loop: a minute at least
        (61.0, 5.0, False),
        (119.0, 12.0, True),  # ten intervals, when that is longer
        (121.0, 12.0, False),
    ],
)
def test_a_loop_is_alive_until_ten_intervals_or_a_minute_pass_without_a_beat(
    since_beat: float, interval: float, alive: bool
) -> None:
    assert liveness.alive(last_beat=1000.0, now=1000.0 + since_beat, interval_s=interval) is alive


def _get(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def test_healthz_fails_while_the_loop_is_stuck_and_readyz_is_apart() -> None:
    stuck = [False]
    server = serve(Metrics(), "127.0.0.1", 0, ready=lambda: True, alive=lambda: not stuck[0])
    try:
        port = server.server_port
        assert _get(port, "/healthz") == 200
        stuck[0] = True
        assert _get(port, "/healthz") == 503
        assert _get(port, "/readyz") == 200
    finally:
        server.shutdown()

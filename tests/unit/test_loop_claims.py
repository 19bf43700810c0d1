"""The loop's sandbox claims are made one at a time (agent-sandbox v0.2.1 could hand one
warm-pool pod to two claims made together: loop/running.py says how; kept with v1.0.3),
while the sandboxes themselves are used side by side."""

from __future__ import annotations

import threading
import time

from gridloop.loop.running import OneClaimAtATime


class SlowClaim:
    """A client whose claim takes a while to be served, recording what overlaps."""

    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def __enter__(self) -> SlowClaim:
        self.log.append(f"claim {self.name}")
        time.sleep(0.2)
        self.log.append(f"ready {self.name}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.log.append(f"release {self.name}")


def test_a_second_claim_is_made_only_once_the_first_is_ready_and_both_are_then_used() -> None:
    log: list[str] = []
    both_in_use = threading.Barrier(2, timeout=5)

    def agent(name: str) -> None:
        with OneClaimAtATime(SlowClaim(log, name)) as sandbox:
            assert isinstance(sandbox, SlowClaim) and sandbox.name == name
            both_in_use.wait()  # each waits for the other: the sandboxes overlap in use

    threads = [threading.Thread(target=agent, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)

    first, second = log[0].split()[1], log[2].split()[1]
    assert log[:4] == [f"claim {first}", f"ready {first}", f"claim {second}", f"ready {second}"]
    assert sorted(log[4:]) == ["release a", "release b"]

"""The health service's pure core: faults in, actions out, safety first."""

from __future__ import annotations

import dataclasses

import pytest

from gridloop.health.actions import (
    Acknowledge,
    ClearHealthy,
    Hold,
    MarkHealthy,
    Quarantine,
    Release,
    Skip,
    Warn,
)
from gridloop.health.breaker import advance
from gridloop.health.observed import Breaker, GpuReading, NodeView, Observed, Record
from gridloop.health.plan import limit, plan
from gridloop.health.policy import Limits, Policy, XidAction

NOW = 1_000_000.0
POLICY = Policy()


def gpus(node: str, count: int = 8, **faulty: object) -> dict[str, GpuReading]:
    """`count` healthy GPUs; keyword fields apply to GPU 3 (e.g. xid=79)."""
    out = {
        f"GPU-{node}-{i}": GpuReading(uuid=f"GPU-{node}-{i}", index=str(i)) for i in range(count)
    }
    if faulty:
        key = f"GPU-{node}-3"
        out[key] = dataclasses.replace(out[key], **faulty)
    return out


def observed(
    nodes: int = 4,
    pool: str = "us-east/h100",
    faults: dict[str, dict[str, object]] | None = None,
    views: dict[str, NodeView] | None = None,
    **kw: object,
) -> Observed:
    names = [f"n{i}" for i in range(nodes)]
    faults = faults or {}
    node_views = {n: NodeView(name=n, pool=pool, gpus_expected=8) for n in names}
    node_views.update(views or {})
    return Observed(
        nodes=node_views,
        gpus={n: gpus(n, **faults.get(n, {})) for n in names},
        exporter_up=dict.fromkeys(names, True),
        newest_sample_age_s=5.0,
        **kw,  # type: ignore[arg-type]
    )


def kinds(actions: list[object]) -> list[str]:
    return [type(a).__name__ for a in actions]


def test_healthy_fleet_plans_nothing():
    assert plan(observed(), POLICY, Breaker(), NOW) == []


def test_xid_79_quarantines_only_that_node_naming_the_gpu():
    actions = plan(observed(faults={"n2": {"xid": 79}}), POLICY, Breaker(), NOW)

    assert kinds(actions) == ["Quarantine"]
    q = actions[0]
    assert isinstance(q, Quarantine)
    assert q.node == "n2"
    assert q.gpus == ("GPU-n2-3",)
    assert q.faults == frozenset({"GPU-n2-3:xid-79"})
    assert q.reason == "xid-79 on GPU 3 (GPU-n2-3)"


@pytest.mark.parametrize(
    ("fault", "quarantined"),
    [
        pytest.param({"xid": 13}, False, id="application-xid-once"),
        pytest.param({"xid": 13, "xid_repeats": 2}, False, id="application-xid-twice"),
        pytest.param({"xid": 13, "xid_repeats": 3}, True, id="application-xid-repeated"),
        pytest.param({"xid": 63}, False, id="xid-63-without-pending-remap"),
        pytest.param({"xid": 63, "row_remap_pending": True}, True, id="xid-63-with-pending-remap"),
        pytest.param({"xid": 1}, False, id="unlisted-xid"),
        pytest.param({"xid": 48}, True, id="xid-48-dbe"),
        pytest.param({"xid": 94}, True, id="xid-94-contained-ecc"),
        pytest.param({"ecc_dbe_increase": 1.0}, True, id="ecc-double-bit-increase"),
        pytest.param({"row_remap_failure": True}, True, id="row-remap-failure"),
        pytest.param({"retired_pages_pending": True}, True, id="retired-pages-pending"),
        pytest.param({"thermal_violation": 0.49}, False, id="thermal-below-threshold"),
        pytest.param({"thermal_violation": 0.5}, True, id="thermal-sustained"),
        pytest.param({"power_violation": 1.0}, False, id="power-violation-off-by-default"),
        pytest.param({"nvlink_error_rate": 0.5}, False, id="nvlink-below-threshold"),
        pytest.param({"nvlink_error_rate": 2.0}, True, id="nvlink-error-rate"),
        pytest.param({"pcie_replay_rate": 10.0}, True, id="pcie-replay-rate"),
    ],
)
def test_which_signals_quarantine(fault, quarantined):
    actions = plan(observed(faults={"n1": fault}), POLICY, Breaker(), NOW)
    assert kinds(actions) == (["Quarantine"] if quarantined else [])


def test_vanished_gpu_quarantines_when_its_exporter_is_up():
    obs = observed()
    obs.gpus["n1"].pop("GPU-n1-5")

    actions = plan(obs, POLICY, Breaker(), NOW)

    assert [(type(a).__name__, a.node) for a in actions] == [("Quarantine", "n1")]
    assert actions[0].faults == frozenset({"node:gpu-vanished"})


def test_exporter_down_is_a_warning_never_a_quarantine():
    obs = observed(faults={"n1": {"xid": 79}})
    obs.exporter_up["n1"] = False
    obs.gpus["n1"].clear()

    actions = plan(obs, POLICY, Breaker(), NOW)

    assert actions == [Warn("n1", "DCGM exporter is down: GPU health unknown, not acting")]


def test_a_fresh_fault_event_on_a_node_the_late_baseline_thinks_down_quarantines():
    # the background read ran before the exporter's first scrape; this cycle's own read
    # has its XID 79, so that scrape succeeded since
    obs = observed()
    obs.exporter_up["n1"] = False
    obs.gpus["n1"].clear()
    obs = dataclasses.replace(
        obs, fault_gpus={"n1": {"GPU-n1-3": GpuReading("GPU-n1-3", "3", xid=79)}}
    )

    actions = plan(obs, POLICY, Breaker(), NOW)

    assert kinds(actions) == ["Quarantine"]
    assert actions[0].reason == "xid-79 on GPU 3 (GPU-n1-3)"


def test_an_operator_override_turns_an_xid_off():
    policy = dataclasses.replace(POLICY, xid={**POLICY.xid, 79: XidAction.IGNORE})
    assert plan(observed(faults={"n1": {"xid": 79}}), policy, Breaker(), NOW) == []


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        pytest.param(
            {"prometheus_error": "connection refused"},
            "cannot read Prometheus",
            id="prometheus-down",
        ),
        pytest.param({"newest_sample_age_s": 31.0}, "older than 30s", id="stale-samples"),
        pytest.param({"newest_sample_age_s": None}, "no DCGM samples", id="no-samples"),
        pytest.param({"gpus": {}}, "no DCGM samples", id="empty-fleet"),
    ],
)
def test_unsure_means_no_quarantine_and_no_release(change, reason):
    ours = NodeView(
        "n0",
        "us-east/h100",
        8,
        unschedulable=True,
        record=Record(NOW - 9999, frozenset({"GPU-n0-3:xid-79"}), healthy_since=1.0),
    )
    obs = dataclasses.replace(observed(faults={"n1": {"xid": 79}}, views={"n0": ours}), **change)

    actions = plan(obs, POLICY, Breaker(), NOW)

    assert kinds(actions) == ["Hold"]
    assert reason in actions[0].reason


def test_a_node_cordoned_by_someone_else_is_left_alone():
    theirs = NodeView("n1", "us-east/h100", 8, unschedulable=True)
    actions = plan(
        observed(faults={"n1": {"xid": 79}}, views={"n1": theirs}), POLICY, Breaker(), NOW
    )
    assert actions == [Skip("n1", "cordoned by someone else: left alone")]


def test_an_opted_out_node_is_left_alone():
    exempt = NodeView("n1", "us-east/h100", 8, opted_out=True)
    assert (
        plan(observed(faults={"n1": {"xid": 79}}, views={"n1": exempt}), POLICY, Breaker(), NOW)
        == []
    )


XID79 = frozenset({"GPU-n1-3:xid-79"})


def quarantined(healthy_since: float | None = None, unschedulable: bool = True) -> NodeView:
    return NodeView(
        "n1",
        "us-east/h100",
        8,
        unschedulable=unschedulable,
        record=Record(NOW - 3600, XID79, healthy_since=healthy_since),
    )


@pytest.mark.parametrize(
    ("view", "fault", "expected"),
    [
        pytest.param(quarantined(), {}, [MarkHealthy("n1", NOW)], id="healthy-starts-hold-down"),
        pytest.param(quarantined(NOW - 60), {}, [], id="within-hold-down"),
        pytest.param(quarantined(NOW - 600), {}, [Release("n1")], id="hold-down-over"),
        pytest.param(quarantined(NOW - 60), {"xid": 79}, [ClearHealthy("n1")], id="flapping"),
        pytest.param(quarantined(), {"xid": 79}, [], id="still-failing"),
        pytest.param(
            quarantined(unschedulable=False),
            {},
            [Acknowledge("n1", XID79)],
            id="uncordoned-by-hand",
        ),
    ],
)
def test_a_node_gridloop_quarantined(view, fault, expected):
    obs = observed(faults={"n1": fault}, views={"n1": view})
    assert plan(obs, POLICY, Breaker(), NOW) == expected


def test_an_acknowledged_fault_is_not_quarantined_again_but_a_new_one_is():
    acked = NodeView("n1", "us-east/h100", 8, acknowledged=XID79)

    assert (
        plan(observed(faults={"n1": {"xid": 79}}, views={"n1": acked}), POLICY, Breaker(), NOW)
        == []
    )
    again = plan(
        observed(faults={"n1": {"xid": 79, "ecc_dbe_increase": 2.0}}, views={"n1": acked}),
        POLICY,
        Breaker(),
        NOW,
    )
    assert kinds(again) == ["Quarantine"]


def test_sixty_percent_of_a_pool_failing_stops_at_the_limit_and_trips_the_breaker():
    policy = dataclasses.replace(
        POLICY,
        limits=Limits(
            fleet_max_nodes=100, fleet_max_percent=100, pool_max_nodes=4, pool_max_percent=25
        ),
    )
    failing = {f"n{i}": {"xid": 79} for i in range(6)}

    actions = plan(observed(nodes=10, faults=failing), policy, Breaker(), NOW)

    # 25% of 10 nodes is 2, lower than 4 nodes: two go, then the breaker trips
    assert kinds(actions) == ["Quarantine", "Quarantine", "TripBreaker"] + ["Skip"] * 4
    assert "pool us-east/h100: 2 of 2" in actions[2].reason


WAITS = (
    "pool us-east/h100 has 2 of 2 nodes quarantined (health policy limits.pool): "
    "waits for a release"
)


def test_a_slow_stream_of_faults_leaves_at_most_the_limit_out_and_a_release_lets_the_next_in():
    """One node fails every 70 s, under a pool limit of 2 in a 60 s window: the window never
    sees two, yet no more than two are out while they stay failing."""
    window = 60.0
    policy = dataclasses.replace(
        POLICY,
        limits=Limits(
            fleet_max_nodes=100, fleet_max_percent=100, pool_max_nodes=2, pool_max_percent=100,
            window_s=window,
        ),
    )  # fmt: skip
    views = {f"n{i}": NodeView(f"n{i}", "us-east/h100", 8) for i in range(8)}
    failing: dict[str, dict[str, object]] = {}
    breaker, now = Breaker(), NOW

    def cycle() -> list[object]:
        nonlocal breaker
        obs = observed(nodes=8, faults=failing, views=views)
        actions = plan(obs, policy, breaker, now)
        breaker = advance(breaker, actions, obs.nodes, now, window)
        for a in actions:
            if isinstance(a, Quarantine):
                views[a.node] = dataclasses.replace(
                    views[a.node], unschedulable=True, record=Record(now, a.faults)
                )
        return actions

    for k in range(5):
        now = NOW + 70 * k
        failing[f"n{k}"] = {"xid": 79}
        actions = cycle()
        assert "TripBreaker" not in kinds(actions) and not breaker.tripped
        assert sorted(n for n, v in views.items() if v.record) == [
            f"n{i}" for i in range(min(k + 1, 2))
        ]
    waiting = [a for a in actions if isinstance(a, Skip)]
    assert [(a.node, a.reason) for a in waiting] == [(n, WAITS) for n in ("n2", "n3", "n4")]
    assert Warn("n2", f"not quarantined: {WAITS}") in actions

    # n0 is healthy again and released: its place goes to the next failing node, one only
    del failing["n0"]
    views["n0"] = NodeView("n0", "us-east/h100", 8)
    now += 70
    actions = cycle()
    assert [a.node for a in actions if isinstance(a, Quarantine)] == ["n2"]
    assert [a.node for a in actions if isinstance(a, Skip)] == ["n3", "n4"]


def test_a_storm_still_trips_the_breaker_before_the_nodes_out_limit_waits():
    policy = dataclasses.replace(
        POLICY, limits=Limits(fleet_max_percent=100, pool_max_nodes=2, pool_max_percent=100)
    )
    actions = plan(
        observed(nodes=8, faults={f"n{i}": {"xid": 79} for i in range(4)}), policy, Breaker(), NOW
    )
    assert kinds(actions) == ["Quarantine", "Quarantine", "TripBreaker", "Skip", "Skip"]


def test_the_fleet_limit_counts_every_pool_s_nodes_out():
    policy = dataclasses.replace(
        POLICY,
        limits=Limits(
            fleet_max_nodes=2, fleet_max_percent=100, pool_max_nodes=4, pool_max_percent=100
        ),
    )
    out = {
        "n0": NodeView(
            "n0", "eu-west/a100", 8, unschedulable=True, record=Record(NOW - 7200, XID79)
        ),
        "n2": NodeView(
            "n2", "us-east/h100", 8, unschedulable=True, record=Record(NOW - 7200, XID79)
        ),
    }
    actions = plan(observed(faults={"n1": {"xid": 79}}, views=out), policy, Breaker(), NOW)
    assert [a for a in actions if isinstance(a, Skip)] == [
        Skip(
            "n1",
            "the fleet has 2 of 2 nodes quarantined (health policy limits.fleet): "
            "waits for a release",
        )
    ]


def test_nodes_cordoned_by_someone_else_count_as_out_only_when_the_policy_says_so():
    cordoned = {f"n{i}": NodeView(f"n{i}", "us-east/h100", 8, unschedulable=True) for i in (0, 2)}
    obs = observed(faults={"n1": {"xid": 79}}, views=cordoned)
    limits = Limits(fleet_max_percent=100, pool_max_nodes=2, pool_max_percent=100)

    assert kinds(plan(obs, dataclasses.replace(POLICY, limits=limits), Breaker(), NOW)) == [
        "Quarantine"
    ]
    counting = dataclasses.replace(POLICY, limits=dataclasses.replace(limits, count_cordoned=True))
    actions = plan(obs, counting, Breaker(), NOW)
    assert kinds(actions) == ["Skip", "Warn"]
    assert actions[0].reason.startswith(
        "pool us-east/h100 has 2 of 2 nodes quarantined or cordoned"
    )


def test_a_tripped_breaker_skips_every_new_quarantine():
    actions = plan(
        observed(faults={"n1": {"xid": 79}}), POLICY, Breaker(tripped=True, reason="pool full"), NOW
    )
    assert kinds(actions) == ["Skip"] and "reset" in actions[0].reason


def test_quarantines_older_than_the_window_no_longer_count():
    policy = dataclasses.replace(POLICY, limits=Limits(pool_max_nodes=1, window_s=3600))
    old = Breaker(recent=((NOW - 3601, "n0", "us-east/h100"),))
    fresh = Breaker(recent=((NOW - 60, "n0", "us-east/h100"),))
    obs = observed(faults={"n1": {"xid": 79}})

    assert kinds(plan(obs, policy, old, NOW)) == ["Quarantine"]
    assert kinds(plan(obs, policy, fresh, NOW)) == ["TripBreaker", "Skip"]


def test_with_room_for_one_the_most_severe_fault_goes_first():
    policy = dataclasses.replace(POLICY, limits=Limits(pool_max_nodes=1))
    faults = {"n0": {"pcie_replay_rate": 50.0}, "n3": {"xid": 79}}

    actions = plan(observed(faults=faults), policy, Breaker(), NOW)

    assert [(type(a).__name__, getattr(a, "node", "")) for a in actions] == [
        ("Quarantine", "n3"),
        ("TripBreaker", ""),
        ("Skip", "n0"),
    ]


@pytest.mark.parametrize(
    ("max_nodes", "max_percent", "size", "allowed"),
    [
        (10, 10.0, 24, 2),  # 10% of 24 is 2.4: the lower limit wins
        (1, 50.0, 24, 1),
        (4, 25.0, 2, 1),  # a percentage never rounds a small pool down to zero
        (0, 50.0, 10, 0),  # but an explicit zero means none
        (10, 10.0, 0, 0),
    ],
)
def test_limit_is_the_lower_of_count_and_percentage(max_nodes, max_percent, size, allowed):
    assert limit(max_nodes, max_percent, size) == allowed


def test_dry_run_plans_the_same_actions():
    # dry-run is the executor's business: the plan is identical, nothing is applied
    obs = observed(faults={"n1": {"xid": 79}})
    dry = dataclasses.replace(POLICY, dry_run=True)
    assert plan(obs, dry, Breaker(), NOW) == plan(obs, POLICY, Breaker(), NOW)


def late_baseline(fault_gpus: dict, **kw: object) -> Observed:
    """The background read is late or missing (e.g. the first after a start); this cycle's
    own read of the fault events is 2 s old."""
    return dataclasses.replace(
        observed(**kw), newest_sample_age_s=None, fault_gpus=fault_gpus, faults_read_age_s=2.0
    )


def test_a_late_baseline_still_lets_a_fresh_xid_79_quarantine_and_says_so():
    obs = late_baseline({"n2": {"GPU-n2-3": GpuReading("GPU-n2-3", "3", xid=79)}})

    actions = plan(obs, POLICY, Breaker(), NOW)

    assert kinds(actions) == ["Hold", "Quarantine"]
    assert actions[0] == Hold("no DCGM samples for the whole fleet", fault_events_only=True)
    assert actions[1].node == "n2" and actions[1].faults == frozenset({"GPU-n2-3:xid-79"})
    assert actions[1].reason == "xid-79 on GPU 3 (GPU-n2-3)"


@pytest.mark.parametrize(
    ("reading", "quarantined"),
    [
        pytest.param({"xid": 79}, True, id="xid-79"),
        pytest.param({"xid": 48}, True, id="xid-48"),
        pytest.param({"ecc_dbe_increase": 1.0}, True, id="ecc-double-bit-increase"),
        # these need what only the background read has
        pytest.param({"xid": 13, "xid_repeats": 5}, False, id="repeats-are-windowed"),
        pytest.param({"xid": 63, "row_remap_pending": True}, False, id="remap-state"),
        pytest.param({"thermal_violation": 0.9}, False, id="windowed-rate"),
    ],
)
def test_with_a_late_baseline_only_fault_events_quarantine(reading, quarantined):
    obs = late_baseline({"n1": {"GPU-n1-3": GpuReading("GPU-n1-3", "3", **reading)}})
    assert kinds(plan(obs, POLICY, Breaker(), NOW)) == ["Hold"] + (
        ["Quarantine"] if quarantined else []
    )


def test_with_a_late_baseline_nothing_is_released_acknowledged_or_found_vanished():
    views = {
        # its hold-down is over: a fresh baseline would release it
        "n0": dataclasses.replace(quarantined(NOW - 600), name="n0"),
        "n1": quarantined(unschedulable=False),  # uncordoned by hand
    }
    obs = dataclasses.replace(late_baseline({}), nodes={**observed().nodes, **views})
    obs.gpus["n3"].pop("GPU-n3-5")  # a vanished GPU, as far as the late baseline knows

    assert plan(obs, POLICY, Breaker(), NOW) == [
        Hold("no DCGM samples for the whole fleet", fault_events_only=True)
    ]


def test_a_fault_during_the_hold_down_restarts_it_even_with_a_late_baseline():
    obs = late_baseline(
        {"n1": {"GPU-n1-3": GpuReading("GPU-n1-3", "3", xid=79)}},
        views={"n1": quarantined(NOW - 60)},
    )
    assert plan(obs, POLICY, Breaker(), NOW)[1:] == [ClearHealthy("n1")]


def test_a_late_baseline_with_a_stale_fault_read_holds_everything():
    obs = dataclasses.replace(
        late_baseline({"n1": {"GPU-n1-3": GpuReading("GPU-n1-3", "3", xid=79)}}),
        faults_read_age_s=31.0,
    )
    assert plan(obs, POLICY, Breaker(), NOW) == [Hold("no DCGM samples for the whole fleet")]


def test_with_a_late_baseline_the_breaker_still_limits_quarantines():
    policy = dataclasses.replace(
        POLICY,
        limits=Limits(
            fleet_max_nodes=2, fleet_max_percent=100, pool_max_nodes=100, pool_max_percent=100
        ),
    )
    failing = {f"n{i}": {f"GPU-n{i}-0": GpuReading(f"GPU-n{i}-0", "0", xid=79)} for i in range(4)}

    actions = plan(late_baseline(failing), policy, Breaker(), NOW)

    assert kinds(actions) == ["Hold", "Quarantine", "Quarantine", "TripBreaker", "Skip", "Skip"]


def test_a_failed_background_read_is_the_reason_once_its_answers_are_stale():
    obs = dataclasses.replace(
        late_baseline({}), newest_sample_age_s=45.0, baseline_error="query 'up' failed: timeout"
    )
    assert plan(obs, POLICY, Breaker(), NOW) == [
        Hold("the background read failed: query 'up' failed: timeout", fault_events_only=True)
    ]

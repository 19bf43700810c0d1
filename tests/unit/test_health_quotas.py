"""ClusterQueue GPU quota follows healthy capacity, within limits, and an operator wins."""

from __future__ import annotations

import pytest

from gridloop.health.capacity import FlavorCapacity
from gridloop.health.quotas import (
    CapQuota,
    HoldQuotas,
    QueueQuota,
    QuotaLimits,
    Removal,
    SetQuota,
    advance,
    plan_quotas,
    targets,
)

NOW = 1_000_000.0
H100 = "us-east-h100"
A100 = "us-east-a100"
ROOMY = QuotaLimits(max_removed_gpus=1000, max_removed_percent=100.0)


def cap(healthy: int, total: int = 64, flavor: str = H100) -> dict[str, FlavorCapacity]:
    return {flavor: FlavorCapacity(flavor, total, healthy, total // 8, healthy // 8)}


def teams(a: int = 32, b: int = 32, flavor: str = H100, **kw) -> list[QueueQuota]:
    """team-a and team-b at their configured quotas `a` and `b` (keywords apply to team-a)."""
    return [
        QueueQuota("team-a", flavor, kw.pop("nominal", a), a, **kw),
        QueueQuota("team-b", flavor, b, b),
    ]


def run(quotas, capacity, limits=ROOMY, recent=(), held=None, tripped=False, now=NOW):
    return plan_quotas(quotas, capacity, limits, list(recent), held, tripped, now)


def moves(actions) -> list[tuple[str, int, int]]:
    return [(a.queue, a.before, a.after) for a in actions if isinstance(a, SetQuota)]


# rule 1: unsure means no quota moves, neither down nor up


@pytest.mark.parametrize(
    ("held", "tripped", "reason"),
    [
        pytest.param("cannot read Prometheus: refused", False, "cannot read Prometheus: refused"),
        pytest.param("DCGM samples are stale", True, "DCGM samples are stale"),
        pytest.param(
            None, True, "circuit breaker tripped: quotas stay as they are until it is reset"
        ),
    ],
)
@pytest.mark.parametrize(
    "quotas",
    [
        pytest.param(teams(), id="a-fault-would-decrease"),
        pytest.param(teams(nominal=8), id="a-recovery-would-restore"),
        pytest.param(teams(manual=4), id="a-manual-quota-would-apply"),
    ],
)
def test_unsure_means_one_hold_and_nothing_else(quotas, held, tripped, reason):
    assert run(quotas, cap(healthy=32), held=held, tripped=tripped) == [HoldQuotas(reason)]


# rule 2: an operator's manual quota wins


@pytest.mark.parametrize(
    ("healthy", "manual"),
    [
        pytest.param(64, 24, id="below-configured-with-all-healthy"),
        pytest.param(16, 40, id="above-configured-with-a-fault"),
        pytest.param(64, 0, id="zero-past-a-spent-window"),
    ],
)
def test_a_manual_quota_is_the_target_whatever_the_capacity(healthy, manual):
    no_removals = QuotaLimits(max_removed_gpus=0)
    quotas = [QueueQuota("team-a", H100, 32, 32, manual=manual)]

    assert run(quotas, cap(healthy), limits=no_removals) == [
        SetQuota("team-a", H100, 32, manual, 32, f"manual quota {manual} (annotation)", manual=True)
    ]


def test_a_manual_quota_is_kept_through_a_fault_and_a_recovery():
    fault = run(teams(nominal=24, manual=24), cap(healthy=40))
    assert moves(fault) == [("team-b", 32, 16)]  # the 40 healthy less team-a's manual 24

    recovery = run(
        [QueueQuota("team-a", H100, 24, 32, 24), QueueQuota("team-b", H100, 16, 32)],
        cap(healthy=64),
    )
    assert moves(recovery) == [("team-b", 16, 32)]


def test_queues_without_a_manual_quota_share_what_the_manual_ones_leave():
    # team-a's manual 8 is served first; team-b gets the other 8 of the 16 healthy
    assert targets(teams(manual=8), cap(healthy=16)) == {
        ("team-a", H100): 8,
        ("team-b", H100): 8,
    }
    # with the pool healthy, team-b is back at its configured 32
    assert targets(teams(manual=8), cap(healthy=64))[("team-b", H100)] == 32
    # a manual quota above what is healthy leaves nothing to share, never less than 0
    assert targets(teams(manual=40), cap(healthy=16))[("team-b", H100)] == 0


# rule 3: the healthy GPUs are split in proportion to configured quotas


def test_two_teams_split_48_of_64_healthy_gpus_24_each():
    actions = run(teams(), cap(healthy=48))
    assert actions == [
        SetQuota("team-a", H100, 32, 24, 32, "us-east-h100: 48 of 64 GPUs healthy"),
        SetQuota("team-b", H100, 32, 24, 32, "us-east-h100: 48 of 64 GPUs healthy"),
    ]


def test_weights_3_to_1_split_with_remainders():
    quotas = [QueueQuota("big", H100, 48, 48), QueueQuota("small", H100, 16, 16)]
    # 7 healthy: 5.25 and 1.75, the larger remainder takes the odd GPU
    assert moves(run(quotas, cap(healthy=7))) == [("big", 48, 5), ("small", 16, 2)]


def test_the_tie_goes_to_the_queue_listed_first():
    quotas = teams(a=1, b=1)
    assert targets(quotas, cap(healthy=1)) == {("team-a", H100): 1, ("team-b", H100): 0}
    assert targets(quotas[::-1], cap(healthy=1)) == {("team-b", H100): 1, ("team-a", H100): 0}


def test_healthy_capacity_above_the_configured_quota_never_raises_it():
    assert targets(teams(a=8, b=8), cap(healthy=64)) == {("team-a", H100): 8, ("team-b", H100): 8}


# rule 4: no capacity seen, nothing to base a quota on


@pytest.mark.parametrize(
    "capacity",
    [
        pytest.param(cap(healthy=0, total=0), id="total-zero"),
        pytest.param({}, id="no-entry"),
        pytest.param(cap(healthy=0, flavor=A100), id="only-another-flavor"),
    ],
)
def test_a_flavor_with_no_nodes_seen_is_left_alone(capacity):
    assert run(teams(nominal=8), capacity) == []
    assert targets(teams(), capacity) == {}


# rule 5: decreases are limited per window, restores are not


def test_a_decrease_past_the_limit_is_cut_short_and_says_why():
    actions = run(
        teams(), cap(healthy=32), limits=QuotaLimits(max_removed_gpus=20, max_removed_percent=100)
    )

    assert actions == [
        SetQuota("team-a", H100, 32, 16, 32, "us-east-h100: 32 of 64 GPUs healthy"),
        SetQuota("team-b", H100, 32, 28, 32, "us-east-h100: 32 of 64 GPUs healthy"),
        CapQuota(
            "team-b",
            H100,
            wanted=16,
            allowed=28,
            reason="removal limit: 20 of 20 GPUs of quota removed in the last 3600s; "
            "16 wanted, 4 allowed",
        ),
    ]


def test_the_percentage_limit_applies_to_the_sum_of_all_configured_quotas():
    # 25% of 64 configured is 16, lower than 64 GPUs
    actions = run(teams(), cap(healthy=0), limits=QuotaLimits())
    assert moves(actions) == [("team-a", 32, 16)]
    assert [(a.queue, a.wanted, a.allowed) for a in actions if isinstance(a, CapQuota)] == [
        ("team-a", 0, 16),
        ("team-b", 0, 32),
    ]


def test_decreases_are_taken_in_order_of_flavor_then_queue_name():
    quotas = [
        QueueQuota("zeta", H100, 8, 8),
        QueueQuota("alpha", H100, 8, 8),
        QueueQuota("omega", A100, 8, 8),
    ]
    capacity = {**cap(healthy=0, total=16), **cap(healthy=0, total=8, flavor=A100)}

    actions = run(
        quotas, capacity, limits=QuotaLimits(max_removed_gpus=12, max_removed_percent=100)
    )

    assert [(type(a).__name__, a.queue, a.flavor) for a in actions] == [
        ("SetQuota", "omega", A100),
        ("SetQuota", "alpha", H100),
        ("CapQuota", "alpha", H100),
        ("CapQuota", "zeta", H100),
    ]


def test_the_window_caps_decreases_across_cycles_until_old_removals_age_out():
    limits = QuotaLimits(max_removed_gpus=16, max_removed_percent=100, window_s=3600)
    quotas, capacity = teams(a=32, b=0), cap(healthy=0, total=32)

    first = run(quotas, capacity, limits=limits)
    assert moves(first) == [("team-a", 32, 16)]
    recent = advance((), first, NOW, limits.window_s)
    assert recent == (Removal(NOW, "team-a", H100, 16),)

    later = teams(a=32, b=0, nominal=16)
    second = run(later, capacity, limits=limits, recent=recent, now=NOW + 60)
    assert moves(second) == []
    assert [type(a).__name__ for a in second] == ["CapQuota"]
    recent = advance(recent, second, NOW + 60, limits.window_s)

    third = run(later, capacity, limits=limits, recent=recent, now=NOW + 3600)
    assert moves(third) == [("team-a", 16, 0)]


def test_a_restore_is_applied_in_full_even_with_the_window_spent():
    spent = [Removal(NOW - 60, "team-a", H100, 16)]
    actions = run(
        teams(nominal=8), cap(healthy=64), limits=QuotaLimits(max_removed_gpus=16), recent=spent
    )
    assert actions == [
        SetQuota("team-a", H100, 8, 32, 32, "us-east-h100 restored: 64 of 64 GPUs healthy")
    ]


def test_a_partial_restore_is_not_called_restored():
    actions = run([QueueQuota("team-a", H100, 8, 32)], cap(healthy=24))
    assert actions == [SetQuota("team-a", H100, 8, 24, 32, "us-east-h100: 24 of 64 GPUs healthy")]


def test_a_manual_decrease_is_neither_capped_nor_counted():
    spent = [Removal(NOW - 60, "team-b", H100, 16)]
    actions = run(
        teams(manual=0), cap(healthy=64), limits=QuotaLimits(max_removed_gpus=16), recent=spent
    )
    assert moves(actions) == [("team-a", 32, 0)]
    assert advance(spent, actions, NOW, 3600) == tuple(spent)


# rule 6: at the target, nothing


def test_a_healthy_fleet_at_its_configured_quotas_plans_nothing():
    assert run(teams(), cap(healthy=64)) == []


def test_quotas_already_cut_to_the_healthy_share_plan_nothing():
    at_share = [QueueQuota("team-a", H100, 24, 32), QueueQuota("team-b", H100, 24, 32)]
    assert run(at_share, cap(healthy=48), limits=QuotaLimits(max_removed_gpus=0)) == []


# advance: the sliding window of removals


def test_advance_keeps_the_window_and_adds_only_applied_decreases():
    recent = (Removal(NOW - 3601, "old", H100, 8), Removal(NOW - 60, "fresh", H100, 4))
    applied = [
        SetQuota("down", H100, 32, 24, 32, "r"),
        SetQuota("up", H100, 8, 32, 32, "r"),
        CapQuota("down", H100, 16, 24, "r"),
        HoldQuotas("r"),
    ]
    assert advance(recent, applied, NOW, 3600) == (
        Removal(NOW - 60, "fresh", H100, 4),
        Removal(NOW, "down", H100, 8),
    )

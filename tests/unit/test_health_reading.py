"""Prometheus answers become one Observed: series mapped to nodes and GPUs by label."""

from __future__ import annotations

import re
import socket
import time

import pytest

from gridloop.health.actions import ClearHealthy, Hold, MarkHealthy, Warn
from gridloop.health.observed import (
    HOST_MISMATCH,
    NO_NODE,
    OTHER_SCRAPE,
    Breaker,
    Ignored,
    NodeView,
    Observed,
    Record,
)
from gridloop.health.plan import plan
from gridloop.health.policy import Policy, Signals
from gridloop.health.reading import baseline, connect, read, with_faults
from gridloop.health.signals import BACKGROUND_FAMILIES, READ_METRICS, SLOW_FAMILIES, queries

NODES = {n: NodeView(n, "lab/l4", 2) for n in ("a", "b")}


def observed(results: dict, nodes: dict[str, NodeView]):
    """Every family's answers at once, as if all were in the background read."""
    return with_faults(baseline(results), {}, nodes)


NOW = 1700000000.0  # Prometheus's evaluation time in these answers


def series(value: float, **labels: str) -> dict:
    return {"metric": labels, "value": [NOW, str(value)]}


def test_series_map_to_nodes_by_the_scrapes_node_label_and_to_gpus_by_uuid():
    results = {
        "present": [  # the value is when the GPU was last scraped
            series(NOW - 4.5, node="a", Hostname="a", UUID="GPU-a0", gpu="0"),
            series(NOW - 9.0, node="b", hostname="b", UUID="GPU-b1", gpu="1"),
        ],
        "xid": [
            series(79, node="a", Hostname="a", UUID="GPU-a0", gpu="0"),
            series(0, node="b", hostname="b", UUID="GPU-b1", gpu="1"),
        ],
        "ecc_dbe": [series(2, node="b", hostname="b", UUID="GPU-b1")],
        "up": [series(1, node="a"), series(1, node="b")],
    }

    obs = observed(results, NODES)

    assert obs.gpus["a"]["GPU-a0"].xid == 79 and obs.gpus["a"]["GPU-a0"].index == "0"
    assert obs.gpus["b"]["GPU-b1"].ecc_dbe_increase == 2.0
    assert obs.exporter_up == {"a": True, "b": True}
    assert obs.newest_sample_age_s == 4.5
    assert obs.ignored == () and obs.unmatched == ()


def test_a_cycle_lays_its_fault_samples_over_the_background_baseline_without_changing_it():
    base = baseline(
        {
            "present": [
                series(NOW - 2.0, node="a", UUID="GPU-a0", gpu="0"),
                series(NOW - 3.0, node="b", UUID="GPU-b0", gpu="0"),
            ],
            "row_remap_failure": [series(1, node="b", UUID="GPU-b0")],
            "up": [series(1, node="a"), series(0, node="b")],
        }
    )

    obs = with_faults(base, {"xid": [series(79, node="a", UUID="GPU-a0")]}, NODES, NOW + 10)
    again = with_faults(base, {}, NODES, NOW + 10)

    assert obs.gpus["a"]["GPU-a0"].xid == 79
    assert obs.gpus["b"]["GPU-b0"].row_remap_failure  # from the background read
    assert obs.exporter_up == {"a": True, "b": False}
    assert obs.newest_sample_age_s == 12.0  # the baseline's age counts: it is 10 s old
    assert again.gpus["a"]["GPU-a0"].xid == 0  # the next cycle does not see this one's fault


def test_a_cycle_asks_only_for_fault_events_and_the_rest_in_the_background():
    q = queries(Policy(), "dcgm-exporter")

    # and when Prometheus last scraped any exporter: one value, to know the read is fresh
    assert set(q) - BACKGROUND_FAMILIES == {"events", "ecc_dbe", "fresh"}
    assert q["fresh"] == 'max(timestamp(up{job="dcgm-exporter"}))'
    assert {"presence", "row_remap_failure"} <= BACKGROUND_FAMILIES


def test_presence_and_up_are_one_query_so_one_view_of_prometheus_answers_both():
    q = queries(Policy(), "dcgm-exporter")

    assert q["presence"] == (
        'label_replace(up{job="dcgm-exporter"}, "gridloop_family", "up", "", "") or '
        "label_replace(max by (UUID, gpu, node, Hostname, hostname) "
        '(timestamp(DCGM_FI_DEV_GPU_TEMP{job="dcgm-exporter"})), "gridloop_family", "present", '
        '"", "")'
    )
    answer = [
        series(1, node="a", gridloop_family="up"),
        series(NOW - 2, node="a", UUID="GPU-a0", gpu="0", gridloop_family="present"),
    ]

    obs = with_faults(baseline({"presence": answer}), {}, NODES, NOW)

    assert obs.exporter_up == {"a": True}
    assert list(obs.gpus["a"]) == ["GPU-a0"] and obs.newest_sample_age_s == 2.0


def test_the_xid_events_and_the_failed_scrapes_are_one_query_so_one_view_answers_both():
    q = queries(Policy(), "dcgm-exporter")

    assert q["events"] == (
        'label_replace(DCGM_FI_DEV_XID_ERRORS{job="dcgm-exporter"} != 0, "gridloop_family", '
        '"xid", "", "") or '
        'label_replace(up{job="dcgm-exporter"} == 0, "gridloop_family", "down", "", "")'
    )


def quarantined(name: str, healthy_since: float | None = None) -> NodeView:
    record = Record(NOW - 60, frozenset({"GPU-a0:xid-79"}), healthy_since)
    return NodeView(name, "lab/l4", 2, unschedulable=True, record=record)


def test_a_failed_scrape_is_an_exporter_down_not_a_healthy_node_whatever_the_baseline():
    # the background read, from before: both exporters up, both GPUs of each node there
    base = baseline(
        {
            "present": [
                series(NOW - 2.0, node=n, UUID=f"GPU-{n}{i}", gpu=str(i))
                for n in ("a", "b")
                for i in (0, 1)
            ],
            "up": [series(1, node="a"), series(1, node="b")],
        }
    )
    nodes = {"a": quarantined("a"), "b": quarantined("b")}
    # this cycle's read: a's last scrape failed (its XID series went stale), b's GPU is clean
    events = [series(0, node="a", job="dcgm-exporter", gridloop_family="down")]
    fresh = [{"metric": {}, "value": [NOW, str(NOW - 1.0)]}]

    obs = with_faults(base, {"events": events, "fresh": fresh}, nodes, NOW)
    actions = plan(obs, Policy(), Breaker(), NOW)

    assert obs.exporter_up == {"a": False, "b": True}
    assert Warn("a", "DCGM exporter is down: GPU health unknown, not acting") in actions
    assert [a for a in actions if isinstance(a, MarkHealthy)] == [MarkHealthy("b", NOW)]


def test_a_fault_in_the_same_answer_as_a_failed_scrape_elsewhere_still_counts():
    base = baseline(
        {
            "present": [series(NOW - 2.0, node="a", UUID="GPU-a0", gpu="0")],
            "up": [series(1, node="a"), series(1, node="b")],
        }
    )
    nodes = {"a": quarantined("a", healthy_since=NOW - 3), "b": NODES["b"]}
    events = [
        series(79, node="a", UUID="GPU-a0", gpu="0", gridloop_family="xid"),
        series(0, node="b", gridloop_family="down"),
    ]

    obs = with_faults(base, {"events": events}, nodes, NOW)

    assert obs.gpus["a"]["GPU-a0"].xid == 79 and obs.exporter_up == {"a": True, "b": False}
    assert ClearHealthy("a") in plan(obs, Policy(), Breaker(), NOW)


def test_the_fault_read_alone_names_its_gpus_and_how_fresh_it_is_whatever_the_baseline():
    late = baseline({})  # the background read has not answered yet
    results = {
        "xid": [series(79, node="a", UUID="GPU-a0", gpu="0")],
        "ecc_dbe": [series(1, node="b", UUID="GPU-b1", gpu="1")],
        "fresh": [{"metric": {}, "value": [NOW, str(NOW - 3.0)]}],
    }

    obs = with_faults(late, results, NODES, now=NOW + 1)

    assert obs.gpus == {}  # nothing from the baseline
    assert obs.newest_sample_age_s is None
    assert obs.fault_gpus["a"]["GPU-a0"].xid == 79 and obs.fault_gpus["a"]["GPU-a0"].index == "0"
    assert obs.fault_gpus["b"]["GPU-b1"].ecc_dbe_increase == 1.0
    assert obs.faults_read_age_s == 4.0  # the newest scrape, counted to now


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param([], id="no-exporter-scraped"),
        pytest.param([{"metric": {}, "value": [NOW, "NaN"]}], id="nan"),
        pytest.param([{"metric": {}}], id="no-value"),
    ],
)
def test_a_fault_read_without_a_scrape_time_is_of_unknown_age(answer):
    obs = with_faults(baseline({}), {"fresh": answer}, NODES, now=NOW)
    assert obs.faults_read_age_s is None


def test_series_of_unknown_nodes_and_without_labels_are_ignored():
    results = {
        "present": [
            series(40, node="zzz", UUID="GPU-z"),
            series(40, UUID="GPU-nohost"),
            series(40, node="a"),
        ],
        "xid": [series(79, node="a", UUID="GPU-never-present")],
    }
    obs = observed(results, NODES)
    assert obs.gpus == {}
    assert obs.newest_sample_age_s is None
    assert obs.unmatched == ("zzz",)


def test_a_down_exporter_reads_as_down_and_a_missing_one_as_absent():
    obs = observed({"up": [series(0, node="a")]}, NODES)
    assert obs.exporter_up == {"a": False}


def test_one_query_per_family_for_the_whole_fleet_and_none_for_switched_off_signals():
    q = queries(Policy(), "dcgm-exporter")
    assert all("Hostname=" not in v and "node=" not in v for v in q.values())
    off = queries(Policy(signals=Signals(nvlink_errors=None, pcie_replays=None)), "dcgm")
    assert not any(f.startswith(("nvlink", "pcie")) for f in off)


def test_fault_families_come_back_filtered_to_nonzero_and_presence_to_identifying_labels():
    q = queries(Policy(), "dcgm-exporter")
    # "fresh" is one value for the whole fleet; "others" one count per foreign scrape job
    whole_fleet = {"presence", "fresh", "others"}
    for family, promql in q.items():
        if family not in whole_fleet:
            # a combined answer's families: each side, filtered (`up == 0`: only the down)
            for side in re.findall(r"label_replace\((.*?), \"gridloop_family\"", promql) or [
                promql
            ]:
                assert side.endswith(("> 0", "!= 0", "== 0")), family
    assert (
        "max by (UUID, gpu, node, Hostname, hostname) "
        '(timestamp(DCGM_FI_DEV_GPU_TEMP{job="dcgm-exporter"}))' in (q["presence"])
    )


def test_every_series_asked_for_is_the_exporter_jobs_own():
    """A DCGM-named series from another scrape (a tenant's pod) is never read; only
    counted, by the one query that asks for what is not the exporter's."""
    q = queries(Policy(), "dcgm-exporter")
    promql = " ".join(v for family, v in q.items() if family != "others")
    selectors = re.findall(r'(?<!")\b(DCGM_FI_\w+|up)\b(?!")(\{[^}]*\})?', promql)
    assert selectors and all(sel == '{job="dcgm-exporter"}' for _, sel in selectors), selectors
    assert q["others"] == (
        'count by (job, namespace) ({__name__=~"' + "|".join(READ_METRICS) + '", '
        'job!="dcgm-exporter"})'
    )


def test_on_a_cluster_the_exporters_namespace_is_asked_for_too():
    q = queries(Policy(), "dcgm-exporter", "gpu-system")
    promql = " ".join(v for family, v in q.items() if family != "others")
    selectors = re.findall(r'(?<!")\b(DCGM_FI_\w+|up)\b(?!")(\{[^}]*\})?', promql)
    assert {sel for _, sel in selectors} == {'{job="dcgm-exporter", namespace="gpu-system"}'}
    # what is not the exporter's: another job, or its job in another namespace
    assert q["others"].endswith(
        ' or count by (job, namespace) ({__name__=~"' + "|".join(READ_METRICS) + '", '
        'job="dcgm-exporter", namespace!="gpu-system"})'
    )


def test_other_scrapes_series_are_counted_by_job_and_namespace_and_read_as_no_nodes():
    results = {
        "present": [series(NOW - 1, node="a", UUID="GPU-a0", gpu="0")],
        "up": [series(1, node="a")],
        "others": [
            series(3, job="vllm", namespace="team-default"),
            series(1, job="forger"),
        ],
    }

    obs = observed(results, NODES)

    assert obs.ignored == (
        Ignored(OTHER_SCRAPE, "job forger", 1),
        Ignored(OTHER_SCRAPE, "job vllm, namespace team-default", 3),
    )
    assert str(obs.ignored[1]) == "3 from job vllm, namespace team-default (other-scrape)"
    assert set(obs.gpus) == {"a"}


def test_nvlink_counters_are_asked_one_by_one_and_their_rates_add_up_per_gpu():
    gpu = {"node": "a", "UUID": "GPU-a0"}
    results = {
        "present": [series(NOW - 1, **gpu)],
        "nvlink_replay": [series(0.5, **gpu)],
        "nvlink_crc_flit": [series(1.5, **gpu)],
    }

    obs = observed(results, NODES)

    assert obs.gpus["a"]["GPU-a0"].nvlink_error_rate == 2.0


def test_only_families_over_windows_of_minutes_are_asked_once_per_scrape_interval():
    q = queries(Policy(), "dcgm-exporter")
    assert set(q) >= {"xid_repeats", "thermal", "nvlink_replay", "pcie"}  # power: off by default
    for family, promql in q.items():
        minutes_window = re.search(r"\[(\d+)s[]:]", promql)  # a range, or a subquery's
        over_minutes = minutes_window is not None and int(minutes_window.group(1)) >= 120
        assert (family in SLOW_FAMILIES) == over_minutes, family


def test_an_unreachable_prometheus_is_one_line_naming_the_family():
    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    prom = connect(f"http://127.0.0.1:{port}")

    answer = read(prom, {"up": "up"})

    assert isinstance(answer, str) and answer.startswith("query 'up' failed: ")
    assert "\n" not in answer and len(answer) < 260


def test_an_outage_reads_the_same_every_cycle_so_it_is_logged_once():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    prom = connect(f"http://127.0.0.1:{port}")

    first = read(prom, {"up": "up"})
    time.sleep(0.01)  # another evaluation time
    second = read(prom, {"up": "up"})

    assert first == second
    assert "?query=" not in str(first)


# --- which node a series is about: dcgm-exporter's label shapes on a real cluster ---

GPU_NODES = {n: NodeView(n, "us-east/h100", 2) for n in ("gpu-node-1", "gpu-node-2")}


def _two_gpus(**host: str) -> list[dict]:
    """The presence answer of one exporter: two GPUs, its host labels on each."""
    return [
        series(NOW - 1.0, UUID=f"GPU-{next(iter(host.values()))}-{i}", gpu=str(i), **host)
        for i in range(2)
    ]


@pytest.mark.parametrize(
    ("shape", "labels"),
    [
        # the scrape's `node` (the chart's ServiceMonitor relabels it from the pod's node);
        # dcgm-exporter without NODE_NAME says its pod's name in Hostname
        (
            "node, and Hostname a pod name",
            {"node": "gpu-node-1", "Hostname": "dcgm-exporter-7xk2p"},
        ),
        ("Hostname the node (NODE_NAME set)", {"node": "gpu-node-1", "Hostname": "gpu-node-1"}),
        (
            "hostname (dcgm-exporter 4.8.3 on; its NVLink series before)",
            {"node": "gpu-node-1", "hostname": "gpu-node-1"},
        ),
        (
            "both spellings",
            {"node": "gpu-node-1", "Hostname": "gpu-node-1", "hostname": "gpu-node-1"},
        ),
    ],
)
def test_each_label_shape_of_a_real_exporter_is_attributed_to_its_node(
    shape: str, labels: dict[str, str]
) -> None:
    results = {
        "present": _two_gpus(**labels),
        "xid": [series(79, UUID=f"GPU-{next(iter(labels.values()))}-1", **labels)],
        "up": [series(1, node="gpu-node-1")],
    }

    obs = observed(results, GPU_NODES)

    assert set(obs.gpus) == {"gpu-node-1"}, shape
    assert [g.xid for g in obs.gpus["gpu-node-1"].values()] == [0, 79], shape
    assert obs.unmatched == () and obs.ignored == ()


def test_series_without_the_scrapes_node_label_are_no_nodes_and_hold() -> None:
    """A host label alone is what the series says, not where it was scraped: a scrape
    without the chart's relabelling leaves every GPU of the exporter unplaced."""
    results = {
        "present": _two_gpus(Hostname="gpu-node-1")
        + _two_gpus(node="gpu-node-2", Hostname="gpu-node-2"),
        "xid": [series(79, Hostname="gpu-node-1", UUID="GPU-gpu-node-1-1")],
        "up": [series(1, node="gpu-node-1"), series(1, node="gpu-node-2")],
    }

    obs = observed(results, GPU_NODES)
    actions = plan(obs, Policy(), Breaker(), NOW)

    assert obs.ignored == (Ignored(NO_NODE, "Hostname=gpu-node-1 without a node label", 2),)
    assert set(obs.gpus) == {"gpu-node-2"} and obs.fault_gpus == {}
    assert actions == [
        Hold(
            "the exporter's GPU series are no node's (Hostname=gpu-node-1 without a node label) "
            "while 1 GPU nodes with a running exporter report no GPU: relabel `node` from the "
            "exporter pod's node in the scrape (the chart's ServiceMonitor does); an "
            "exporter's NODE_NAME must be its pod's spec.nodeName"
        )
    ]


def test_a_series_whose_host_label_names_another_node_than_its_scrape_is_ignored() -> None:
    """An exporter on gpu-node-2 saying its GPUs are gpu-node-1's: neither node gets them
    (a fault it reports is nobody's), and with gpu-node-2's own GPUs missing, nothing is
    decided from their absence."""
    liar = {"node": "gpu-node-2", "Hostname": "gpu-node-1"}
    results = {
        "present": _two_gpus(node="gpu-node-1", Hostname="gpu-node-1") + _two_gpus(**liar),
        "xid": [series(79, UUID="GPU-gpu-node-2-1", **liar)],
        "up": [series(1, node="gpu-node-1"), series(1, node="gpu-node-2")],
    }

    obs = observed(results, GPU_NODES)

    assert obs.ignored == (Ignored(HOST_MISMATCH, "Hostname=gpu-node-1 on node gpu-node-2", 2),)
    assert set(obs.gpus) == {"gpu-node-1"}
    assert [g.xid for g in obs.gpus["gpu-node-1"].values()] == [0, 0]
    (hold,) = plan(obs, Policy(), Breaker(), NOW)
    assert isinstance(hold, Hold) and "Hostname=gpu-node-1 on node gpu-node-2" in hold.reason


def test_unmatched_node_labels_hold_while_nodes_report_no_gpu() -> None:
    results = {
        "present": _two_gpus(node="gpu-node-9") + _two_gpus(node="gpu-node-2"),
        "up": [series(1, node="gpu-node-1"), series(1, node="gpu-node-2")],
    }

    obs = observed(results, GPU_NODES)

    assert obs.unmatched == ("gpu-node-9",)
    assert plan(obs, Policy(), Breaker(), NOW) == [
        Hold(
            "GPU series name nodes that are no node (gpu-node-9) while 1 GPU nodes with a "
            "running exporter report no GPU: relabel `node` from the exporter pod's node in "
            "the scrape"
        )
    ]


def test_keyed_by_the_exporters_own_host_label_alone_healthy_nodes_would_be_quarantined() -> None:
    """What reading did before: a GPU's node was its Hostname, which is the pod's name on a
    real cluster when dcgm-exporter runs without NODE_NAME. With one exporter so and one
    with NODE_NAME, the first node's GPUs all looked vanished while its exporter was up."""
    results = {
        "present": _two_gpus(node="gpu-node-1", Hostname="dcgm-exporter-7xk2p")
        + _two_gpus(node="gpu-node-2", Hostname="gpu-node-2"),
        "up": [series(1, node="gpu-node-1"), series(1, node="gpu-node-2")],
    }
    new = observed(results, GPU_NODES)
    # the same answers as the Hostname-keyed reading read them: "dcgm-exporter-7xk2p" is no
    # node, so its series were dropped and gpu-node-1 reported no GPU
    old = Observed(
        nodes=GPU_NODES,
        gpus={"gpu-node-2": new.gpus["gpu-node-2"]},
        exporter_up=new.exporter_up,
        newest_sample_age_s=new.newest_sample_age_s,
    )

    before = plan(old, Policy(), Breaker(), NOW)
    after = plan(new, Policy(), Breaker(), NOW)

    assert [(type(a).__name__, getattr(a, "node", "")) for a in before] == [
        ("Quarantine", "gpu-node-1")
    ]
    assert after == [] and set(new.gpus) == set(GPU_NODES)

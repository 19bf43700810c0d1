"""What `gridloop status` says about the fleet and its queues: the pure views and the
projections from raw API objects they are built on."""

from __future__ import annotations

import json

from gridloop.status import collecting, printing, views
from gridloop.status.snapshot import Breaker, Event, FlavorQuota, Node, Queue, Snapshot

NOW = 1_800_000_000.0


def node(name: str, **kw) -> Node:
    base = dict(site="us-east", pool="h100", region="us-east-1", product="H100", gpus=8)
    return Node(name=name, **{**base, **kw})


def test_a_quarantine_outranks_every_other_verdict():
    n = node(
        "a",
        quarantined_by="gridloop-health",
        reason="xid-79 on GPU 3",
        ready=False,
        unschedulable=True,
        exporter_up=False,
    )
    assert views.verdict(n) == ("quarantined", "xid-79 on GPU 3")


def test_verdicts_in_order_of_trouble():
    assert views.verdict(node("a", ready=False))[0] == "not-ready"
    assert views.verdict(node("a", exporter_up=False, reporting=None))[0] == "exporter-down"
    assert views.verdict(node("a", exporter_up=True, reporting=6)) == (
        "gpus-missing",
        "2 of 8 GPUs report no metrics",
    )
    assert views.verdict(node("a", unschedulable=True))[0] == "cordoned"
    assert views.verdict(node("a", opted_out=True))[0] == "opted-out"
    assert views.verdict(node("a", exporter_up=True, reporting=8)) == ("healthy", "")


def test_healthy_gpus_are_the_reporting_ones_not_named_faulty():
    assert node("a", reporting=8, faulty=("GPU-1",)).healthy == 7
    assert node("a", reporting=7).healthy == 7
    assert node("a").healthy is None  # Prometheus not read: unknown, not zero


def test_fleet_rows_show_who_cordoned_and_why():
    snap = Snapshot(
        taken_at=NOW,
        nodes=(
            node("a", exporter_up=True, reporting=8),
            node(
                "b",
                unschedulable=True,
                quarantined_by="gridloop-health",
                reason="ecc-dbe",
                exporter_up=True,
                reporting=8,
                faulty=("GPU-9",),
            ),
            node("c", unschedulable=True, exporter_up=True, reporting=8),
        ),
    )
    rows = {r.key: r for r in views.fleet(snap).rows}
    assert rows["a"].cells[6:9] == ("8", "healthy", "-") and not rows["a"].alert
    assert rows["b"].cells[6:] == ("7", "quarantined", "gridloop-health", "ecc-dbe")
    assert rows["c"].cells[7:9] == ("cordoned", "other") and rows["c"].alert


def test_filter_needs_every_word_and_excludes_bang_words():
    snap = Snapshot(
        taken_at=NOW,
        nodes=(
            node("us-east-1"),
            node("us-east-2", site="eu-west"),
            node("onprem-1", site="onprem"),
        ),
    )
    rows = views.fleet(snap).rows
    assert [r.key for r in views.filtered(rows, "US-east")] == ["us-east-1", "us-east-2"]
    assert [r.key for r in views.filtered(rows, "us-east eu-west")] == ["us-east-2"]
    assert [r.key for r in views.filtered(rows, "h100 !eu-west")] == ["us-east-1", "onprem-1"]
    assert views.filtered(rows, "  ") == rows


def test_numbers_sort_as_numbers():
    snap = Snapshot(taken_at=NOW, nodes=(node("a", gpus=16), node("b", gpus=8), node("c", gpus=4)))
    rows = views.fleet(snap).rows
    gpus = [c.title for c in views.columns("fleet")].index("GPUS")
    assert [r.key for r in views.sorted_rows(rows, gpus)] == ["c", "b", "a"]
    assert [r.key for r in views.sorted_rows(rows, gpus, reverse=True)] == ["a", "b", "c"]


def test_a_queue_row_shows_what_health_lowered_and_starving_queues_alert():
    q = Queue(
        name="team-a",
        cohort="gridloop",
        flavors=(
            FlavorQuota("us-east-h100", nominal=56, usage=48, configured=64),
            FlavorQuota("onprem-a100", nominal=64, usage=0, borrowed=0),
        ),
        pending=2,
        admitted=6,
    )
    starving = Queue(name="team-b", cohort="", flavors=(FlavorQuota("x", 0, 0),), pending=1)
    rows = {r.key: r for r in views.queues(Snapshot(taken_at=NOW, queues=(q, starving))).rows}
    assert rows["team-a"].cells[2:7] == ("120", "48", "0", "2", "6")
    assert rows["team-a"].cells[8] == "us-east-h100 64→56"
    assert not rows["team-a"].alert and rows["team-b"].alert


def test_events_newest_first_with_their_age():
    events = (
        Event("2027-01-15T08:00:00Z", "Warning", "GPUQuarantined", "Node/a", "xid-79"),
        Event("2027-01-15T08:05:00Z", "Normal", "GPUReleased", "Node/a", "healthy again"),
    )
    now = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    rows = views.events(Snapshot(taken_at=now + 400, events=events)).rows
    assert [(r.cells[0], r.cells[2]) for r in rows] == [
        ("100s", "GPUReleased"),
        ("6m", "GPUQuarantined"),
    ]


def test_summary_and_stale_line():
    snap = Snapshot(
        taken_at=NOW,
        nodes=(
            node("a", exporter_up=True, reporting=8, allocated=8),
            node("b", quarantined_by="gridloop-health", exporter_up=True, reporting=8),
        ),
        breaker=Breaker(tripped=True, reason="pool limit", found=True),
        problems=(("prometheus", "connection refused"),),
    )
    assert views.summary(snap) == (
        "2 GPU nodes, 16 GPUs (8 allocated, 16 healthy); 1 quarantined, 1 need attention; "
        "breaker TRIPPED; 0 ClusterQueues, 0 workloads pending"
    )
    assert views.stale(snap) == "prometheus: connection refused"


def test_node_detail_lists_the_quarantine_record_and_its_events():
    n = node(
        "a",
        quarantined_by="gridloop-health",
        reason="xid-79",
        faulty=("GPU-1",),
        quarantined_at="2027-01-15T08:00:00Z",
        taints=("gridloop.io/gpu-unhealthy=true:NoSchedule",),
    )
    ev = Event("2027-01-15T08:00:00Z", "Warning", "GPUQuarantined", "Node/a", "xid-79 on GPU 1")
    lines = dict(views.detail(Snapshot(taken_at=NOW + 60, nodes=(n,), events=(ev,)), "fleet", "a"))
    assert lines["faulty GPUs"] == "GPU-1"
    assert lines["taint"] == "gridloop.io/gpu-unhealthy=true:NoSchedule"
    assert lines["event"] == "60s GPUQuarantined: xid-79 on GPU 1"
    assert views.detail(Snapshot(taken_at=NOW), "fleet", "gone") == [("node", "gone: gone")]


def test_json_output_carries_verdicts_and_every_field():
    snap = Snapshot(taken_at=NOW, nodes=(node("a", labels=(("k", "v"),)),))
    data = json.loads(printing.as_json(snap, ["fleet", "queues"]))
    assert data["nodes"][0]["verdict"] == "healthy" and data["nodes"][0]["labels"] == {"k": "v"}
    assert data["nodes"][0]["healthy"] is None and data["queues"] == []
    assert data["nodes"][0]["exporterUp"] is None  # camelCase, as kubectl's JSON
    assert set(data) >= {"summary", "breaker", "problems", "absent", "context"}


def test_the_series_the_health_service_ignores_get_a_line_of_their_own():
    ignored = ("3 from job vllm, namespace team-default (other-scrape)",)
    last_cycle = json.dumps({"at": NOW, "held": None, "ignored": list(ignored)})
    snap = Snapshot(taken_at=NOW, nodes=(node("a"),), breaker=Breaker(found=True, ignored=ignored))

    lines = printing.as_table(snap, ["fleet"]).splitlines()

    assert collecting.last_ignored(last_cycle) == ignored
    assert lines[1] == (
        "IGNORED: DCGM series the health service reads as no node's: 3 from job vllm, "
        "namespace team-default (other-scrape)"
    )
    assert views.ignored(Snapshot(taken_at=NOW, breaker=Breaker(found=True))) == ""
    # a summary from before the service counted them, or one it cannot read: none
    assert collecting.last_ignored(json.dumps({"at": NOW})) == ()
    assert collecting.last_ignored("{not json") == ()


def test_table_output_is_aligned_and_says_why_a_view_is_empty():
    snap = Snapshot(taken_at=NOW, nodes=(node("a"), node("bbbbbbbb")), absent=("sandboxes",))
    text = printing.as_table(snap, ["fleet", "sandboxes"])
    lines = text.splitlines()
    header = lines[3]
    assert header.startswith("NODE       SITE")
    assert lines[4].startswith("a          us-east")
    assert "(agent-sandbox is not installed (no SandboxTemplate CRD))" in text


# --- projections: raw API objects to rows --------------------------------------------


def test_node_projection_reads_gridlooops_record_only_when_it_quarantined():
    raw = {
        "metadata": {
            "name": "n1",
            "labels": {"gridloop.io/site": "us-east", "nvidia.com/gpu.product": "H100"},
            "annotations": {
                "health.gridloop.io/quarantined-by": "gridloop-health",
                "health.gridloop.io/quarantined-at": "2027-01-15T08:00:00Z",
                "health.gridloop.io/reason": "xid-79 on GPU 3",
                "health.gridloop.io/gpus": "GPU-a,GPU-b",
            },
        },
        "spec": {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    n = collecting.node_row(raw)
    assert (n.site, n.product, n.gpus, n.ready, n.unschedulable) == (
        "us-east",
        "H100",
        8,
        True,
        True,
    )
    assert (n.quarantined_by, n.reason, n.faulty) == (
        "gridloop-health",
        "xid-79 on GPU 3",
        ("GPU-a", "GPU-b"),
    )
    assert n.taints == ("k:NoSchedule",)
    del raw["metadata"]["annotations"]["health.gridloop.io/quarantined-at"]  # released
    assert collecting.node_row(raw).quarantined_by == ""


def test_pods_count_their_gpus_only_once_bound():
    pod = {
        "spec": {
            "nodeName": "n1",
            "containers": [
                {"resources": {"limits": {"nvidia.com/gpu": "4"}}},
                {"resources": {"requests": {"nvidia.com/gpu": 2}}},
                {"resources": {}},
            ],
        }
    }
    assert collecting.pod_gpus(pod) == ("n1", 6)
    assert collecting.pod_gpus({"spec": {"containers": pod["spec"]["containers"]}}) is None
    assert collecting.pod_gpus({"spec": {"nodeName": "n1", "containers": [{}]}}) is None


def test_queue_projection_reads_quota_usage_and_gridloops_record():
    cq = {
        "metadata": {
            "name": "team-a",
            "annotations": {
                "quota.gridloop.io/configured": json.dumps({"f1": {"configured": 64, "set": 56}}),
                "quota.gridloop.io/manual": "f2=8",
            },
        },
        "spec": {
            "cohortName": "gridloop",
            "resourceGroups": [
                {
                    "flavors": [
                        {
                            "name": "f1",
                            "resources": [
                                {"name": "cpu", "nominalQuota": "100"},
                                {"name": "nvidia.com/gpu", "nominalQuota": 56},
                            ],
                        },
                        {
                            "name": "f2",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "8"}],
                        },
                    ]
                }
            ],
        },
        "status": {
            "pendingWorkloads": 3,
            "admittedWorkloads": 5,
            "conditions": [{"type": "Active", "status": "True"}],
            "flavorsUsage": [
                {
                    "name": "f1",
                    "resources": [{"name": "nvidia.com/gpu", "total": "40", "borrowed": "8"}],
                }
            ],
        },
    }
    q = collecting.queue_row(cq, ("team-a/default",))
    assert q.flavors == (
        FlavorQuota("f1", nominal=56, usage=40, borrowed=8, configured=64),
        FlavorQuota("f2", nominal=8, usage=0, borrowed=0, configured=None),
    )
    assert (q.cohort, q.pending, q.admitted, q.active, q.manual) == ("gridloop", 3, 5, True, "f2=8")


def test_a_model_is_a_deployment_whose_pods_carry_the_model_label():
    dep = {
        "metadata": {"name": "gridloop-model-llama", "namespace": "inference"},
        "spec": {
            "replicas": 2,
            "template": {
                "metadata": {
                    "labels": {"gridloop.io/model": "llama"},
                    "annotations": {"gridloop.io/model-revision": "r7"},
                },
                "spec": {
                    "containers": [
                        {
                            "args": ["s3://m/llama", "--load-format", "runai_streamer"],
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ]
                },
            },
        },
        "status": {"readyReplicas": 1},
    }
    m = collecting.model_row(dep)
    assert m is not None
    assert (m.name, m.ready, m.replicas, m.load_format, m.revision, m.gpus) == (
        "llama",
        1,
        2,
        "runai_streamer",
        "r7",
        2,
    )
    assert m.endpoint == "http://gridloop-model-llama.inference.svc:8000/v1"
    dep["spec"]["template"]["metadata"]["labels"] = {}
    assert collecting.model_row(dep) is None


def test_every_row_key_is_unique_even_with_many_events_about_one_node():
    events = tuple(
        Event(f"2027-01-15T08:0{i}:00Z", "Warning", "GPUQuarantined", "Node/a", "xid-79")
        for i in range(3)
    )
    rows = views.events(Snapshot(taken_at=NOW, events=events)).rows
    assert len({r.key for r in rows}) == 3


def test_once_output_keeps_the_rows_the_filter_keeps():
    snap = Snapshot(taken_at=NOW, nodes=(node("us-east-1"), node("onprem-1", site="onprem")))
    text = printing.as_table(snap, ["fleet"], "onprem")
    assert "onprem-1" in text and "us-east-1" not in text
    assert [
        n["name"] for n in json.loads(printing.as_json(snap, ["fleet"], "onprem"))["nodes"]
    ] == ["onprem-1"]
    assert "(no rows match 'gone')" in printing.as_table(snap, ["fleet"], "gone")


def test_a_queue_row_names_its_last_rebalance():
    q = Queue(name="team-a", cohort="", flavors=(FlavorQuota("f", 8, 0, configured=16),))
    events = (
        Event("2027-01-15T08:00:00Z", "Normal", "GPUQuotaLowered", "ClusterQueue/team-a", "f: 8"),
        Event("2027-01-15T07:00:00Z", "Normal", "GPUQuotaRestored", "ClusterQueue/team-a", "f: 16"),
        Event("2027-01-15T08:01:00Z", "Warning", "GPUQuarantined", "Node/n", "xid-79"),
    )
    [row] = views.queues(Snapshot(taken_at=NOW + 90, queues=(q,), events=events)).rows
    assert row.cells[-1] == "90s ago: f: 8"


def test_the_inference_view_says_which_revision_serves_and_why_the_new_one_is_stuck():
    from status_sample import SAMPLE

    rows = {r.key: r for r in views.inference(SAMPLE).rows}
    rolling, stuck = rows["inference/llama-3-8b"], rows["inference/tiny"]
    assert rolling.cells[-3:] == ("r7", "r7,r6", "rolling to r7")
    assert stuck.cells[-3:-1] == ("r3", "r2")
    assert stuck.cells[-1].startswith("r3 stuck: no weights at s3://models/tiny/r3/")
    assert stuck.alert, "a stuck revision needs attention even with every replica ready"


def _workload(name: str, conditions: list[dict], admission: dict | None = None) -> dict:
    status: dict = {"conditions": conditions}
    if admission:
        status["admission"] = admission
    return {
        "metadata": {
            "name": f"rayjob-{name}-1a2b3",
            "namespace": "team-default",
            "creationTimestamp": "2026-12-03T08:00:00Z",
            "ownerReferences": [{"kind": "RayJob", "name": name}],
        },
        "spec": {"queueName": "default"},
        "status": status,
    }


def test_a_workload_is_shown_as_its_job_pending_admitted_or_finished_in_kueues_words():
    waiting = collecting.queued_job(
        _workload(
            "second",
            [
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "message": "couldn't assign flavors to pod set submitter: insufficient "
                    "unused quota for cpu in flavor system, 400m more needed",
                }
            ],
        )
    )
    assert (waiting.kind, waiting.name, waiting.state) == ("RayJob", "second", "pending")
    assert "insufficient unused quota for cpu" in waiting.why
    assignments = {
        "podSetAssignments": [
            {"name": "head", "flavors": {"cpu": "system", "memory": "system"}},
            {"name": "cpu", "flavors": {"cpu": "system"}},
        ]
    }
    reserved = {"type": "QuotaReserved", "status": "True", "message": "Quota reserved"}
    admitted = {"type": "Admitted", "status": "True", "message": "admitted"}
    running = collecting.queued_job(_workload("first", [reserved, admitted], assignments))
    assert (running.state, running.flavors, running.why) == ("admitted", ("system",), "")
    done = {"type": "Finished", "status": "True", "message": "Job finished successfully"}
    finished = collecting.queued_job(_workload("first", [reserved, admitted, done], assignments))
    assert (finished.state, finished.why) == ("finished", "Job finished successfully")


def test_the_queues_view_lists_each_queues_jobs_under_it():
    job = collecting.queued_job(
        _workload(
            "train-tiny",
            [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}],
            {"podSetAssignments": [{"name": "head", "flavors": {"cpu": "system"}}]},
        )
    )
    queue = Queue("default", "gridloop", (FlavorQuota("system", 0, 0),), jobs=(job,))
    snap = Snapshot(taken_at=1796284860.0, queues=(queue,))  # 2026-12-03T08:01:00Z
    text = printing.as_table(snap, ["queues"])
    jobs = text.split("JOBS\n", 1)[1].splitlines()
    assert jobs[0].split() == ["JOB", "NAMESPACE", "CLUSTERQUEUE", "STATE", "FLAVORS", "AGE", "WHY"]
    assert jobs[1].split() == [
        "RayJob/train-tiny", "team-default", "default", "admitted", "system", "60s", "-"
    ]  # fmt: skip
    detail = dict(views.queue_detail(snap, "default"))
    assert detail["RayJob team-default/train-tiny"] == "admitted in system, 60s old"

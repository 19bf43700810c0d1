"""Each label shape a real dcgm-exporter emits, from the simulator, read by the health service.

The exposition texts are the simulator's own (`render_node` with `--label-shape`). What is
simulated here is Prometheus: a scrape adds the target's labels, taken from the local
cluster's own scrape config (`prometheus_config.prometheus_config`: `job`, `instance` and `node`,
which models the chart's ServiceMonitor relabeling the pod's node into `node`), and the
health service's own instant queries (`signals.queries`: presence, `up`, `up == 0`,
`METRIC != 0`)
are evaluated over the scraped series by a few lines below. The families over windows
answer nothing here, which is what Prometheus answers for a fleet whose only fault is a
standing XID, except the XID repeat count: its meaning depends on how PromQL treats
series, so the real promtool evaluates it over the simulator's series instead.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_sim_exposition import fleet_nodes, parse

from gridloop import dcgm
from gridloop.errors import BuildError, UsageError
from gridloop.fleet import PlannedNode
from gridloop.health.actions import Hold, Quarantine
from gridloop.health.observed import Breaker, NodeView, Observed
from gridloop.health.plan import plan
from gridloop.health.policy import (
    DEFAULT_XID_COUNT,
    DEFAULT_XID_QUARANTINE,
    XID_ROW_REMAP_EVENT,
    Policy,
)
from gridloop.health.reading import Sample, baseline, with_faults
from gridloop.health.signals import BACKGROUND_FAMILIES, EVENTS_AND_DOWN, queries
from gridloop.local import ports, prometheus_config
from gridloop.local.build.building import binary
from gridloop.sim import commands
from gridloop.sim import metrics as m
from gridloop.sim import server as sim_server
from gridloop.sim.exposition import render_node
from gridloop.sim.faults import FaultSet
from gridloop.sim.injections import Injection
from gridloop.sim.label_shapes import (
    UNKNOWN_XID,
    XID_MESSAGES,
    LabelShape,
    parse_shape,
    pod_name,
)

# the real promtool, built by `gridloop local build`
needs_promtool = pytest.mark.needs_binaries("promtool")

LEGACY, NODENAME, LOWERCASE, PODNAME = (
    LabelShape.LEGACY,
    LabelShape.NODENAME,
    LabelShape.LOWERCASE,
    LabelShape.PODNAME,
)
STARTED = 1_700_000_000.0
NOW = STARTED + 3600
NODES = fleet_nodes([("h100", "H100-80GB", 2, 2)])
FIRST, SECOND = NODES
GPUS = {n.name: n.gpus for n in NODES}
VIEWS = {n.name: NodeView(n.name, "us-east/h100", n.gpus) for n in NODES}
POLICY = Policy()
QUERIES = queries(POLICY, prometheus_config.EXPORTER_JOB)
HEALTHY = FaultSet()
PODS = [pod_name(n.name) for n in NODES]
Labels = dict[str, str]


def xid(node: PlannedNode, gpu: int, code: int, now: float = STARTED) -> FaultSet:
    return FaultSet().inject(GPUS, Injection(node=node.name, gpu=gpu, xid=code), now)


def sample_lines(text: str, metric: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(metric + "{")]


def label_pairs(line: str) -> list[tuple[str, str]]:
    return re.findall(r'([A-Za-z_]\w*)="((?:[^"\\]|\\.)*)"', line.split("} ", 1)[0])


# --- what each shape's exposition text says ---


@pytest.mark.parametrize(
    ("shape", "host", "xid_labels"),
    [
        (LEGACY, ("Hostname", FIRST.name), []),
        (
            NODENAME,
            ("Hostname", FIRST.name),
            [("err_code", "79"), ("err_msg", "GPU has fallen off the bus")],
        ),
        (
            LOWERCASE,
            ("hostname", FIRST.name),
            [("err_code", "79"), ("err_msg", "GPU has fallen off the bus")],
        ),
        (
            PODNAME,
            ("Hostname", pod_name(FIRST.name)),
            [("err_code", "79"), ("err_msg", "GPU has fallen off the bus")],
        ),
    ],
)
def test_each_shape_labels_its_series_in_dcgm_exporter_order(
    shape: LabelShape, host: tuple[str, str], xid_labels: list[tuple[str, str]]
) -> None:
    text = render_node(FIRST, xid(FIRST, 1, 79), NOW, STARTED, shape)
    gpu_1 = [
        ("gpu", "1"),
        ("UUID", m.gpu_uuid(FIRST.name, 1)),
        ("pci_bus_id", m.pci_bus_id(1)),
        ("device", "nvidia1"),
        ("modelName", "NVIDIA H100 80GB HBM3"),
        host,
        ("DCGM_FI_DRIVER_VERSION", m.DRIVER_VERSION),
    ]

    assert label_pairs(sample_lines(text, dcgm.XID_ERRORS)[1]) == gpu_1 + xid_labels
    assert sample_lines(text, dcgm.XID_ERRORS)[1].endswith(" 79")
    for name in set(dcgm.METRICS) - {dcgm.XID_ERRORS}:  # the error labels are the XID series' only
        assert label_pairs(sample_lines(text, name)[1]) == gpu_1, name
    assert parse(text)  # still the text format, each series once
    assert "node=" not in text  # the scrape attaches `node`; an exporter never writes it


def test_a_healthy_gpu_of_dcgm_exporter_4_reads_xid_0_no_error() -> None:
    text = render_node(FIRST, HEALTHY, NOW, STARTED, NODENAME)

    assert sample_lines(text, dcgm.XID_ERRORS)[0].endswith(',err_code="0",err_msg="No Error"} 0')


def test_the_default_shape_is_the_simulators_old_one() -> None:
    assert render_node(FIRST, HEALTHY, NOW, STARTED) == render_node(
        FIRST, HEALTHY, NOW, STARTED, LEGACY
    )
    assert parse_shape(None) is LEGACY


def test_a_pod_named_exporter_is_named_as_a_daemonset_names_its_pods() -> None:
    many = fleet_nodes([("h100", "H100-80GB", 50, 1)])
    names = [pod_name(n.name) for n in many]

    assert all(re.fullmatch(r"dcgm-exporter-[bcdfghjklmnpqrstvwxz2456789]{5}", p) for p in names)
    assert len(set(names)) == len(names)
    assert pod_name(FIRST.name) == pod_name(FIRST.name)  # the same pod on every scrape


def test_every_xid_the_health_policy_names_has_dcgm_exporters_message() -> None:
    named = {*DEFAULT_XID_QUARANTINE, *DEFAULT_XID_COUNT, XID_ROW_REMAP_EVENT}

    assert named <= set(XID_MESSAGES)
    assert XID_MESSAGES[94] == "Contained ECC error"
    text = render_node(FIRST, xid(FIRST, 0, 999), NOW, STARTED, NODENAME)
    assert f'err_code="999",err_msg="{UNKNOWN_XID}"}} 999' in sample_lines(text, dcgm.XID_ERRORS)[0]


# --- the option ---


def test_a_bad_shape_is_one_line_naming_the_option(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser(prog="gridloop")
    commands.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(
        ["sim", "serve", "--port", "1", "--label-shape", "Hostname", "--state-dir", str(tmp_path)]
    )

    with pytest.raises(UsageError) as caught:
        args.func(args)

    assert str(caught.value) == (
        "--label-shape Hostname: must be one of legacy, nodename, lowercase, podname"
    )


def test_the_server_refuses_a_bad_shape_in_one_line_before_reading_the_fleet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--fleet", str(tmp_path / "none.yaml"), "--faults", str(tmp_path / "f.json")]

    code = sim_server.main([*argv, "--port", "1", "--label-shape", "pod"])

    assert code != 0
    assert capsys.readouterr().err == (
        "error: --label-shape pod: must be one of legacy, nodename, lowercase, podname\n"
    )


# --- what Prometheus makes of it (simulated) and what the health service reads ---


def target_labels(node: PlannedNode, with_node: bool = True) -> Labels:
    """The labels the local Prometheus attaches to this node's exporter target; without
    `node` when `with_node` is false, as a scrape without the node relabeling."""
    config: Any = prometheus_config.prometheus_config(
        ports.Ports.from_base(ports.DEFAULT_BASE_PORT), [n.name for n in NODES]
    )
    job = next(
        j for j in config["scrape_configs"] if j["job_name"] == prometheus_config.EXPORTER_JOB
    )
    target = next(t for t in job["static_configs"] if t["labels"]["node"] == node.name)
    labels = {k: v for k, v in target["labels"].items() if not k.startswith("__")}
    if not with_node:
        del labels["node"]
    return {"job": prometheus_config.EXPORTER_JOB, **labels}


def scrape(text: str, target: Labels) -> list[tuple[Labels, float]]:
    """The series one scrape stores: the exposition's, with the target's labels (an
    exposed label the target also has is kept as `exported_<name>`, as Prometheus does
    without honor_labels), and `up`."""
    stored = [({"__name__": "up", **target}, 1.0)]
    for (name, pairs), value in parse(text)[1].items():
        exposed = {(f"exported_{k}" if k in target else k): v for k, v in pairs}
        stored.append(({"__name__": name, **exposed, **target}, value))
    return stored


def answer(promql: str, stored: list[tuple[Labels, float]]) -> list[Sample]:
    """What Prometheus answers at NOW for the health service's instant queries."""
    if " or " in promql:  # presence-and-up, events-and-down: each side, tagged (label_replace)
        out = []
        for side in promql.split(" or "):
            tagged = re.fullmatch(r'label_replace\((.*), "(\w+)", "(\w+)", "", ""\)', side)
            assert tagged, side
            for sample in answer(tagged.group(1), stored):
                out.append(
                    {**sample, "metric": {**sample["metric"], tagged.group(2): tagged.group(3)}}
                )
        return out
    if up := re.fullmatch(r'up\{job="([^"]+)"\}', promql):
        return [
            {"metric": labels, "value": [NOW, str(value)]}
            for labels, value in stored
            if labels["__name__"] == "up" and labels.get("job") == up.group(1)
        ]
    if down := re.fullmatch(r'(up\{job="[^"]+"\}) == 0', promql):
        return [s for s in answer(down.group(1), stored) if float(s["value"][1]) == 0]
    job = r'\{job="([^"]+)"\}'  # every series the service asks for is its exporter job's
    if present := re.fullmatch(rf"max by \(([^)]*)\) \(timestamp\((\w+){job}\)\)", promql):
        keys = present.group(1).split(", ")
        groups = {
            frozenset((k, labels[k]) for k in keys if k in labels)
            for labels, _ in stored
            if labels["__name__"] == present.group(2) and labels.get("job") == present.group(3)
        }
        return [{"metric": dict(g), "value": [NOW, str(NOW)]} for g in sorted(groups, key=sorted)]
    if nonzero := re.fullmatch(rf"(\w+){job} != 0", promql):
        return [
            {"metric": labels, "value": [NOW, str(value)]}
            for labels, value in stored
            if labels["__name__"] == nonzero.group(1)
            and labels.get("job") == nonzero.group(2)
            and value != 0
        ]
    return []  # the families over windows: see the module docstring


def read(scrapes: list[tuple[PlannedNode, LabelShape, Labels]], faults: FaultSet) -> Observed:
    """The health service's reading of one scrape of each (node, shape, target labels)."""
    stored = [
        series
        for node, shape, target in scrapes
        for series in scrape(render_node(node, faults, NOW, STARTED, shape), target)
    ]
    answers = {family: answer(promql, stored) for family, promql in QUERIES.items()}
    background = {f: a for f, a in answers.items() if f in BACKGROUND_FAMILIES}
    cycle = {f: a for f, a in answers.items() if f not in BACKGROUND_FAMILIES}
    return with_faults(baseline(background), cycle, VIEWS, NOW)


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param(PODNAME, id="pod-named-Hostname"),
        pytest.param(NODENAME, id="Hostname-the-node"),
        pytest.param(LEGACY, id="legacy-Hostname-the-node"),
        pytest.param(LOWERCASE, id="hostname-the-node"),
    ],
)
def test_each_real_shape_scraped_with_its_node_is_attributed_to_it_and_its_xid_read_once(
    shape: LabelShape,
) -> None:
    scrapes = [(n, shape, target_labels(n)) for n in NODES]

    obs = read(scrapes, xid(SECOND, 1, 79))
    actions = plan(obs, POLICY, Breaker(), NOW)

    assert obs.unmatched == ()
    assert {node: set(gpus) for node, gpus in obs.gpus.items()} == {
        n.name: {m.gpu_uuid(n.name, i) for i in range(n.gpus)} for n in NODES
    }
    assert {g.index: g.xid for g in obs.gpus[SECOND.name].values()} == {"0": 0, "1": 79}
    assert {g.index: g.xid for g in obs.gpus[FIRST.name].values()} == {"0": 0, "1": 0}
    assert [(type(a), getattr(a, "node", "")) for a in actions] == [(Quarantine, SECOND.name)]


def test_the_xid_answer_is_dcgm_exporter_4s_labelled_series_and_the_code_reads_as_is() -> None:
    exporter = {"job": prometheus_config.EXPORTER_JOB}
    stored = scrape(render_node(SECOND, xid(SECOND, 1, 13), NOW, STARTED, PODNAME), exporter)

    (only,) = answer(QUERIES[EVENTS_AND_DOWN], stored)  # no exporter down: only the XID

    assert (only["metric"]["err_code"], only["metric"]["err_msg"]) == (
        "13",
        "Graphics Engine Exception",
    )
    assert only["value"][1] == "13.0"


@pytest.mark.parametrize(
    ("targets", "reason"),
    [
        pytest.param(
            "local",
            "the exporter's GPU series are no node's ("
            + ", ".join(f"Hostname={pod} without a node label" for pod in sorted(PODS))
            + ") while 2 GPU nodes with a running exporter report no GPU: relabel `node` from "
            "the exporter pod's node in the scrape (the chart's ServiceMonitor does); an "
            "exporter's NODE_NAME must be its pod's spec.nodeName",
            id="local-scrape-without-node",
        ),
        # a kubernetes-SD scrape without the relabeling: `up` names the pod's address only
        pytest.param("pods", "no DCGM samples for the whole fleet", id="pod-scrape-without-node"),
    ],
)
def test_pod_named_series_without_the_scrapes_node_hold_and_quarantine_nothing(
    targets: str, reason: str
) -> None:
    def target(n: PlannedNode) -> Labels:
        if targets == "local":
            return target_labels(n, with_node=False)
        address = f"10.0.0.{NODES.index(n) + 10}:9400"
        return {"job": prometheus_config.EXPORTER_JOB, "instance": address, "pod": pod_name(n.name)}

    obs = read([(n, PODNAME, target(n)) for n in NODES], xid(SECOND, 1, 79))

    assert obs.gpus == {}
    assert plan(obs, POLICY, Breaker(), NOW) == [Hold(reason)]


def test_keyed_by_the_exporters_own_host_label_alone_healthy_nodes_would_be_quarantined() -> None:
    """The simulator-fed twin of the hand-written test in test_health_reading.py: the first
    node's exporter runs without NODE_NAME (its pod's name in Hostname), the second's with
    it (a DaemonSet mid-rollout), both scraped with `node`. Read by the exporter's host
    label alone, as the health service did before, the first node's GPUs all look
    vanished while its exporter is up."""
    scrapes = [(FIRST, PODNAME, target_labels(FIRST)), (SECOND, NODENAME, target_labels(SECOND))]
    new = read(scrapes, HEALTHY)
    by_host_label = {
        labels.get("Hostname") or labels.get("hostname")
        for node, shape, target in scrapes
        for labels, _ in scrape(render_node(node, HEALTHY, NOW, STARTED, shape), target)
    }
    old = Observed(
        nodes=VIEWS,
        gpus={n: gpus for n, gpus in new.gpus.items() if n in by_host_label},
        exporter_up=new.exporter_up,
        newest_sample_age_s=new.newest_sample_age_s,
    )

    before = plan(old, POLICY, Breaker(), NOW)
    after = plan(new, POLICY, Breaker(), NOW)

    assert pod_name(FIRST.name) in by_host_label and FIRST.name not in by_host_label
    assert [(type(a), getattr(a, "node", "")) for a in before] == [(Quarantine, FIRST.name)]
    assert after == [] and set(new.gpus) == set(VIEWS)


# --- the XID repeat count over dcgm-exporter 4.x's per-code series (real promtool) ---

SCRAPE_S = int(POLICY.scrape_interval_s)
# the XID a GPU last reported, scrape by scrape: 0, then 13, 31 and 13 again: three changes
CODES = [0] * 3 + [13] * 3 + [31] * 3 + [13] * 5


def xid_series(shape: LabelShape) -> dict[str, str]:
    """promtool's input series: GPU 1's XID series as the simulator serves them scrape after
    scrape, scraped with the local target labels. A series that leaves the exposition
    gets a staleness marker on the next scrape, as Prometheus writes one."""
    values: dict[str, list[str]] = {}
    faults = HEALTHY
    for i, code in enumerate(CODES):
        now = STARTED + i * SCRAPE_S
        if code:
            faults = xid(SECOND, 1, code, now)
        text = render_node(SECOND, faults, now, STARTED, shape)
        for labels, value in scrape(text, target_labels(SECOND)):
            if labels["__name__"] == dcgm.XID_ERRORS and labels["gpu"] == "1":
                values.setdefault(_selector(labels), ["_"] * i).append(f"{value:g}")
        for series in values.values():
            if len(series) == i:
                series.append("stale" if series and series[-1] not in ("_", "stale") else "_")
    return {s: " ".join(v) for s, v in values.items()}


def _selector(labels: Labels) -> str:
    pairs = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return labels["__name__"] + "{" + pairs + "}"


def promtool_expects(
    tmp_path: Path, series: dict[str, str], expr: str, samples: list[dict[str, Any]]
) -> None:
    try:
        promtool = binary("promtool")
    except BuildError as err:
        pytest.fail(f"{err}: this test runs the real promtool", pytrace=False)
    (tmp_path / "empty.yml").write_text("groups: []\n")
    spec = {
        "rule_files": ["empty.yml"],
        "evaluation_interval": f"{SCRAPE_S}s",
        "tests": [
            {
                "interval": f"{SCRAPE_S}s",
                "input_series": [{"series": s, "values": v} for s, v in series.items()],
                "promql_expr_test": [
                    {
                        "expr": expr,
                        "eval_time": f"{(len(CODES) - 1) * SCRAPE_S}s",
                        "exp_samples": samples,
                    }
                ],
            }
        ],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(spec, sort_keys=False))
    done = subprocess.run(
        [str(promtool), "test", "rules", "test.yml"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("shape", list(LabelShape), ids=lambda s: s.value)
@needs_promtool
def test_xid_changes_count_once_per_gpu_whether_or_not_each_code_is_its_own_series(
    shape: LabelShape, tmp_path: Path
) -> None:
    series = xid_series(shape)
    gpu = {k: v for k, v in label_pairs(next(iter(series))) if k not in ("err_code", "err_msg")}

    assert len(series) == (3 if shape.xid_labels else 1)  # codes 0, 13 and 31
    promtool_expects(
        tmp_path,
        series,
        QUERIES["xid_repeats"],
        [{"labels": "{" + ",".join(f'{k}="{v}"' for k, v in gpu.items()) + "}", "value": 3}],
    )


@needs_promtool
def test_counting_changes_of_each_labelled_series_would_never_see_a_repeat(
    tmp_path: Path,
) -> None:
    """What the repeat query did before: `changes()` of each series. Over dcgm-exporter
    4.x's series every code is a series of its own that never changes, so application
    XIDs never counted as repeated."""
    before = f"changes({dcgm.XID_ERRORS}[{int(POLICY.xid_repeat_window_s)}s]) > 0"

    promtool_expects(tmp_path, xid_series(NODENAME), before, [])

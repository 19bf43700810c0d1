"""What feeds the dashboards on the local cluster: the simulated workload metrics (vLLM,
agent-sandbox, kube-state-metrics) in valid exposition with upstream names and types,
and the local Prometheus' scrape config for them; and `preview`'s refusals of a bad URL."""

from __future__ import annotations

import re

import pytest

from gridloop.dashboards.fetching import check_url, query_range
from gridloop.errors import UsageError
from gridloop.local import prometheus_config
from gridloop.local.ports import LOOPBACK, Ports
from gridloop.sim.workloads import (
    MODELS,
    render_agent_sandbox,
    render_kube_state,
    render_vllm,
    vllm_pods,
)

BASE = 41000
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (-?[0-9.e+]+|\+Inf|NaN)$")


def types(text: str) -> dict[str, str]:
    return {
        line.split()[2]: line.split()[3] for line in text.splitlines() if line.startswith("# TYPE")
    }


@pytest.mark.parametrize(
    "text",
    [
        render_vllm(vllm_pods()[0][1], 1000.0, 0.0) or "",
        render_agent_sandbox(1000.0, 0.0),
        render_kube_state(1000.0, 0.0),
    ],
    ids=["vllm", "agent-sandbox", "kube-state-metrics"],
)
def test_every_simulated_sample_is_valid_exposition(text: str) -> None:
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert samples and all(SAMPLE.match(line) for line in samples)


def test_vllm_replicas_expose_vllms_v1_names_and_types() -> None:
    text = render_vllm(vllm_pods()[0][1], 1000.0, 0.0) or ""
    assert types(text) == {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:prompt_tokens_total": "counter",
        "vllm:generation_tokens_total": "counter",
        "vllm:request_success_total": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:inter_token_latency_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
    }
    assert f'model_name="{MODELS[0].name}",engine="0"' in text


def test_histogram_buckets_are_cumulative_and_counters_grow() -> None:
    pod = vllm_pods()[0][1]
    early, late = render_vllm(pod, 1000.0, 0.0) or "", render_vllm(pod, 2000.0, 0.0) or ""

    def values(text: str, name: str) -> list[float]:
        return [float(x.rsplit(" ", 1)[1]) for x in text.splitlines() if x.startswith(name)]

    buckets = values(early, "vllm:time_to_first_token_seconds_bucket")
    assert buckets == sorted(buckets) and buckets[-1] > 0
    assert values(late, "vllm:generation_tokens_total") > values(
        early, "vllm:generation_tokens_total"
    )


def test_an_unknown_pod_is_not_simulated() -> None:
    assert render_vllm("nope", 1000.0, 0.0) is None


def test_local_prometheus_scrapes_the_workloads_health_and_loads_rules() -> None:
    ports = Ports.from_base(BASE)

    config = prometheus_config.prometheus_config(
        ports, ["a-0"], places={"a-0": ("us-east", "h100")}, workloads=True
    )

    jobs = {j["job_name"]: j for j in config["scrape_configs"]}  # type: ignore[attr-defined]
    assert set(jobs) == {
        "dcgm-exporter",
        "gridloop-health",
        "vllm",
        "agent-sandbox",
        "kube-state-metrics",
    }
    assert jobs["gridloop-health"]["static_configs"] == [
        {"targets": [f"{LOOPBACK}:{ports.health}"]}
    ]
    dcgm = jobs["dcgm-exporter"]["static_configs"][0]["labels"]
    assert (dcgm["site"], dcgm["pool"]) == ("us-east", "h100")
    pods = [g["labels"]["pod"] for g in jobs["vllm"]["static_configs"]]
    assert pods == [pod for _ns, pod in vllm_pods()]
    assert jobs["kube-state-metrics"]["honor_labels"] is True
    assert config["rule_files"] == ["rules/*.yml"]


@pytest.mark.parametrize("url", ["127.0.0.1:9090", "ftp://x", "http://"])
def test_a_url_that_is_not_http_is_one_line_naming_the_flag(url: str) -> None:
    with pytest.raises(UsageError, match=f"--prometheus-url {re.escape(url)}: not an http"):
        check_url(url)


def test_an_unreachable_prometheus_is_one_line_naming_the_flag() -> None:
    refusal = re.escape("--prometheus-url http://127.0.0.1:1: cannot reach")
    with pytest.raises(UsageError, match=refusal):
        query_range("http://127.0.0.1:1", "up", 0, 60, 15, "panel")

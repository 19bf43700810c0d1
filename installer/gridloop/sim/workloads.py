"""Simulated workload metrics: vLLM replicas, the agent-sandbox controller, and what
kube-state-metrics says about their pods.

vLLM cannot run here (no GPUs) and agent-sandbox's controller release cannot be fetched,
yet the Inference and Sandboxes dashboards must be proven against a real Prometheus. This
module renders their metrics with the upstream names, types, labels and histogram buckets
(vLLM's ``vllm/v1/metrics/loggers.py``; agent-sandbox's ``internal/metrics``;
kube-state-metrics' pod and deployment families), so a panel that reads them reads the
real thing unchanged. The figures are made up: a steady request rate per replica with
log-normal latencies, a warm pool that stays full.

Each vLLM replica is its own scrape target (``/workloads/vllm/<pod>/metrics``), labelled
with ``namespace`` and ``pod`` by the scrape config, as a PodMonitor would.

Pure: the clock is an argument; this module must never do I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

INFERENCE_NAMESPACE = "inference"
SANDBOX_NAMESPACE = "agents"
SANDBOX_TEMPLATE = "python-gvisor"
WARM_POOL = "python-gvisor-warm"


@dataclass(frozen=True)
class Model:
    """One served model: its Deployment (and served model name), replicas, load."""

    name: str
    replicas: int
    rps: float  # requests per second per replica
    ttft_s: float  # median time to first token
    itl_s: float  # median inter-token latency
    tokens_out: int  # generated tokens per request
    tokens_in: int  # prompt tokens per request
    cold_start_s: float  # pod start to Ready (image pull excluded: streamer load)


MODELS: tuple[Model, ...] = (
    Model("llama-3-1-8b", 2, 4.0, 0.12, 0.018, 220, 900, 74.0),
    Model("qwen2-5-32b", 1, 1.5, 0.35, 0.041, 310, 1400, 162.0),
)

# vLLM's own buckets (v1 loggers.py)
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
E2E_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
# agent-sandbox's claim startup buckets, in milliseconds
CLAIM_BUCKETS_MS = (50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000, 240000)

_SPREAD = 0.5  # log-normal sigma of every simulated latency


def pod_name(model: Model, replica: int) -> str:
    return f"{model.name}-7f9c6d5b8-{replica:05d}"


def vllm_pods() -> list[tuple[str, str]]:
    """(namespace, pod) of every simulated vLLM replica, for the scrape config."""
    return [(INFERENCE_NAMESPACE, pod_name(m, i)) for m in MODELS for i in range(m.replicas)]


def _model_of(pod: str) -> tuple[Model, int] | None:
    for m in MODELS:
        for i in range(m.replicas):
            if pod_name(m, i) == pod:
                return m, i
    return None


def _cdf(x: float, median: float) -> float:
    """P(latency <= x) for a log-normal latency with this median."""
    return 0.5 * (1 + math.erf(math.log(x / median) / (_SPREAD * math.sqrt(2))))


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in pairs) + "}"


def _histogram(
    name: str, help_: str, labels: Sequence[tuple[str, str]], buckets: Sequence[float],
    count: int, median: float,
) -> list[str]:  # fmt: skip
    out = [f"# HELP {name} {help_}", f"# TYPE {name} histogram"]
    for le in buckets:
        n = math.floor(count * _cdf(le, median))
        out.append(f"{name}_bucket{_labels([*labels, ('le', f'{float(le)}')])} {float(n)}")
    out.append(f"{name}_bucket{_labels([*labels, ('le', '+Inf')])} {float(count)}")
    mean = median * math.exp(_SPREAD**2 / 2)
    out.append(f"{name}_count{_labels(labels)} {float(count)}")
    out.append(f"{name}_sum{_labels(labels)} {count * mean:.3f}")
    return out


Labels = tuple[tuple[str, str], ...]
Samples = Iterable[tuple[Sequence[tuple[str, str]], float]]


def _gauge(name: str, help_: str, samples: Samples) -> list[str]:
    return [
        f"# HELP {name} {help_}",
        f"# TYPE {name} gauge",
        *(f"{name}{_labels(lab)} {value}" for lab, value in samples),
    ]


def render_vllm(pod: str, now: float, started: float) -> str | None:
    """One vLLM replica's ``/metrics`` at ``now``; None for a pod that is not simulated."""
    found = _model_of(pod)
    if found is None:
        return None
    m, replica = found
    up = max(0.0, now - started)
    requests = math.floor(m.rps * up)
    wave = math.sin(now / 90 + replica)
    base = (("model_name", m.name), ("engine", "0"))
    lines = [
        *_gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            [(base, float(round(m.rps * m.itl_s * m.tokens_out * (1 + 0.2 * wave))))],
        ),
        *_gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            [(base, float(max(0, round(3 * wave))))],
        ),
        *_gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            [(base, round(0.55 + 0.25 * wave, 4))],
        ),
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE vllm:prompt_tokens_total counter",
        f"vllm:prompt_tokens_total{_labels(base)} {float(requests * m.tokens_in)}",
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
        "# TYPE vllm:generation_tokens_total counter",
        f"vllm:generation_tokens_total{_labels(base)} {float(requests * m.tokens_out)}",
        "# HELP vllm:request_success_total Count of successfully processed requests.",
        "# TYPE vllm:request_success_total counter",
        f"vllm:request_success_total{_labels([*base, ('finished_reason', 'stop')])} "
        f"{float(requests)}",
        *_histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            base,
            TTFT_BUCKETS,
            requests,
            m.ttft_s,
        ),
        *_histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            base,
            ITL_BUCKETS,
            requests * m.tokens_out,
            m.itl_s,
        ),
        *_histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            base,
            E2E_BUCKETS,
            requests,
            m.ttft_s + m.itl_s * m.tokens_out,
        ),
    ]
    return "\n".join(lines) + "\n"


def render_agent_sandbox(now: float, started: float) -> str:
    """The agent-sandbox controller's ``/metrics``: a warm pool of 8 kept full, claims
    served from it (warm, sub-second) and a few cold ones."""
    up = max(0.0, now - started)
    claimed = 12 + round(2 * math.sin(now / 120))
    warm_claims, cold_claims = math.floor(0.5 * up), math.floor(0.05 * up)
    pool = (
        ("namespace", SANDBOX_NAMESPACE),
        ("warmpool_name", WARM_POOL),
        ("sandbox_template", SANDBOX_TEMPLATE),
    )
    lines = _gauge(
        "agent_sandbox_warmpool_size",
        "Number of sandboxes currently in each warm pool, labeled by sandbox status.",
        [
            ((*pool, ("sandbox_status", "ready")), 7.0),
            ((*pool, ("sandbox_status", "pending")), 1.0),
            ((*pool, ("sandbox_status", "succeeded")), 0.0),
            ((*pool, ("sandbox_status", "failed")), 0.0),
        ],
    )

    def sandboxes(launch: str) -> tuple[tuple[str, str], ...]:
        return (
            ("namespace", SANDBOX_NAMESPACE),
            ("ready_condition", "true"),
            ("expired", "false"),
            ("launch_type", launch),
            ("sandbox_template", SANDBOX_TEMPLATE),
            ("owned_by", "sandboxclaim"),
            ("created_by", "python-client"),
        )

    lines += _gauge(
        "agent_sandboxes",
        "Monitor the point-in-time number of sandboxes in the cluster.",
        [(sandboxes("warm"), float(claimed)), (sandboxes("cold"), 2.0)],
    )
    lines += [
        "# HELP agent_sandbox_claim_creation_total Total number of SandboxClaims created.",
        "# TYPE agent_sandbox_claim_creation_total counter",
    ]
    for launch, count in (("warm", warm_claims), ("cold", cold_claims)):
        lab = (
            ("namespace", SANDBOX_NAMESPACE),
            ("sandbox_template", SANDBOX_TEMPLATE),
            ("launch_type", launch),
            ("warmpool_name", WARM_POOL if launch == "warm" else ""),
            ("pod_condition", "ready"),
            ("created_by", "python-client"),
        )
        lines.append(f"agent_sandbox_claim_creation_total{_labels(lab)} {float(count)}")
    for launch, count, median_ms in (("warm", warm_claims, 380.0), ("cold", cold_claims, 4200.0)):
        startup: Labels = (("launch_type", launch), ("sandbox_template", SANDBOX_TEMPLATE))
        hist = _histogram(
            "agent_sandbox_claim_startup_latency_ms",
            "End-to-end latency from SandboxClaim creation to Pod Ready state in milliseconds.",
            startup,
            CLAIM_BUCKETS_MS,
            count,
            median_ms,
        )
        lines += hist if launch == "warm" else hist[2:]
    return "\n".join(lines) + "\n"


def render_kube_state(now: float, started: float) -> str:
    """kube-state-metrics' view of the simulated pods: the model Deployments' replicas, each
    model pod's start and Ready times, and the sandbox pods' RuntimeClass."""
    deploy = [
        ((("namespace", INFERENCE_NAMESPACE), ("deployment", m.name)), float(m.replicas))
        for m in MODELS
    ]
    starts: list[tuple[Sequence[tuple[str, str]], float]] = []
    readies: list[tuple[Sequence[tuple[str, str]], float]] = []
    runtimes: list[tuple[Sequence[tuple[str, str]], float]] = []
    for m in MODELS:
        for i in range(m.replicas):
            pod = (("namespace", INFERENCE_NAMESPACE), ("pod", pod_name(m, i)), ("uid", f"u{i}"))
            start = math.floor(started) - 3600 * (i + 1)
            starts.append((pod, float(start)))
            readies.append((pod, float(start + m.cold_start_s * (1 + 0.1 * i))))
    for i in range(16):
        runtime = "kata" if i % 8 == 7 else "gvisor"
        sandbox_pod: Labels = (
            ("namespace", SANDBOX_NAMESPACE),
            ("pod", f"{SANDBOX_TEMPLATE}-{i:03d}"),
            ("uid", f"s{i}"),
            ("runtimeclass_name", runtime),
        )
        runtimes.append((sandbox_pod, 1.0))
    lines = [
        *_gauge(
            "kube_deployment_spec_replicas",
            "Number of desired pods for a deployment.",
            deploy,
        ),
        *_gauge(
            "kube_deployment_status_replicas_available",
            "The number of available replicas per deployment.",
            deploy,
        ),
        *_gauge("kube_pod_start_time", "Start time in unix timestamp for a pod.", starts),
        *_gauge(
            "kube_pod_status_ready_time",
            "Readiness achieved time in unix timestamp for a pod.",
            readies,
        ),
        *_gauge(
            "kube_pod_runtimeclass_name_info",
            "The runtimeclass associated with the pod.",
            runtimes,
        ),
    ]
    return "\n".join(lines) + "\n"

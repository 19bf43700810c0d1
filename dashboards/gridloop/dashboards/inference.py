"""Inference: each served model's latency, load, KV cache, throughput and replicas.

vLLM's own metrics (``vllm:*``, v1 engine names: ``vllm:kv_cache_usage_perc``, not the
deprecated ``vllm:gpu_cache_usage_perc``; ``vllm:inter_token_latency_seconds``, not
``time_per_output_token``) labelled ``model_name``; replicas and cold starts from
kube-state-metrics, whose Deployment is named after the model.
"""

from __future__ import annotations

from gridloop.dashboards.panels import RATE, Board, graph, q, quantiles

UID = "gridloop-inference"
MODEL = 'model_name=~"$model"'
NS = 'namespace=~"$namespace"'


def build() -> Board:
    board = (
        Board(
            UID,
            "gridloop / Inference",
            "Served models (vLLM): time to first token, inter-token and end-to-end "
            "latency, running and waiting requests, KV-cache usage, token throughput, "
            "replicas and cold starts.",
            ["vllm", "inference"],
        )
        .variable(
            "namespace",
            "Namespace",
            "label_values(vllm:num_requests_running, namespace)",
            "Namespaces serving models.",
        )
        .variable(
            "model",
            "Model",
            f"label_values(vllm:num_requests_running{{{NS}}}, model_name)",
            "Served model names.",
        )
    )
    selector = f"{NS},{MODEL}"
    board.row("Latency").add(
        graph(
            "Time to first token",
            "From a request's arrival to its first generated token.",
            "s",
            quantiles("vllm:time_to_first_token_seconds", "model_name", selector, "{{model_name}}"),
            width=8,
        ),
        graph(
            "Inter-token latency",
            "Between consecutive generated tokens.",
            "s",
            quantiles("vllm:inter_token_latency_seconds", "model_name", selector, "{{model_name}}"),
            width=8,
        ),
        graph(
            "End-to-end latency",
            "From a request's arrival to its last token.",
            "s",
            quantiles("vllm:e2e_request_latency_seconds", "model_name", selector, "{{model_name}}"),
            width=8,
        ),
    )
    board.row("Load").add(
        graph(
            "Requests running and waiting",
            "Requests in the engine's batches, and queued behind them.",
            "none",
            [
                q(
                    f"sum by (model_name) (vllm:num_requests_running{{{selector}}})",
                    "{{model_name}} running",
                ),
                q(
                    f"sum by (model_name) (vllm:num_requests_waiting{{{selector}}})",
                    "{{model_name}} waiting",
                ),
            ],
            width=8,
        ),
        graph(
            "KV-cache usage",
            "Share of KV-cache blocks in use, per replica (1: full; requests start waiting).",
            "percentunit",
            [q(f"vllm:kv_cache_usage_perc{{{selector}}}", "{{model_name}} {{pod}}")],
            width=8,
        ),
        graph(
            "Token throughput",
            "Prompt (prefill) and generated tokens per second.",
            "short",
            [
                q(
                    f"sum by (model_name) (rate(vllm:prompt_tokens_total{{{selector}}}[{RATE}]))",
                    "{{model_name}} prompt",
                ),
                q(
                    f"sum by (model_name) "
                    f"(rate(vllm:generation_tokens_total{{{selector}}}[{RATE}]))",
                    "{{model_name}} generated",
                ),
            ],
            width=8,
        ),
    )
    board.row("Replicas").add(
        graph(
            "Replicas",
            "Available replicas of each model's Deployment against the desired count.",
            "none",
            [
                q(
                    f'kube_deployment_status_replicas_available{{{NS},deployment=~"$model"}}',
                    "{{deployment}} available",
                ),
                q(
                    f'kube_deployment_spec_replicas{{{NS},deployment=~"$model"}}',
                    "{{deployment}} desired",
                ),
            ],
        ),
        graph(
            "Cold start (pod start to Ready)",
            "How long each model pod took from start to Ready: weights streamed into GPU "
            "memory and the engine warmed up.",
            "s",
            [
                q(
                    f'kube_pod_status_ready_time{{{NS},pod=~"($model)-.*"}} '
                    f'- kube_pod_start_time{{{NS},pod=~"($model)-.*"}}',
                    "{{pod}}",
                )
            ],
        ),
    )
    return board

"""Model servers that start and roll without an outage, as the chart renders them.

The vLLM pods of `inference.models`, rendered by the real helm binary from charts/gridloop
(profiles/minimal.yaml plus each test's model): the user they run as, the paths vLLM
writes, the rollout, the tolerations, where the weights come from and the pinned image.
These pin what the chart asks Kubernetes for; tests/cluster/test_inference_served.py
serves a model with it on the local cluster's CPU node and rolls revisions under load.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

import pytest
import yaml
from chart_files import CHART

from gridloop import versions
from gridloop.errors import BuildError
from gridloop.health.observed import TAINT_KEY
from gridloop.local.build.building import binary

# the real helm, built by `gridloop local build`
pytestmark = pytest.mark.needs_binaries("helm")

MINIMAL = CHART / "profiles" / "minimal.yaml"
NAMESPACE = "gridloop-system"
A_MODEL: dict[str, Any] = {
    "name": "llama-8b",
    "uri": "s3://models/llama-3.1-8b/",
    "revision": "2025-06-01",
    "gpus": 1,
    "replicas": 2,
    "runtime": "vllm",
}
# What vLLM, torch and their caches write at run time, and where (vllm/envs.py,
# vllm/assets/base.py, vllm/transformers_utils/runai_utils.py, the libraries' defaults
# under HOME and tempfile.gettempdir()).
WRITTEN = {
    "HF_HOME": "Hugging Face cache",
    "VLLM_CACHE_ROOT": "torch.compile and Triton artifacts, the streamer's config files",
    "VLLM_CONFIG_ROOT": "usage_stats.json, do_not_track",
    "XDG_CACHE_HOME": "FlashInfer JIT, Outlines, Numba",
    "HOME": "~/.triton, ~/.nv",
}

Doc = dict[str, Any]


Helm = Callable[[dict[str, Any]], subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """helm(inference) -> `helm template` of the chart with these inference values."""
    try:
        path = str(binary("helm"))
    except BuildError as err:
        pytest.fail(f"{err}: the chart tests run the real helm binary", pytrace=False)
    home = tmp_path_factory.mktemp("helm-home")
    env = {
        **os.environ,
        "KUBECONFIG": os.devnull,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }

    def go(inference: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        extra = home / "values.yaml"
        extra.write_text(yaml.safe_dump({"inference": inference}, sort_keys=False))
        args = ["template", "gridloop", str(CHART), "--namespace", NAMESPACE]
        args += ["-f", str(MINIMAL), "-f", str(extra)]
        return subprocess.run(
            [path, *args], capture_output=True, text=True, env=env, timeout=60, check=False
        )

    return go


@pytest.fixture
def render(helm: Helm) -> Callable[..., list[Doc]]:
    """render(*models, **inference) -> the rendered objects."""

    def go(*models: dict[str, Any], **inference: Any) -> list[Doc]:
        result = helm({**inference, "models": list(models)})
        assert result.returncode == 0, result.stderr
        return [d for d in yaml.safe_load_all(result.stdout) if d]

    return go


@pytest.fixture
def refusal(helm: Helm) -> Callable[..., str]:
    """refusal(*models, **inference) -> helm's one error line; rendering must fail."""

    def go(*models: dict[str, Any], **inference: Any) -> str:
        result = helm({**inference, "models": list(models)})
        assert result.returncode != 0, f"rendered although it should not:\n{result.stdout[:500]}"
        errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1, result.stderr
        return errors[0]

    return go


def deployment(docs: list[Doc], name: str = "llama-8b") -> Doc:
    (found,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == name]
    return found


def pod_of(docs: list[Doc], name: str = "llama-8b") -> Doc:
    return deployment(docs, name)["spec"]["template"]["spec"]


def budgets(docs: list[Doc], name: str = "llama-8b") -> list[Doc]:
    return [d for d in docs if d["kind"] == "PodDisruptionBudget" and d["metadata"]["name"] == name]


def vllm(docs: list[Doc], name: str = "llama-8b") -> Doc:
    (container,) = pod_of(docs, name)["containers"]
    return container


def env_of(container: Doc) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


# --- the user ---


def test_vllm_runs_as_the_vllm_user_its_image_has(render: Callable[..., list[Doc]]) -> None:
    docs = render(A_MODEL)
    pod = pod_of(docs)
    container = vllm(docs)

    # vLLM's docker/Dockerfile: useradd --uid 2000 ... --home-dir /home/vllm vllm
    assert pod["securityContext"]["runAsUser"] == 2000
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsGroup"] != 0  # no root group: nothing needs it
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert env_of(container)["HOME"] == "/home/vllm"
    assert env_of(container)["USER"] == "vllm"  # getpass.getuser() asks USER first


# --- the paths vLLM writes ---


def mounted_volume(pod: Doc, container: Doc, path: str) -> Doc:
    """The volume holding `path`: the container's deepest mount above it."""
    above = [
        m for m in container["volumeMounts"]
        if PurePosixPath(path).is_relative_to(m["mountPath"])
    ]  # fmt: skip
    assert above, f"{path} is on the read-only root filesystem"
    mount = max(above, key=lambda m: len(m["mountPath"]))
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    return volume


@pytest.mark.parametrize("variable", sorted(WRITTEN))
def test_each_cache_vllm_writes_is_on_an_emptydir(
    render: Callable[..., list[Doc]], variable: str
) -> None:
    docs = render(A_MODEL)
    pod, container = pod_of(docs), vllm(docs)

    path = env_of(container)[variable]

    assert "emptyDir" in mounted_volume(pod, container, path), WRITTEN[variable]


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/tmp/torchinductor_vllm", "torch inductor's default cache"),
        ("/tmp/vllm-rpc.sock", "VLLM_RPC_BASE_PATH, tempfile.gettempdir()"),
        ("/home/vllm/.triton/cache", "Triton's default cache"),
        ("/home/vllm/.cache/vllm/assets/model_streamer", "the streamer's config.json"),
    ],
)
def test_the_default_scratch_paths_are_writable(
    render: Callable[..., list[Doc]], path: str, why: str
) -> None:
    docs = render(A_MODEL)

    assert "emptyDir" in mounted_volume(pod_of(docs), vllm(docs), path), why


def test_gpu_workers_share_tensors_through_a_memory_backed_dev_shm(
    render: Callable[..., list[Doc]],
) -> None:
    docs = render({**A_MODEL, "shmSize": "16Gi"})

    shm = mounted_volume(pod_of(docs), vllm(docs), "/dev/shm")

    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}


# --- the rollout ---


def test_a_new_revision_is_ready_before_an_old_pod_stops(
    render: Callable[..., list[Doc]],
) -> None:
    docs = render(A_MODEL)
    spec = deployment(docs)["spec"]
    startup = vllm(docs)["startupProbe"]

    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    # a roll is reported stuck only after a new pod had all its startup time
    assert spec["progressDeadlineSeconds"] > startup["periodSeconds"] * startup["failureThreshold"]


def test_a_replaced_pod_serves_on_until_its_endpoint_is_gone(
    render: Callable[..., list[Doc]],
) -> None:
    """kube-proxy drops a terminating pod's endpoint a moment after the pod is told to
    stop: vLLM must still answer through that window (tests/cluster/
    test_inference_served.py rolls a revision under load and counts no failure)."""
    docs = render(A_MODEL)
    pre_stop = vllm(docs)["lifecycle"]["preStop"]
    grace = pod_of(docs).get("terminationGracePeriodSeconds", 30)

    assert pre_stop == {"sleep": {"seconds": 10}}
    assert grace > pre_stop["sleep"]["seconds"]


def test_a_server_that_exits_leaves_its_log_tail_as_the_reason(
    render: Callable[..., list[Doc]],
) -> None:
    assert vllm(render(A_MODEL))["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_a_cpu_model_server_asks_for_no_gpu(render: Callable[..., list[Doc]]) -> None:
    docs = render({**A_MODEL, "gpus": 0, "replicas": 1})
    resources = vllm(docs)["resources"]

    assert "nvidia.com/gpu" not in resources["requests"]
    assert "nvidia.com/gpu" not in resources["limits"]
    assert "--tensor-parallel-size" not in vllm(docs)["args"]


def test_a_model_without_a_spare_gpu_may_roll_in_place(render: Callable[..., list[Doc]]) -> None:
    docs = render({**A_MODEL, "rollout": {"maxSurge": 0, "maxUnavailable": 1}})

    rolling = deployment(docs)["spec"]["strategy"]["rollingUpdate"]

    assert rolling == {"maxSurge": 0, "maxUnavailable": 1}


def test_a_models_rollout_takes_what_it_leaves_out_from_the_default(
    render: Callable[..., list[Doc]],
) -> None:
    docs = render({**A_MODEL, "rollout": {"maxSurge": 2}})

    rolling = deployment(docs)["spec"]["strategy"]["rollingUpdate"]

    assert rolling == {"maxSurge": 2, "maxUnavailable": 0}


@pytest.mark.parametrize(
    ("model", "inference", "field"),
    [
        ({"rollout": {"maxSurge": 0}}, {}, "inference.models[0].rollout"),
        ({}, {"rollout": {"maxSurge": 0, "maxUnavailable": 0}}, "inference.rollout"),
    ],
    ids=["a-models", "the-default"],
)
def test_a_rollout_that_could_never_start_is_refused_naming_the_field(
    refusal: Callable[..., str], model: dict[str, Any], inference: dict[str, Any], field: str
) -> None:
    error = refusal({**A_MODEL, **model}, **inference)

    assert f"{field}: maxSurge and maxUnavailable are both 0" in error


def test_drains_take_one_of_several_replicas_at_a_time(render: Callable[..., list[Doc]]) -> None:
    docs = render(A_MODEL)

    (budget,) = budgets(docs)

    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"] == deployment(docs)["spec"]["selector"]


def test_a_single_replica_has_no_budget_that_would_block_draining_its_node(
    render: Callable[..., list[Doc]],
) -> None:
    docs = render({**A_MODEL, "replicas": 1})

    assert budgets(docs) == []


# --- tolerations ---


def test_model_servers_tolerate_the_gpu_pool_taint_and_their_own(
    render: Callable[..., list[Doc]],
) -> None:
    own = {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}

    docs = render({**A_MODEL, "tolerations": [own]})

    assert pod_of(docs)["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        own,
    ]


def test_no_tolerations_when_the_pools_are_untainted(render: Callable[..., list[Doc]]) -> None:
    docs = render(A_MODEL, tolerations=[])

    assert "tolerations" not in pod_of(docs)


@pytest.mark.parametrize(
    ("model", "inference", "field", "says"),
    [
        (
            {"tolerations": [{"key": TAINT_KEY, "operator": "Exists"}]},
            {},
            "inference.models[0].tolerations[0]",
            f"tolerates {TAINT_KEY}, the health service's quarantine taint",
        ),
        (
            {},
            {"tolerations": [{"key": "a", "operator": "Exists"}, {"operator": "Exists"}]},
            "inference.tolerations[1]",
            "an empty key with operator Exists tolerates every taint",
        ),
    ],
    ids=["by-its-key", "as-every-taint"],
)
def test_the_health_services_quarantine_taint_is_never_tolerated(
    refusal: Callable[..., str],
    model: dict[str, Any],
    inference: dict[str, Any],
    field: str,
    says: str,
) -> None:
    error = refusal({**A_MODEL, **model}, **inference)

    assert f"{field}: {says}" in error


# --- revision and uri ---


@pytest.mark.parametrize("uri", ["s3://models/llama-3.1-8b/", "s3://models/llama-3.1-8b"])
def test_weights_stream_from_the_revisions_folder_of_the_uri(
    render: Callable[..., list[Doc]], uri: str
) -> None:
    docs = render({**A_MODEL, "uri": uri})

    assert vllm(docs)["args"][0] == "s3://models/llama-3.1-8b/2025-06-01/"


def test_changing_the_revision_alone_rolls_onto_its_weights(
    render: Callable[..., list[Doc]],
) -> None:
    before = deployment(render(A_MODEL))
    after = deployment(render({**A_MODEL, "revision": "2025-07-01"}))

    old, new = before["spec"]["template"], after["spec"]["template"]

    assert new["metadata"]["annotations"] == {"gridloop.io/model-revision": "2025-07-01"}
    assert new["spec"]["containers"][0]["args"][0] == "s3://models/llama-3.1-8b/2025-07-01/"
    for template in (old, new):  # and nothing else changes
        del template["metadata"]["annotations"]
        del template["spec"]["containers"][0]["args"][0]
    assert old == new


def test_a_kaito_model_streams_the_same_revision_folder(
    render: Callable[..., list[Doc]],
) -> None:
    kaito = {**A_MODEL, "name": "qwen", "uri": "gs://models/qwen/", "revision": "v3"}

    docs = render({**kaito, "runtime": "kaito"})

    (workspace,) = [d for d in docs if d["kind"] == "Workspace"]
    assert workspace["inference"]["template"]["spec"]["containers"][0]["args"][0] == (
        "gs://models/qwen/v3/"
    )


@pytest.mark.parametrize(
    ("model", "says"),
    [
        (
            {"revision": "2025/06"},
            'inference.models[0].revision: "2025/06" is not one path segment',
        ),
        ({"revision": ".."}, 'inference.models[0].revision: ".." is not one path segment'),
        (
            {"uri": "s3://models/llama-3.1-8b/2025-06-01/"},
            'inference.models[0].uri: "s3://models/llama-3.1-8b/2025-06-01/" already ends'
            ' with the revision "2025-06-01"',
        ),
    ],
    ids=["a-slash", "dot-dot", "uri-already-names-it"],
)
def test_a_revision_that_does_not_name_one_folder_is_refused(
    refusal: Callable[..., str], model: dict[str, Any], says: str
) -> None:
    assert says in refusal({**A_MODEL, **model})


def test_azure_blob_streams_like_s3_and_gcs(render: Callable[..., list[Doc]]) -> None:
    """vLLM 0.33.0's `runai` extra is runai-model-streamer[azure,gcs,s3]: az:// is served."""
    docs = render({**A_MODEL, "uri": "az://models/llama-3.1-8b/", "credentialsSecret": "blob"})

    container = vllm(docs)

    assert container["args"][:3] == [
        "az://models/llama-3.1-8b/2025-06-01/", "--load-format", "runai_streamer",
    ]  # fmt: skip
    assert container["envFrom"] == [{"secretRef": {"name": "blob"}}]


# --- the image ---


def test_the_default_image_is_the_vllm_release_versions_yaml_pins(
    render: Callable[..., list[Doc]],
) -> None:
    pinned = versions.get("vllm")
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    assert values["inference"]["image"] == pinned.image_ref == f"vllm/vllm-openai:{pinned.version}"
    assert vllm(render(A_MODEL))["image"] == pinned.image_ref


def test_the_cpu_image_refuses_a_uri_it_has_no_streamer_for(refusal: Callable[..., str]) -> None:
    cpu = {**A_MODEL, "gpus": 0, "uri": "az://models/llama/"}

    line = refusal(cpu, image="ghcr.io/gridloop/vllm-cpu:0.32.0")

    assert line.startswith("Error: execution error at (gridloop/templates/inference.yaml")
    assert 'inference.models[0].uri: "az://models/llama/" cannot be streamed' in line
    assert "S3 backend only" in line

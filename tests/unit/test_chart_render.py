"""The gridloop chart, rendered by the real helm binary.

`helm template` and `helm lint` run on charts/gridloop as it is in git, with
profiles/minimal.yaml (no upstream manifests: those come from `gridloop bundle`) plus
what each test enables. Rendered YAML is parsed and the resulting objects are
asserted on, never the template text. Helm is the one `gridloop local build` made;
if it is not built, these tests fail and say so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_files import CHART, EVERYTHING, PROFILE_NAMES, REPO, UPSTREAM_OFF

from gridloop import names
from gridloop.bundle.sources import source_for
from gridloop.chart.objects import quantity
from gridloop.dcgm import METRICS
from gridloop.errors import BuildError
from gridloop.fleet import GPU_TOLERATION
from gridloop.fleet.catalog import GPU_MODELS
from gridloop.fleet.schema import load_fleet
from gridloop.health.policy_loading import load_policy
from gridloop.health.signals import queries
from gridloop.local.build.building import binary

# the real helm, built by `gridloop local build`
needs_helm = pytest.mark.needs_binaries("helm")

PROFILES = CHART / "profiles"
MINIMAL = PROFILES / "minimal.yaml"
DEFAULT_FLEET = REPO / "examples" / "fleets" / "default.yaml"
POLICY = REPO / "policies" / "health.yaml"
NAMESPACE = "gridloop-system"
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob")

Doc = dict[str, Any]
Render = Callable[..., list[Doc]]


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """The helm command, with its caches and config kept out of the user's home."""
    problem = ""
    try:
        path = binary("helm")
    except BuildError as err:
        problem = f"{err}: the chart tests run the real helm binary"
    if problem:
        pytest.fail(problem, pytrace=False)
    home = tmp_path_factory.mktemp("helm-home")
    saved = {
        k: os.environ.get(k) for k in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME")
    }
    os.environ.update(
        HELM_CACHE_HOME=str(home / "cache"),
        HELM_CONFIG_HOME=str(home / "config"),
        HELM_DATA_HOME=str(home / "data"),
    )
    yield [str(path)]
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def run_helm(helm: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": os.devnull}
    return subprocess.run(
        [*helm, *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def template_args(chart: Path, files: tuple[Path, ...], sets: tuple[str, ...]) -> list[str]:
    args = ["template", "gridloop", str(chart), "--namespace", NAMESPACE]
    for f in files:
        args += ["-f", str(f)]
    for s in sets:
        args += ["--set", s]
    return args


@pytest.fixture
def render(helm: list[str]) -> Render:
    """render(*values_files, sets=(...), chart=CHART, base=(MINIMAL,)) -> the rendered objects."""

    def go(
        *files: Path,
        sets: tuple[str, ...] = (),
        chart: Path = CHART,
        base: tuple[Path, ...] = (MINIMAL,),
    ) -> list[Doc]:
        result = run_helm(helm, *template_args(chart, (*base, *files), sets))
        assert result.returncode == 0, result.stderr
        return [d for d in yaml.safe_load_all(result.stdout) if d]

    return go


@pytest.fixture
def render_error(helm: list[str]) -> Callable[..., str]:
    """render_error(*values_files, sets=(...)) -> helm's error output; rendering must fail."""

    def go(*files: Path, sets: tuple[str, ...] = (), base: tuple[Path, ...] = (MINIMAL,)) -> str:
        result = run_helm(helm, *template_args(CHART, (*base, *files), sets))
        assert result.returncode != 0, f"rendered although it should not:\n{result.stdout[:500]}"
        return result.stderr

    return go


def values_file(tmp_path: Path, values: dict[str, Any], name: str = "values.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


def of_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def named(docs: list[Doc], kind: str, name: str) -> Doc:
    found = [d for d in of_kind(docs, kind) if d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: found {len(found)}"
    return found[0]


# --- lint and profiles ---


@needs_helm
def test_lint_is_clean_for_the_minimal_profile(helm: list[str]) -> None:
    result = run_helm(helm, "lint", str(CHART), "--strict", "-f", str(MINIMAL))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout
    # lint only logs a template's `fail`; a clean lint has none
    assert "funcMap fail" not in result.stderr, result.stderr


@needs_helm
def test_lint_is_clean_with_every_gridloop_part_enabled(helm: list[str]) -> None:
    args = ["lint", str(CHART), "--strict", "-f", str(MINIMAL), "-f", str(EVERYTHING)]
    result = run_helm(helm, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout
    # lint only logs a template's `fail`; a clean lint has none
    assert "funcMap fail" not in result.stderr, result.stderr


# the issue's profiles, and the two the tests and the docs already used
HEALTH_REPLICAS = {
    "local": 2,
    "minimal": 2,
    "production": 3,
    "single-region": 3,
    "multi-region": 3,
    "air-gapped": 3,
}


def test_the_profiles_are_the_issues_and_the_existing_ones() -> None:
    assert sorted(HEALTH_REPLICAS) == PROFILE_NAMES


@pytest.mark.parametrize("profile", PROFILE_NAMES)
@needs_helm
def test_every_profile_renders_when_upstream_components_are_disabled(
    render: Render, profile: str
) -> None:
    docs = render(PROFILES / f"{profile}.yaml", sets=(UPSTREAM_OFF,), base=())
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "ClusterRole", "ValidatingAdmissionPolicy", "ClusterQueue"} <= kinds
    health = named(docs, "Deployment", "gridloop-health")
    assert health["spec"]["replicas"] == HEALTH_REPLICAS[profile]


@pytest.mark.parametrize(
    ("profile", "key"),
    [
        ("single-region", "topology.kubernetes.io/zone"),
        ("multi-region", "topology.kubernetes.io/region"),
    ],
)
@needs_helm
def test_region_profiles_spread_the_health_service_so_one_zone_or_site_can_go(
    render: Render, profile: str, key: str
) -> None:
    docs = render(PROFILES / f"{profile}.yaml", sets=(UPSTREAM_OFF,), base=())
    pod = named(docs, "Deployment", "gridloop-health")["spec"]["template"]["spec"]
    (spread,) = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == key and spread["whenUnsatisfiable"] == "ScheduleAnyway"
    assert spread["labelSelector"]["matchLabels"]["app.kubernetes.io/name"] == "gridloop-health"


@needs_helm
def test_air_gapped_turns_off_what_reaches_the_internet(render: Render) -> None:
    docs = render(PROFILES / "air-gapped.yaml", sets=(UPSTREAM_OFF,), base=())
    values = yaml.safe_load((PROFILES / "air-gapped.yaml").read_text())
    image = named(docs, "Deployment", "gridloop-health")["spec"]["template"]["spec"]
    assert image["containers"][0]["image"].startswith(values["imageRegistry"] + "/ghcr.io/")
    assert values["kaito"]["enabled"] is False and values["inference"]["offline"] is True


@needs_helm
def test_production_profile_keeps_health_available_through_disruptions(render: Render) -> None:
    docs = render(PROFILES / "production.yaml", sets=(UPSTREAM_OFF,), base=())
    pdb = named(docs, "PodDisruptionBudget", "gridloop-health")
    assert pdb["spec"]["minAvailable"] == 1


@needs_helm
def test_production_profile_refuses_a_noexecute_policy(
    render_error: Callable[..., str], tmp_path: Path
) -> None:
    policy = POLICY.read_text().replace("noExecute: false", "noExecute: true")
    overrides = values_file(tmp_path, {"health": {"policy": policy}})
    error = render_error(PROFILES / "production.yaml", overrides, sets=(UPSTREAM_OFF,))
    assert "spec.quarantine.noExecute" in error


# --- upstream components come from the bundle ---


@needs_helm
def test_enabled_upstream_component_without_bundle_fails_with_what_to_do(
    render_error: Callable[..., str],
) -> None:
    error = render_error(sets=("kueue.enabled=true",))
    assert (
        "kueue.enabled is true but this chart has no upstream Kueue manifests: install the "
        'chart built by "gridloop bundle", or set kueue.enabled=false'
    ) in error


@needs_helm
def test_bundled_upstream_manifests_are_emitted_in_file_order(
    render: Render, tmp_path: Path
) -> None:
    chart = tmp_path / "gridloop"
    shutil.copytree(CHART, chart)  # follows the policy symlink, as the bundle's copy does
    upstream = chart / "upstream" / "kueue"
    (upstream / "bases").mkdir(parents=True)
    (upstream / "bases" / "configmap-kueue-manager-config.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kueue-manager-config}\n"
        "data:\n  controller_manager_config.yaml: 'kind: Configuration'\n"
    )
    (upstream / "b.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: second\n")
    (upstream / "a.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: first\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: also-first\n"
    )
    docs = render(sets=("kueue.enabled=true",), chart=chart)
    names = [d["metadata"]["name"] for d in of_kind(docs, "ConfigMap")]
    upstream_names = [n for n in names if n in {"first", "also-first", "second"}]
    assert upstream_names == ["first", "also-first", "second"]
    assert "kueue-manager-config" in names, "the base is rendered from values, not emitted"


# --- the fleet becomes Kueue objects ---


def fleet_values(path: Path) -> dict[str, Any]:
    loaded = yaml.safe_load(path.read_text())
    return {"fleet": loaded}


@needs_helm
def test_kueue_objects_follow_the_default_fleet(render: Render, tmp_path: Path) -> None:
    fleet = load_fleet(DEFAULT_FLEET)
    teams = [
        {"name": "research", "namespace": "team-research", "weight": 5},
        {"name": "product", "namespace": "team-product", "weight": 3},
        {"name": "eval", "namespace": "team-eval", "weight": 1},
    ]
    values = {**fleet_values(DEFAULT_FLEET), "kueue": {"teams": teams}}
    docs = render(values_file(tmp_path, values))

    pools = [
        (s, p) for t in ("cloud", "on-prem") for s in fleet.sites if s.type == t for p in s.pools
    ]
    flavors = of_kind(docs, "ResourceFlavor")
    # the container nodes' CPU flavor, then one per GPU pool
    assert sorted(f["metadata"]["name"] for f in flavors) == sorted(
        ["system", *(f"{s.name}-{p.name}" for s, p in pools)]
    )
    for site, pool in pools:
        labels = named(docs, "ResourceFlavor", f"{site.name}-{pool.name}")["spec"]["nodeLabels"]
        assert labels == {
            "gridloop.io/site": site.name,
            "gridloop.io/pool": pool.name,
            "nvidia.com/gpu.product": pool.model.product,
        }

    queues = {q["metadata"]["name"]: q for q in of_kind(docs, "ClusterQueue")}
    assert set(queues) == {t["name"] for t in teams}
    total_weight = sum(t["weight"] for t in teams)
    for site, pool in pools:
        shares = {}
        for team in teams:
            spec = queues[team["name"]]["spec"]
            assert spec["cohortName"] == "gridloop"
            # own quota in the next region before borrowing or preempting in this one
            assert spec["flavorFungibility"] == {
                "whenCanBorrow": "TryNextFlavor",
                "whenCanPreempt": "TryNextFlavor",
            }
            group = spec["resourceGroups"][0]
            assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
            # the CPU pool first, then the GPU pools in fleet order: cloud sites as listed,
            # then on-prem
            assert [f["name"] for f in group["flavors"]] == [
                "system",
                *(f"{s.name}-{p.name}" for s, p in pools),
            ]
            flavor = next(f for f in group["flavors"] if f["name"] == f"{site.name}-{pool.name}")
            gpu = next(r for r in flavor["resources"] if r["name"] == "nvidia.com/gpu")
            shares[team["name"]] = int(gpu["nominalQuota"])
        assert sum(shares.values()) == pool.gpu_count
        for team in teams:
            exact = pool.gpu_count * team["weight"] / total_weight
            assert abs(shares[team["name"]] - exact) < 1

    for team in teams:
        local = [
            q
            for q in of_kind(docs, "LocalQueue")
            if q["metadata"]["namespace"] == team["namespace"]
        ]
        assert [q["metadata"]["name"] for q in local] == ["default"]
        assert local[0]["spec"]["clusterQueue"] == team["name"]
        ns = named(docs, "Namespace", team["namespace"])
        assert ns["metadata"]["labels"]["gridloop.io/team"] == team["name"]


@needs_helm
def test_container_nodes_are_a_cpu_flavor_split_across_teams(
    render: Render, tmp_path: Path
) -> None:
    fleet = fleet_values(DEFAULT_FLEET)
    fleet["fleet"]["containerNodes"] = {"nodes": 2, "cpuCores": 3, "memoryGi": 5}
    teams = [
        {"name": "research", "namespace": "team-research", "weight": 2},
        {"name": "eval", "namespace": "team-eval", "weight": 1},
    ]
    docs = render(values_file(tmp_path, {**fleet, "kueue": {"teams": teams}}))

    flavor = named(docs, "ResourceFlavor", "system")["spec"]
    assert flavor["nodeLabels"] == {
        "gridloop.io/pool": "system",
        "gridloop.io/container-node": "true",
    }
    # untainted nodes: nothing to tolerate
    assert "tolerations" not in flavor
    quota = {}
    for team in teams:
        queue = named(docs, "ClusterQueue", team["name"])
        system = queue["spec"]["resourceGroups"][0]["flavors"][0]
        assert system["name"] == "system"
        quota[team["name"]] = {r["name"]: r["nominalQuota"] for r in system["resources"]}
    # 2 nodes x 3 cores = 6000m and 2 x 5 GiB = 10240Mi, split 2:1; no GPU on them
    assert quota == {
        "research": {"cpu": "4000m", "memory": "6827Mi", "nvidia.com/gpu": "0"},
        "eval": {"cpu": "2000m", "memory": "3413Mi", "nvidia.com/gpu": "0"},
    }


@needs_helm
def test_a_fleet_without_container_nodes_has_no_cpu_flavor(render: Render, tmp_path: Path) -> None:
    fleet = fleet_values(DEFAULT_FLEET)
    del fleet["fleet"]["containerNodes"]
    docs = render(values_file(tmp_path, fleet))

    assert "system" not in {f["metadata"]["name"] for f in of_kind(docs, "ResourceFlavor")}


@needs_helm
def test_flavor_products_and_capacity_match_the_catalog(render: Render, tmp_path: Path) -> None:
    pools = [
        {"name": f"p{i}", "gpu": gpu, "nodes": 3, "gpusPerNode": 4}
        for i, gpu in enumerate(sorted(GPU_MODELS))
    ]
    site = {"name": "lab", "type": "on-prem", "region": "lab", "zones": ["r1"], "pools": pools}
    docs = render(values_file(tmp_path, {"fleet": {"sites": [site]}}))
    queue = named(docs, "ClusterQueue", "default")
    flavors = {f["name"]: f for f in queue["spec"]["resourceGroups"][0]["flavors"]}
    for pool in pools:
        model = GPU_MODELS[pool["gpu"]]
        flavor = named(docs, "ResourceFlavor", f"lab-{pool['name']}")
        assert flavor["spec"]["nodeLabels"]["nvidia.com/gpu.product"] == model.product
        # CPU-only pods admitted on a GPU pool's CPU quota get past its nodes' GPU taint
        assert flavor["spec"]["tolerations"] == [GPU_TOLERATION]  # the fleet's own constant
        quota = {r["name"]: r["nominalQuota"] for r in flavors[f"lab-{pool['name']}"]["resources"]}
        assert quota.pop("cpu") == str(3 * max(1, model.cpu_cores * 4 // 8))
        assert quota.pop("nvidia.com/gpu") == "12"
        memory = 3 * max(1, model.memory_gi * 4 // 8)
        assert quantity(quota["memory"]) == quantity(f"{memory}Gi")
        assert quota["memory"] == canonical_gibibytes(memory)


def canonical_gibibytes(n: int) -> str:
    """How Kubernetes writes n GiB back: the largest binary unit that divides it."""
    for unit in ("Ei", "Pi", "Ti", "Gi"):
        size = 1024 ** ("Gi", "Ti", "Pi", "Ei").index(unit)
        if n % size == 0:
            return f"{n // size}{unit}" if n else "0"
    raise AssertionError(n)


@pytest.mark.parametrize(
    ("nodes", "gpus", "memory"),
    [(1, 8, "2Ti"), (3, 8, "6Ti"), (1, 3, "768Gi"), (4, 3, "3Ti")],
    ids=["2048Gi", "6144Gi", "768Gi", "3072Gi"],
)
@needs_helm
def test_memory_quotas_are_written_as_kubernetes_writes_them_back(
    render: Render, tmp_path: Path, nodes: int, gpus: int, memory: str
) -> None:
    """Kueue's webhook stores 16384Gi as 16Ti: a quota written that way never diffs."""
    site = {
        "name": "lab",
        "type": "on-prem",
        "region": "lab",
        "zones": ["r1"],
        "pools": [{"name": "big", "gpu": "H100-80GB", "nodes": nodes, "gpusPerNode": gpus}],
    }
    docs = render(values_file(tmp_path, {"fleet": {"sites": [site]}}))
    queue = named(docs, "ClusterQueue", "default")
    (flavor,) = queue["spec"]["resourceGroups"][0]["flavors"]

    quota = {r["name"]: r["nominalQuota"] for r in flavor["resources"]}

    assert quota["memory"] == memory


def test_schema_gpu_enum_is_the_catalog() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    site = schema["properties"]["fleet"]["properties"]["sites"]["items"]
    pool = site["properties"]["pools"]["items"]
    assert pool["properties"]["gpu"]["enum"] == sorted(GPU_MODELS)


@needs_helm
def test_a_fleet_without_sites_gives_queues_without_quota(render: Render) -> None:
    docs = render()
    assert of_kind(docs, "ResourceFlavor") == []
    assert "resourceGroups" not in named(docs, "ClusterQueue", "default")["spec"]


@needs_helm
def test_colliding_pool_names_fail_naming_the_pool(
    render_error: Callable[..., str], tmp_path: Path
) -> None:
    pool = {"gpu": "L4", "nodes": 1, "gpusPerNode": 1}
    sites = [
        {
            "name": "a-b",
            "type": "cloud",
            "region": "r",
            "zones": ["z"],
            "pools": [{"name": "c", **pool}],
        },
        {
            "name": "a",
            "type": "cloud",
            "region": "r",
            "zones": ["z"],
            "pools": [{"name": "b-c", **pool}],
        },
    ]
    error = render_error(values_file(tmp_path, {"fleet": {"sites": sites}}))
    assert "fleet.sites[1].pools[0].name" in error


# --- inference ---


@needs_helm
def test_vllm_model_streams_from_object_storage(render: Render) -> None:
    docs = render(EVERYTHING)
    deployment = named(docs, "Deployment", "llama-8b")
    pod = deployment["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert container["command"] + container["args"][:7] == [
        "vllm", "serve", "s3://models/llama-3.1-8b/2025-06-01/", "--load-format", "runai_streamer",
        "--served-model-name", "llama-8b", "--port", "8000",
    ]  # fmt: skip
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["RUNAI_STREAMER_CONCURRENCY"] == "32"
    assert env["AWS_ENDPOINT_URL"] == "https://minio.example:9000"
    assert env["RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING"] == "0"
    assert container["envFrom"] == [{"secretRef": {"name": "models-s3"}}]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    for probe in ("startupProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    shm = next(v for v in pod["spec"]["volumes"] if v["name"] == "shm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "4Gi"}
    service = named(docs, "Service", "llama-8b")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert (
        named(docs, "PodMonitor", "llama-8b")["spec"]["podMetricsEndpoints"][0]["path"]
        == "/metrics"
    )
    assert named(docs, "PodDisruptionBudget", "llama-8b")["spec"]["maxUnavailable"] == 1


@needs_helm
def test_kaito_model_becomes_a_workspace(render: Render) -> None:
    docs = render(EVERYTHING)
    workspace = named(docs, "Workspace", "qwen-72b")
    assert workspace["apiVersion"] == "kaito.sh/v1beta1"
    selector = workspace["resource"]["labelSelector"]["matchLabels"]
    assert selector == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    container = workspace["inference"]["template"]["spec"]["containers"][0]
    assert container["args"][0] == "gs://models/qwen-72b/v3/"
    assert "--tensor-parallel-size" in container["args"]
    assert not [d for d in of_kind(docs, "Deployment") if d["metadata"]["name"] == "qwen-72b"]


@needs_helm
def test_changing_a_revision_rolls_only_that_model(render: Render) -> None:
    before = render(EVERYTHING)
    after = render(EVERYTHING, sets=("inference.models[0].revision=2025-07-01",))
    assert len(before) == len(after)
    changed = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
    assert [b["metadata"]["name"] for b, _ in changed] == ["llama-8b"]
    old, new = changed[0]
    assert old["kind"] == "Deployment"
    old_annotations = old["spec"]["template"]["metadata"].pop("annotations")
    new_annotations = new["spec"]["template"]["metadata"].pop("annotations")
    # the weights are <uri>/<revision>/: a new revision names new weights
    old_weights = old["spec"]["template"]["spec"]["containers"][0]["args"].pop(0)
    new_weights = new["spec"]["template"]["spec"]["containers"][0]["args"].pop(0)
    assert old == new
    assert old_annotations == {"gridloop.io/model-revision": "2025-06-01"}
    assert new_annotations == {"gridloop.io/model-revision": "2025-07-01"}
    assert (old_weights, new_weights) == (
        "s3://models/llama-3.1-8b/2025-06-01/",
        "s3://models/llama-3.1-8b/2025-07-01/",
    )


# --- values the schema refuses ---

A_POOL = {"name": "h100", "gpu": "H100-80GB", "nodes": 1, "gpusPerNode": 8}
A_SITE = {"name": "x", "type": "cloud", "region": "r", "zones": ["z"], "pools": [A_POOL]}
A_MODEL = {"name": "m", "uri": "s3://b/m/", "revision": "1", "gpus": 1, "runtime": "vllm"}


@pytest.mark.parametrize(
    ("values", "key"),
    [
        pytest.param({"health": {"replicaz": 2}}, "replicaz", id="misspelt-key"),
        pytest.param({"health": {"replicas": "two"}}, "/health/replicas", id="string-for-number"),
        pytest.param(
            {"fleet": {"sites": [{**A_SITE, "pools": [{**A_POOL, "nodes": -1}]}]}},
            "/fleet/sites/0/pools/0/nodes",
            id="negative-nodes",
        ),
        pytest.param(
            {"kueue": {"teams": [{"name": "a", "namespace": "a", "weight": -2}]}},
            "/kueue/teams/0/weight",
            id="negative-quota-weight",
        ),
        pytest.param(
            {"fleet": {"sites": [{**A_SITE, "pools": [{**A_POOL, "gpu": "H900"}]}]}},
            "/fleet/sites/0/pools/0/gpu",
            id="unknown-gpu",
        ),
        pytest.param(
            {"inference": {"models": [{**A_MODEL, "awsSecretAccessKey": "hunter2"}]}},
            "awsSecretAccessKey",
            id="inline-credentials",
        ),
        pytest.param(
            {"inference": {"models": [{**A_MODEL, "s3": {"accessKey": "AKIA"}}]}},
            "accessKey",
            id="inline-credentials-under-s3",
        ),
        pytest.param(
            {"inference": {"models": [{**A_MODEL, "uri": "https://example.com/m"}]}},
            "/inference/models/0/uri",
            id="uri-not-object-storage",
        ),
    ],
)
@needs_helm
def test_bad_values_fail_naming_the_key(
    render_error: Callable[..., str], tmp_path: Path, values: dict[str, Any], key: str
) -> None:
    error = render_error(values_file(tmp_path, values))
    assert key in error
    assert "schema" in error.lower()


@needs_helm
def test_inline_credentials_are_refused_with_the_reason(
    render_error: Callable[..., str], tmp_path: Path
) -> None:
    values = {"inference": {"models": [{**A_MODEL, "password": "x"}]}}
    error = render_error(values_file(tmp_path, values))
    assert "at '/inference/models/0/password': value must be 'refused: inline credentials" in error
    assert "credentialsSecret" in error


@needs_helm
def test_sandbox_runtime_outside_the_allowed_list_fails(render_error: Callable[..., str]) -> None:
    error = render_error(sets=("agentSandbox.template.runtimeClassName=runc",))
    assert "agentSandbox.template.runtimeClassName" in error


# --- the health service ---


@needs_helm
def test_health_policy_is_the_repository_policy(render: Render) -> None:
    docs = render()
    config = named(docs, "ConfigMap", "gridloop-health")
    assert config["data"]["health.yaml"].strip() == POLICY.read_text().strip()


@needs_helm
def test_health_policy_override_replaces_the_file(render: Render, tmp_path: Path) -> None:
    policy = "apiVersion: gridloop.io/v1alpha1\nkind: HealthPolicy\nmetadata: {name: x}\nspec: {}\n"
    docs = render(values_file(tmp_path, {"health": {"policy": policy}}))
    assert named(docs, "ConfigMap", "gridloop-health")["data"]["health.yaml"] == policy


@needs_helm
def test_packaged_chart_carries_the_policy_file(helm: list[str], tmp_path: Path) -> None:
    result = run_helm(helm, "package", str(CHART), "--destination", str(tmp_path))
    assert result.returncode == 0, result.stderr
    (archive,) = tmp_path.glob("gridloop-*.tgz")
    with tarfile.open(archive) as tar:
        member = tar.getmember("gridloop/files/health.yaml")
        assert member.isfile()
        extracted = tar.extractfile(member)
        assert extracted is not None
        assert extracted.read().decode() == POLICY.read_text()


@needs_helm
def test_health_service_runs_with_leader_election_and_probes(render: Render) -> None:
    docs = render()
    deployment = named(docs, "Deployment", "gridloop-health")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    command = container["command"]
    assert command[:3] == ["gridloop", "health", "run"]
    flags = dict(zip(command[3::2], command[4::2], strict=False))
    assert flags["--config"] == "/etc/gridloop/health.yaml"
    assert flags["--namespace"] == NAMESPACE
    assert flags["--listen"] == "0.0.0.0:9464"
    # cycles every 5 s, the fault events read alone every second between them
    assert (flags["--interval"], flags["--fault-read-interval"]) == ("5", "1")
    assert "--no-leader-election" not in command and "--dry-run" not in command
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert named(docs, "PodDisruptionBudget", "gridloop-health")["spec"]["minAvailable"] == 1
    assert named(docs, "Service", "gridloop-health")["spec"]["ports"][0]["port"] == 9464


def _health_flags(docs: list[Doc]) -> dict[str, str]:
    command = named(docs, "Deployment", "gridloop-health")["spec"]["template"]["spec"][
        "containers"
    ][0]["command"]
    return dict(zip(command[3::2], command[4::2], strict=False))


@needs_helm
def test_the_health_service_reads_the_series_of_the_exporter_the_charts_servicemonitor_scrapes(
    render: Render,
) -> None:
    """Job and namespace: the namespace label is what the chart's ServiceMonitor gives its
    targets, so a scrape config a tenant writes with the same job name is not read."""
    flags = _health_flags(render())
    assert (flags["--exporter-job"], flags["--exporter-namespace"]) == ("dcgm-exporter", NAMESPACE)
    moved = render(sets=("dcgmExporter.serviceMonitor.namespace=gpu-operator",))
    assert _health_flags(moved)["--exporter-namespace"] == "gpu-operator"
    # no ServiceMonitor: whoever scrapes the exporter names the namespace, if any
    unscraped = _health_flags(render(sets=("monitoring.enabled=false",)))
    assert "--exporter-namespace" not in unscraped
    assert unscraped["--exporter-job"] == "dcgm-exporter"


@needs_helm
def test_health_reads_prometheus_with_the_tls_files_and_token_it_is_given(
    render: Render, render_error: Callable[..., str]
) -> None:
    """Secrets mounted where the flags say; a projected token for an audience instead of a
    Secret's; both at once refused naming the field."""
    sets = (
        "health.prometheus.caSecret=prom-ca",
        "health.prometheus.clientCertSecret=prom-client",
        "health.prometheus.token.secret=prom-token",
        "health.prometheus.token.key=bearer",
    )
    docs = render(sets=sets)
    spec = named(docs, "Deployment", "gridloop-health")["spec"]["template"]["spec"]
    flags = _health_flags(docs)
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}

    assert flags["--prometheus-ca-file"] == mounts["prometheus-ca"] + "/ca.crt"
    assert flags["--prometheus-cert-file"] == mounts["prometheus-client"] + "/tls.crt"
    assert flags["--prometheus-key-file"] == mounts["prometheus-client"] + "/tls.key"
    assert flags["--prometheus-token-file"] == mounts["prometheus-token"] + "/token"
    assert volumes["prometheus-ca"]["secret"]["secretName"] == "prom-ca"
    assert volumes["prometheus-token"]["secret"] == {
        "secretName": "prom-token",
        "items": [{"key": "bearer", "path": "token"}],
    }

    projected = render(sets=("health.prometheus.token.serviceAccountAudience=prometheus",))
    spec = named(projected, "Deployment", "gridloop-health")["spec"]["template"]["spec"]
    (token,) = [v for v in spec["volumes"] if v["name"] == "prometheus-token"]
    assert token["projected"]["sources"] == [
        {
            "serviceAccountToken": {
                "audience": "prometheus",
                "expirationSeconds": 3600,
                "path": "token",
            }
        }
    ]
    assert "--prometheus-ca-file" not in _health_flags(projected)
    assert not any(
        f.startswith("--prometheus-") and f != "--prometheus-url" for f in _health_flags(render())
    )

    both = render_error(
        sets=(
            "health.prometheus.token.secret=t",
            "health.prometheus.token.serviceAccountAudience=a",
        )
    )
    assert (
        "health.prometheus.token: secret and serviceAccountAudience are two sources of one "
        "token: set one" in both
    )


def rule_grants(rules: list[Doc]) -> set[tuple[str, str, str, str]]:
    return {
        (group, resource, verb, ",".join(rule.get("resourceNames", [])))
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


@needs_helm
def test_health_rbac_grants_exactly_what_the_service_calls(render: Render) -> None:
    docs = render()
    cluster = named(docs, "ClusterRole", "gridloop-health")
    assert rule_grants(cluster["rules"]) == {
        ("", "nodes", "get", ""),
        ("", "nodes", "list", ""),
        ("", "nodes", "watch", ""),
        ("", "nodes", "patch", ""),
        ("", "pods", "list", ""),
        ("", "pods/eviction", "create", ""),
        ("", "events", "create", ""),
        ("kueue.x-k8s.io", "resourceflavors", "list", ""),
        ("kueue.x-k8s.io", "clusterqueues", "get", ""),
        ("kueue.x-k8s.io", "clusterqueues", "list", ""),
        ("kueue.x-k8s.io", "clusterqueues", "patch", ""),
    }
    role = named(docs, "Role", "gridloop-health")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert rule_grants(role["rules"]) == {
        ("coordination.k8s.io", "leases", "create", ""),
        ("coordination.k8s.io", "leases", "get", "gridloop-health"),
        ("coordination.k8s.io", "leases", "update", "gridloop-health"),
        ("", "configmaps", "create", ""),
        ("", "configmaps", "get", "gridloop-health-status"),
        ("", "configmaps", "patch", "gridloop-health-status"),
    }
    account = "gridloop-health"
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        binding = named(docs, kind, "gridloop-health")
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
        ]


def test_the_health_account_may_change_on_a_node_only_what_the_service_owns(
    render: Render,
) -> None:
    """RBAC grants patch on whole nodes; the policy narrows it to the service's own fields
    (tests/cluster/test_health_in_cluster.py runs it on the API server)."""
    docs = render()
    policy = named(docs, "ValidatingAdmissionPolicy", "gridloop-health-node-fields")["spec"]
    binding = named(docs, "ValidatingAdmissionPolicyBinding", "gridloop-health-node-fields")
    assert binding["spec"] == {
        "policyName": "gridloop-health-node-fields",
        "validationActions": ["Deny"],
    }
    assert policy["failurePolicy"] == "Fail"
    assert policy["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]}
    ]
    (condition,) = policy["matchConditions"]
    assert condition["expression"] == (
        f'request.userInfo.username == "system:serviceaccount:{NAMESPACE}:gridloop-health"'
    )
    owned = {v["name"]: v["expression"] for v in policy["variables"]}
    assert (owned["taint"], owned["label"], owned["prefix"]) == (
        f'"{names.QUARANTINE_TAINT_KEY}"',
        f'"{names.HEALTH_STATE_LABEL}"',
        f'"{names.HEALTH_ANNOTATION_PREFIX}"',
    )
    assert len(policy["validations"]) == 4


# --- secure defaults ---


def pod_templates(docs: list[Doc]) -> Iterator[tuple[str, Doc]]:
    for doc in docs:
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        if doc["kind"] in WORKLOAD_KINDS:
            yield where, doc["spec"]["template"]
        elif doc["kind"] == "Workspace":
            yield where, doc["inference"]["template"]
        elif doc["kind"] == "SandboxTemplate":
            yield where, doc["spec"]["podTemplate"]


@needs_helm
def test_every_gridloop_container_is_locked_down(render: Render) -> None:
    docs = render(EVERYTHING)
    templates = list(pod_templates(docs))
    assert {w.split("/")[0] for w, _ in templates} == {"Deployment", "Workspace", "SandboxTemplate"}
    for where, template in templates:
        pod = template["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        for container in pod["containers"] + pod.get("initContainers", []):
            sc = container["securityContext"]
            assert sc["runAsNonRoot"] is True, where
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["capabilities"] == {"drop": ["ALL"]}, where
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, where
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(container["resources"][kind]), where


@needs_helm
def test_workloads_select_only_their_own_pods(render: Render) -> None:
    docs = render(EVERYTHING)
    selectors = []
    for deployment in of_kind(docs, "Deployment"):
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert set(selector) == {"app.kubernetes.io/name", "app.kubernetes.io/instance"}
        namespace = deployment["metadata"].get("namespace", "")
        selectors.append((namespace, *sorted(selector.items())))
    assert len(selectors) == len(set(selectors))


@needs_helm
def test_object_names_fit_in_63_characters(render: Render) -> None:
    long_release = "a-very-long-release-name-for-a-gpu-platform-that-goes-on-and-on"
    docs = render(EVERYTHING, sets=(f"fullnameOverride={long_release}-gridloop",))
    for doc in docs:
        assert len(doc["metadata"]["name"]) <= 63, doc["metadata"]["name"]


# --- sandboxes and admission policies ---


@needs_helm
def test_sandbox_namespaces_are_isolated(render: Render) -> None:
    docs = render(EVERYTHING)
    assert named(docs, "RuntimeClass", "gvisor")["handler"] == "runsc"
    assert named(docs, "RuntimeClass", "kata")["handler"] == "kata-qemu"
    for ns in ("agents", "agents-eval"):
        assert named(docs, "Namespace", ns)["metadata"]["labels"]["gridloop.io/sandbox"] == "true"
        policies = {
            p["metadata"]["name"]: p["spec"]
            for p in of_kind(docs, "NetworkPolicy")
            if p["metadata"]["namespace"] == ns
        }
        assert set(policies) == {"gridloop-sandbox-egress", "gridloop-sandbox-ingress"}
        egress = policies["gridloop-sandbox-egress"]
        assert egress["policyTypes"] == ["Egress"]
        assert egress["podSelector"] == {}, "every pod in the namespace: the router is not here"
        # agentSandbox.network.egress none, the default: no rule at all, and no empty list
        # (the API server drops one, so every install would see a change)
        assert "egress" not in egress
        # sandboxes take connections from the router's pods in the router's namespace only
        # (a pod labelled app=sandbox-router anywhere else is not let in), on the runtime's port
        ingress = policies["gridloop-sandbox-ingress"]
        assert ingress["podSelector"] == {"matchLabels": {"app.kubernetes.io/component": "sandbox"}}
        assert ingress["ingress"] == [
            {
                "from": [
                    {
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": "sandbox-router"}
                        },
                        "podSelector": {"matchLabels": {"app": "sandbox-router"}},
                    }
                ],
                "ports": [{"protocol": "TCP", "port": 8888}],
            }
        ]
        assert not [s for s in of_kind(docs, "Service") if s["metadata"]["namespace"] == ns]
        assert not [d for d in of_kind(docs, "Deployment") if d["metadata"]["namespace"] == ns]
        template = [t for t in of_kind(docs, "SandboxTemplate") if t["metadata"]["namespace"] == ns]
        assert template[0]["spec"]["podTemplate"]["spec"]["runtimeClassName"] == "gvisor"
        pool = [p for p in of_kind(docs, "SandboxWarmPool") if p["metadata"]["namespace"] == ns]
        assert pool[0]["spec"]["sandboxTemplateRef"] == {"name": "default"}
        # v1.0.3: a Service per sandbox, and no NetworkPolicy of agent-sandbox's own
        assert template[0]["spec"]["service"] is True
        assert template[0]["spec"]["networkPolicyManagement"] == "Unmanaged"


@needs_helm
def test_the_router_lives_in_its_own_namespace_and_takes_only_scoped_tokens(
    render: Render,
) -> None:
    docs = render(EVERYTHING)
    ns = named(docs, "Namespace", "sandbox-router")["metadata"]["labels"]
    assert "gridloop.io/sandbox" not in ns, "not a sandbox namespace"
    assert ns["pod-security.kubernetes.io/enforce"] == "restricted"
    in_router_ns = [d for d in docs if d["metadata"].get("namespace") == "sandbox-router"]
    assert {(d["kind"], d["metadata"]["name"]) for d in in_router_ns} >= {
        ("Deployment", "sandbox-router"),
        ("Service", "sandbox-router-svc"),
        ("NetworkPolicy", "gridloop-sandbox-router"),
        ("Deployment", "sandbox-token-issuer"),
        ("ServiceAccount", "sandbox-token-issuer"),
    }
    router = named(docs, "Deployment", "sandbox-router")["spec"]["template"]["spec"]
    (container,) = router["containers"]
    assert container["image"] == "registry.k8s.io/agent-sandbox/sandbox-router-go:v1.0.3"
    assert "--authz-mode=scoped-token" in container["args"]
    assert "--authz-scoped-token-secret-file=/var/run/gridloop/router-key/key" in container["args"]
    assert "--max-request-body-bytes=67108864" in container["args"]
    assert router["automountServiceAccountToken"] is False, "it reads nothing from the API"
    assert router["volumes"] == [
        {"name": "key", "secret": {"secretName": "sandbox-router-key", "defaultMode": 0o400}}
    ]
    # it may reach the sandboxes' runtime port (in sandbox namespaces) and DNS, nothing else
    policy = named(docs, "NetworkPolicy", "gridloop-sandbox-router")["spec"]
    assert policy["egress"][0] == {
        "to": [
            {
                "namespaceSelector": {"matchLabels": {"gridloop.io/sandbox": "true"}},
                "podSelector": {"matchLabels": {"app.kubernetes.io/component": "sandbox"}},
            }
        ],
        "ports": [{"protocol": "TCP", "port": 8888}],
    }
    assert [p["port"] for p in policy["egress"][1]["ports"]] == [53, 53]
    assert len(policy["egress"]) == 2
    # the issuer: claims and their Secrets in each sandbox namespace, the key in its own
    issuer = named(docs, "Deployment", "sandbox-token-issuer")["spec"]["template"]["spec"]
    command = issuer["containers"][0]["command"]
    assert command[:3] == ["gridloop", "sandboxes", "issue-tokens"]
    assert command[command.index("--sandbox-namespaces") + 1] == "agents,agents-eval"
    roles = {
        (r["metadata"]["namespace"], r["metadata"]["name"]): r["rules"]
        for r in of_kind(docs, "Role")
        if r["metadata"]["name"] == "sandbox-token-issuer"
    }
    assert set(roles) == {
        ("sandbox-router", "sandbox-token-issuer"),
        ("agents", "sandbox-token-issuer"),
        ("agents-eval", "sandbox-token-issuer"),
    }
    own = roles[("sandbox-router", "sandbox-token-issuer")]
    assert {"resources": ["secrets"], "resourceNames": ["sandbox-router-key"], "verbs": ["get"],
            "apiGroups": [""]} in own  # fmt: skip
    assert all("list" not in r["verbs"] for r in own), "it lists no Secret of its namespace"


@needs_helm
def test_a_router_namespace_that_is_a_sandbox_namespace_is_refused(render_error) -> None:
    error = render_error(EVERYTHING, sets=("agentSandbox.router.namespace=agents",))
    assert 'agentSandbox.router.namespace "agents" is also in agentSandbox.namespaces' in error


def _sandbox_egress(render: Render, mode: str) -> list[dict[str, Any]]:
    docs = render(EVERYTHING, sets=(f"agentSandbox.network.egress={mode}",))
    (policy,) = [
        p
        for p in of_kind(docs, "NetworkPolicy")
        if p["metadata"]["name"] == "gridloop-sandbox-egress"
        and p["metadata"]["namespace"] == "agents"
    ]
    return list(policy["spec"].get("egress", []))


@needs_helm
def test_sandbox_egress_is_nothing_dns_or_dns_and_the_internet_as_the_value_says(
    render: Render,
) -> None:
    assert _sandbox_egress(render, "none") == [], "no rule: nothing leaves"
    dns = _sandbox_egress(render, "dns")
    assert [p["port"] for rule in dns for p in rule["ports"]] == [53, 53]
    assert dns[0]["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    internet = _sandbox_egress(render, "internet")
    assert internet[0] == dns[0]
    block = internet[1]["to"][0]["ipBlock"]
    assert block["cidr"] == "0.0.0.0/0"
    assert "169.254.0.0/16" in block["except"] and "10.0.0.0/8" in block["except"]
    assert len(internet) == 2


@needs_helm
def test_an_egress_mode_not_known_is_refused_naming_the_field(render_error) -> None:
    error = render_error(EVERYTHING, sets=("agentSandbox.network.egress=open",))
    assert "/agentSandbox/network/egress': value must be one of 'none', 'dns', 'internet'" in error


@needs_helm
def test_sandbox_policy_allows_gvisor_and_kata_and_checks_each_escape(render: Render) -> None:
    docs = render(EVERYTHING)
    policy = named(docs, "ValidatingAdmissionPolicy", "gridloop-sandbox-isolation")
    validations = policy["spec"]["validations"]
    allowed = re.search(r"runtimeClassName in (\[.*\])", validations[0]["expression"])
    assert allowed is not None and json.loads(allowed.group(1)) == ["gvisor", "kata"]
    messages = " | ".join(v["message"] for v in validations)
    for escape in (
        "runtimeClassName",
        "privileged",
        "hostNetwork",
        "hostPID",
        "hostIPC",
        "hostPath",
        "capabilities",
    ):
        assert escape in messages
    assert len(validations) == 7
    selector = policy["spec"]["matchConstraints"]["namespaceSelector"]
    assert selector == {"matchLabels": {"gridloop.io/sandbox": "true"}}


@needs_helm
def test_gpu_job_policy_names_the_queue_label(render: Render) -> None:
    docs = render()
    policy = named(docs, "ValidatingAdmissionPolicy", "gridloop-gpu-jobs-queued")
    messages = [v.get("message") or v["messageExpression"] for v in policy["spec"]["validations"]]
    assert messages[:2] == [
        "GPU jobs in team namespaces must name a Kueue LocalQueue: set label "
        "kueue.x-k8s.io/queue-name",
        # Ray work queues on the container nodes' CPU flavor too: always through a queue
        "Ray jobs and clusters in team namespaces must name a Kueue LocalQueue: set label "
        "kueue.x-k8s.io/queue-name",
    ]
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]} == {
        ("", "pods"),
        ("", "replicationcontrollers"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
        ("apps", "deployments"),
        ("apps", "statefulsets"),
        ("apps", "replicasets"),
        ("apps", "daemonsets"),
        ("ray.io", "rayjobs"),
        ("ray.io", "rayclusters"),
    }
    # an ownerReference exempts nothing: anyone can write one
    assert "matchConditions" not in policy["spec"]
    # the chart's teams by their namespace's name, a label only the API server sets
    by_name = named(docs, "ValidatingAdmissionPolicyBinding", "gridloop-gpu-jobs-queued")
    assert by_name["spec"]["validationActions"] == ["Deny"]
    teams = {"key": "kubernetes.io/metadata.name", "values": ["team-default"]}
    assert by_name["spec"]["matchResources"]["namespaceSelector"] == {
        "matchExpressions": [{**teams, "operator": "In"}]
    }
    # any other namespace labelled as a team's: one binding per namespace
    labelled = named(docs, "ValidatingAdmissionPolicyBinding", "gridloop-gpu-jobs-queued-labelled")
    assert labelled["spec"]["matchResources"]["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "gridloop.io/team", "operator": "Exists"},
            {**teams, "operator": "NotIn"},
        ]
    }


@needs_helm
def test_gpu_pods_come_only_from_the_listed_creators(render: Render) -> None:
    def pod_rule(docs: list[Doc]) -> Doc:
        policy = named(docs, "ValidatingAdmissionPolicy", "gridloop-gpu-jobs-queued")
        (rule,) = [v for v in policy["spec"]["validations"] if "GPU pods" in v.get("message", "")]
        return rule

    # minimal: no KubeRay of the chart's (test_chart_commands.py checks the local profile's)
    rule = pod_rule(render())
    assert rule["message"] == (
        "GPU pods in team namespaces may not be created directly: only "
        "system:serviceaccount:kube-system:job-controller create them, for a queued Job or "
        "Ray cluster (policies.gpuPodCreators)"
    )
    assert "variables.queued" not in rule["expression"]  # Kueue's pod integration is off
    # with Kueue's pod and Deployment integrations, a queued pod or Deployment passes
    docs = render(sets=("kueue.integrations={batch/job,pod,deployment}",))
    assert "|| variables.queued" in pod_rule(docs)["expression"]
    policy = named(docs, "ValidatingAdmissionPolicy", "gridloop-gpu-jobs-queued")
    expressions = [v["expression"] for v in policy["spec"]["validations"]]
    assert any('["Deployment"]' in e and "variables.queued" in e for e in expressions)
    assert any(
        '["ReplicaSet","DaemonSet","ReplicationController","StatefulSet"]' in e for e in expressions
    )


# --- metrics, alerts, dashboards ---


@needs_helm
def test_dcgm_counters_cover_every_metric_the_simulator_serves(render: Render) -> None:
    docs = render()
    csv = named(docs, "ConfigMap", "gridloop-dcgm-counters")["data"]["counters.csv"]
    rows = [
        [part.strip() for part in line.split(",", 2)]
        for line in csv.splitlines()
        if line.strip() and not line.startswith("#")
    ]
    exported = {name: kind for name, kind, _help in rows}
    for name, (kind, _help) in METRICS.items():
        assert exported.get(name) == kind, name


HEALTH_FIELDS = {
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_ROW_REMAP_PENDING",
    "DCGM_FI_DEV_RETIRED_SBE",
    "DCGM_FI_DEV_RETIRED_DBE",
    "DCGM_FI_DEV_RETIRED_PENDING",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_POWER_VIOLATION",
    "DCGM_FI_DEV_THERMAL_VIOLATION",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
}


@needs_helm
def test_dcgm_counters_hold_every_health_field_and_all_the_health_service_queries(
    render: Render,
) -> None:
    csv = named(render(), "ConfigMap", "gridloop-dcgm-counters")["data"]["counters.csv"]
    exported = {line.split(",")[0] for line in csv.splitlines() if line.startswith("DCGM_FI_")}
    asked = queries(load_policy(POLICY), "dcgm-exporter")
    queried = {m for q in asked.values() for m in re.findall(r"DCGM_FI_[A-Z0-9_]+", q)}
    assert queried and queried <= exported
    assert exported >= HEALTH_FIELDS


@needs_helm
def test_gpu_series_get_node_site_and_pool_from_the_node(render: Render) -> None:
    docs = render(EVERYTHING)
    monitor = named(docs, "ServiceMonitor", "gridloop-dcgm-exporter")
    assert monitor["spec"]["attachMetadata"] == {"node": True}
    (endpoint,) = monitor["spec"]["endpoints"]
    copied = {
        r["targetLabel"]: r.get("sourceLabels", [r.get("replacement")])[0]
        for r in endpoint["relabelings"]
    }
    assert copied == {
        "job": "dcgm-exporter",
        "node": "__meta_kubernetes_pod_node_name",
        "site": "__meta_kubernetes_node_label_gridloop_io_site",
        "pool": "__meta_kubernetes_node_label_gridloop_io_pool",
    }


def test_kueue_integrations_default_to_what_the_local_clusters_kueue_runs() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert tuple(values["kueue"]["integrations"]) == source_for("kueue").kueue_frameworks


@needs_helm
def test_monitoring_objects_carry_the_prometheus_selector_labels(render: Render) -> None:
    docs = render(EVERYTHING, sets=("monitoring.labels.release=prom",))
    monitors = [d for d in docs if d["kind"] in ("ServiceMonitor", "PodMonitor", "PrometheusRule")]
    assert {d["kind"] for d in monitors} == {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    for doc in monitors:
        assert doc["metadata"]["labels"]["release"] == "prom", doc["metadata"]["name"]


def alerts(docs: list[Doc]) -> dict[str, Doc]:
    return {
        rule["alert"]: rule
        for doc in of_kind(docs, "PrometheusRule")
        for group in doc["spec"]["groups"]
        for rule in group["rules"]
    }


@needs_helm
def test_xid_alert_covers_the_policy_quarantine_class(render: Render, tmp_path: Path) -> None:
    quarantine = yaml.safe_load(POLICY.read_text())["spec"]["xid"]["quarantine"]
    expr = alerts(render())["GpuXidQuarantineClass"]["expr"]
    assert {int(c) for c in re.findall(r"== (\d+)", expr)} == set(quarantine)

    policy = yaml.safe_load(POLICY.read_text())
    policy["spec"]["xid"]["overrides"] = {79: "ignore", 13: "quarantine"}
    overridden = values_file(tmp_path, {"health": {"policy": yaml.safe_dump(policy)}})
    expr = alerts(render(overridden))["GpuXidQuarantineClass"]["expr"]
    assert {int(c) for c in re.findall(r"== (\d+)", expr)} == (set(quarantine) - {79}) | {13}


@needs_helm
def test_health_service_alerts_fire_when_it_is_stuck(render: Render) -> None:
    rules = alerts(render())
    assert "gridloop_health_cycle_seconds_count" in rules["GridloopHealthNoCycle"]["expr"]
    assert (
        rules["GridloopHealthBreakerTripped"]["expr"] == "max(gridloop_health_breaker_tripped) == 1"
    )
    assert rules["GridloopHealthHolding"]["for"] == "10m"
    assert 'up{job="dcgm-exporter"}' in rules["DcgmExporterDown"]["expr"]
    assert {"GpuEccDoubleBitErrors", "GpuRowRemapFailure"} <= set(rules)


@needs_helm
def test_dashboards_become_sidecar_configmaps(render: Render) -> None:
    docs = render()
    boards = [
        d for d in of_kind(docs, "ConfigMap") if "grafana_dashboard" in d["metadata"]["labels"]
    ]
    files = sorted((CHART / "dashboards").glob("*.json"))
    assert len(boards) == len(files) == 5
    board = named(docs, "ConfigMap", "gridloop-dashboard-gpu-fleet-health")
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert board["metadata"]["annotations"]["grafana_folder"] == "gridloop"
    text = board["data"]["gpu-fleet-health.json"]
    assert text == (CHART / "dashboards" / "gpu-fleet-health.json").read_text().rstrip("\n")
    dashboard = json.loads(text)
    assert dashboard["uid"] == "gridloop-gpu-fleet-health"
    assert "do not edit" in dashboard["__generated"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert {"site", "pool", "node"} <= set(variables)
    assert not re.search(r"TODO|FIXME|XXX|placeholder", text, re.I)


# --- the values file itself ---


def test_every_values_key_has_a_comment_above_it() -> None:
    uncommented = []
    lines = (CHART / "values.yaml").read_text().splitlines()
    key = re.compile(r"^\s*(- )?[\"']?[A-Za-z0-9_./-]+[\"']?:( |$)")
    for n, line in enumerate(lines):
        if not key.match(line) or line.lstrip().startswith("#"):
            continue
        above = lines[n - 1].strip() if n else ""
        if not above.startswith("#"):
            uncommented.append(f"{n + 1}: {line.strip()}")
    assert uncommented == []


@needs_helm
def test_inline_credentials_are_refused_whatever_their_value(
    render_error: Callable[..., str], tmp_path: Path
) -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    model = schema["properties"]["inference"]["properties"]["models"]["items"]
    (sneaky,) = model["properties"]["token"]["enum"]  # the one value the schema lets through
    values = {"inference": {"models": [{**A_MODEL, "token": sneaky}]}}
    error = render_error(values_file(tmp_path, values))
    assert "inference.models[0]: token: inline credentials are refused" in error


# --- NOTES.txt ---


@pytest.fixture
def notes(helm: list[str]) -> Callable[..., str]:
    """notes(*values_files, sets=(...)) -> NOTES.txt as `helm install --dry-run=client` shows it."""

    def go(*files: Path, sets: tuple[str, ...] = ()) -> str:
        args = template_args(CHART, (MINIMAL, *files), sets)
        args[0] = "install"
        result = run_helm(helm, *args, "--dry-run=client")
        assert result.returncode == 0, result.stderr
        return result.stdout.split("NOTES:", 1)[1]

    return go


@needs_helm
def test_notes_warn_about_nothing_with_safe_defaults(notes: Callable[..., str]) -> None:
    text = notes(EVERYTHING)
    assert "WARNING" not in text
    assert "http://llama-8b.gridloop-system.svc:8000/v1" in text


@needs_helm
def test_notes_warn_about_unsafe_settings(notes: Callable[..., str], tmp_path: Path) -> None:
    policy = yaml.safe_load(POLICY.read_text())
    policy["spec"]["limits"]["fleet"]["maxPercent"] = 80
    unsafe = {
        "health": {"dryRun": True, "policy": yaml.safe_dump(policy)},
        "agentSandbox": {
            "template": {"runtimeClassName": "runc"},
            "allowedRuntimeClasses": ["runc"],
        },
    }
    text = notes(EVERYTHING, values_file(tmp_path, unsafe))
    warnings = [line for line in text.splitlines() if line.startswith("WARNING:")]
    assert len(warnings) == 3, warnings
    assert "DRY-RUN" in warnings[0]
    assert "circuit breaker is wide open (fleet maxPercent 80" in warnings[1]
    assert "do not run under gVisor" in warnings[2]


@needs_helm
def test_notes_warn_that_nothing_scrapes_only_when_nothing_does(
    notes: Callable[..., str], tmp_path: Path
) -> None:
    off = values_file(tmp_path, {"monitoring": {"enabled": False}})
    [warning] = [line for line in notes(EVERYTHING, off).splitlines() if "WARNING" in line]
    assert "monitoring.scrapedBy names nothing else: nothing scrapes the DCGM exporter" in warning

    # the local profile's own Prometheus scrapes the exporters: said, not warned about
    # (its monitoring values alone: the whole profile wants the bundle's upstream parts)
    local = yaml.safe_load((PROFILES / "local.yaml").read_text())["monitoring"]
    text = notes(EVERYTHING, values_file(tmp_path, {"monitoring": local}))
    assert "nothing scrapes" not in text
    assert (
        "Monitoring objects are off (monitoring.enabled=false): the local cluster's own "
        "Prometheus (`gridloop local up`) scrapes the DCGM exporters and the health service"
    ) in text

"""The loop's decisions: the next revision, the chart values for a candidate and a
rollout, promotion by margin, the training RayJob's objects, and the summary."""

from __future__ import annotations

import pytest

from gridloop import versions
from gridloop.loop import deciding, training_job
from gridloop.loop.deciding import IterationRecord, ValuesError
from gridloop.loop.trajectories import PassRate

VALUES = {
    "agentSandbox": {"enabled": True},
    "inference": {
        "image": "ghcr.io/gridloop/vllm-cpu:0.32.0",
        "models": [
            {"name": "other", "uri": "s3://models/other", "revision": "v9", "replicas": 2},
            {"name": "tiny", "uri": "s3://models/tiny", "revision": "r1", "replicas": 3},
        ],
    },
}


def test_a_candidate_is_the_models_entry_at_the_new_revision_beside_the_serving_one() -> None:
    out = deciding.with_candidate(VALUES, "tiny", "demo-1")

    names = [(m["name"], m["revision"], m["replicas"]) for m in out["inference"]["models"]]
    assert names == [("other", "v9", 2), ("tiny", "r1", 3), ("tiny-candidate", "demo-1", 1)]
    assert out["inference"]["models"][2]["uri"] == "s3://models/tiny"
    assert out["agentSandbox"] == VALUES["agentSandbox"]
    assert VALUES["inference"]["models"][1]["revision"] == "r1"  # the input is not changed
    again = deciding.with_candidate(out, "tiny", "demo-2")
    assert [m["name"] for m in again["inference"]["models"]].count("tiny-candidate") == 1


def test_a_rollout_moves_the_model_and_drops_the_candidate_and_a_refusal_only_drops_it() -> None:
    with_candidate = deciding.with_candidate(VALUES, "tiny", "demo-1")

    rolled = deciding.without_candidate(with_candidate, "tiny", "demo-1")
    kept = deciding.without_candidate(with_candidate, "tiny")

    assert [(m["name"], m["revision"]) for m in rolled["inference"]["models"]] == [
        ("other", "v9"),
        ("tiny", "demo-1"),
    ]
    assert kept["inference"]["models"] == VALUES["inference"]["models"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({}, "inference.models: the release serves no models"),
        (
            {"inference": {"models": [{"name": "big"}]}},
            r"no model named 'tiny' \(there: \['big'\]\)",
        ),
    ],
)
def test_a_release_without_the_model_is_named(values: dict, message: str) -> None:
    with pytest.raises(ValuesError, match=message):
        deciding.with_candidate(values, "tiny", "demo-1")


def test_revisions_are_named_after_the_run_and_live_beside_the_served_one() -> None:
    assert deciding.revision_name("s3://models/tiny/r1/") == "r1"
    assert deciding.sibling_uri("s3://models/tiny/r1/", "demo-2") == "s3://models/tiny/demo-2/"
    assert deciding.next_revision("demo", 2) == "demo-2"


def rate(passed: int, attempts: int) -> PassRate:
    return PassRate(attempts, passed, attempts, passed)


def test_a_candidate_rolls_out_only_when_it_beats_the_served_one_by_the_margin() -> None:
    assert deciding.decide(rate(25, 100), rate(31, 100), 0.05).promote
    held = deciding.decide(rate(25, 100), rate(28, 100), 0.05)
    assert not held.promote
    assert held.reason == ("held-out pass@1 28.0% against 25.0% (+3.0%): under the margin of 5.0%")
    assert not deciding.decide(rate(0, 0), rate(3, 4), 0.0).promote


def job() -> training_job.TrainingJob:
    return training_job.TrainingJob(
        run="demo", iteration=2, namespace="team-default", queue="default",
        trajectories_uri="s3://loop/demo/iteration-2/collect/",
        base_uri="s3://models/tiny/demo-1/", output_uri="s3://models/tiny/demo-2/",
        endpoint="http://object-store.object-store.svc.cluster.local:9000", secret="models-s3",
    )  # fmt: skip


def test_the_training_rayjob_is_queued_on_the_cpu_pool_with_the_trainer_image() -> None:
    doc = training_job.ray_job(job())

    assert doc["metadata"]["name"] == "loop-demo-2"
    assert doc["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    spec = doc["spec"]
    assert spec["shutdownAfterJobFinishes"] is True
    assert spec["entrypoint"] == "python /home/ray/loop/train_revision.py"
    cluster = spec["rayClusterSpec"]
    assert cluster["rayVersion"] == versions.get("ray").version
    pods = [cluster["headGroupSpec"]["template"], cluster["workerGroupSpecs"][0]["template"]]
    for pod in [*pods, spec["submitterPodTemplate"]]:
        assert pod["spec"]["nodeSelector"] == {"gridloop.io/pool": "system"}
    for pod in pods:
        (container,) = pod["spec"]["containers"]
        assert container["image"] == versions.get("trainer").image_ref
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["TRAJECTORIES_URI"] == "s3://loop/demo/iteration-2/collect/"
        assert env["OUTPUT_URI"] == "s3://models/tiny/demo-2/"
        assert container["envFrom"] == [{"secretRef": {"name": "models-s3"}}]
    (submitter,) = spec["submitterPodTemplate"]["spec"]["containers"]
    assert submitter["image"] == versions.get("ray").image_ref


def test_the_training_rayjobs_head_wants_a_token_and_its_pods_run_unprivileged() -> None:
    spec = training_job.ray_job(job())["spec"]
    cluster = spec["rayClusterSpec"]

    assert cluster["authOptions"] == {"mode": "token"}
    pods = [cluster["headGroupSpec"]["template"], cluster["workerGroupSpecs"][0]["template"]]
    for pod in [*pods, spec["submitterPodTemplate"]]:
        assert pod["spec"]["automountServiceAccountToken"] is False
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        (container,) = pod["spec"]["containers"]
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        }


def test_the_program_ships_in_the_jobs_config_map() -> None:
    cm = training_job.config_map(job())
    assert cm["metadata"]["name"] == "loop-demo-2"
    assert "TRAJECTORIES_URI" in cm["data"]["train_revision.py"]


def test_the_summary_has_a_row_per_iteration_with_the_reason_of_a_kept_revision() -> None:
    records = [
        IterationRecord(1, "r1", 40, 0.25, 0.22, "demo-1", 0.31, "promoted", "...", "demo-1",
                        {"collect": 30.0, "train": 120.4}),
        IterationRecord(2, "demo-1", 40, 0.4, 0.31, "demo-2", 0.3, "kept", "under the margin",
                        "demo-1"),
    ]  # fmt: skip
    table = deciding.summary_table(records).splitlines()

    assert len(table) == 4
    assert table[2].startswith(
        "| 1 | r1 | 40 | 25.0% | 22.0% | demo-1 | 31.0% | promoted | demo-1 | 30 | - | 120 |"
    )
    assert "| kept: under the margin | demo-1 |" in table[3]
    assert IterationRecord.from_json(records[0].to_json()) == records[0]


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--workers", "0"], "error: --workers: must be at least 1, got 0"),
        (["--run", "Demo_1"], "error: --run: 'Demo_1' must be 1 to 40 lower-case letters"),
        (["--margin", "1.5"], "error: --margin: must be from 0 to 1 (a share), got 1.5"),
        (["--candidate-timeout", "0"], "error: --candidate-timeout: must be a number of seconds"),
        (["--temperature", "3"], "error: --temperature: must be from 0 to 2, got 3.0"),
    ],
)
def test_a_bad_flag_is_named_in_one_line_before_anything_is_reached(
    flags: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from gridloop.cli import main

    # no cluster, no object store: the flags are refused before either is asked
    assert main(["loop", "run", *flags]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(line) and "\n" not in err, err

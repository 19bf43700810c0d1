"""Which revision of a model serves and why a new one is stuck, read from the objects the
API server returns for a Deployment, its ReplicaSets and their pods."""

from __future__ import annotations

from gridloop.models import rollouts

UID = "d-uid"
WEIGHTS = "s3://models/tiny/{}/"
# vLLM 0.32's own words when the streamer found no files under the folder
NO_FILES = (
    "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
    "  Value error, Invalid repository ID or local directory specified: "
    "'/home/vllm/.cache/vllm/assets/model_streamer/8de217c7'.\n"
)


def deployment(number: int, progress_deadline: bool = False) -> dict:
    conditions = []
    if progress_deadline:
        conditions.append(
            {
                "type": "Progressing",
                "status": "False",
                "reason": "ProgressDeadlineExceeded",
                "message": 'ReplicaSet "tiny-b" has timed out progressing.',
            }
        )
    return {
        "metadata": {
            "name": "tiny",
            "namespace": "gridloop-system",
            "uid": UID,
            "annotations": {rollouts.DEPLOYMENT_REVISION: str(number)},
        },
        "spec": {"template": {"metadata": {"labels": {rollouts.MODEL: "tiny"}}}},
        "status": {"conditions": conditions},
    }


def replica_set(revision: str, number: int, replicas: int, ready: int, owner: str = UID) -> dict:
    return {
        "metadata": {
            "name": f"tiny-{revision}",
            "namespace": "gridloop-system",
            "labels": {rollouts.HASH: f"h-{revision}", rollouts.MODEL: "tiny"},
            "annotations": {rollouts.DEPLOYMENT_REVISION: str(number)},
            "ownerReferences": [{"kind": "Deployment", "name": "tiny", "uid": owner}],
        },
        "spec": {
            "replicas": replicas,
            "template": {
                "metadata": {"annotations": {rollouts.REVISION: revision}},
                "spec": {
                    "containers": [{"name": "vllm", "args": [WEIGHTS.format(revision), "--x"]}]
                },
            },
        },
        "status": {"readyReplicas": ready} if ready else {},
    }


def pod(revision: str, **status: object) -> dict:
    return {"metadata": {"labels": {rollouts.HASH: f"h-{revision}"}}, "status": status}


def crashing(message: str, restarts: int = 3) -> dict:
    return {
        "containerStatuses": [
            {
                "name": "vllm",
                "restartCount": restarts,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
                "lastState": {"terminated": {"exitCode": 1, "message": message}},
            }
        ]
    }


def test_a_finished_roll_has_one_revision_serving_and_nothing_to_say():
    r = rollouts.rollout(
        deployment(2), [replica_set("r1", 1, 0, 0), replica_set("r2", 2, 2, 2)], [pod("r2")]
    )
    assert r.done
    assert r.wanted is not None and r.wanted.name == "r2"
    assert r.wanted.weights == "s3://models/tiny/r2/"
    assert r.summary() == "r2 (2/2 ready) serves"


def test_missing_weights_are_named_by_their_folder_not_vllms_cache_path():
    r = rollouts.rollout(
        deployment(3),
        [replica_set("r2", 2, 1, 1), replica_set("r-missing", 3, 1, 0)],
        [pod("r2"), pod("r-missing", **crashing(NO_FILES))],
    )
    assert not r.done
    assert [s.name for s in r.serving] == ["r2"]
    assert r.stuck == (
        "no weights at s3://models/tiny/r-missing/: the server found no model files there"
        " (CrashLoopBackOff, 3 restarts)"
    )
    assert r.summary().startswith("r2 (1/1 ready) serves; r-missing is stuck: no weights at")


def test_refused_keys_name_the_s3_error_code():
    log = "botocore.exceptions.ClientError: An error occurred (InvalidAccessKeyId) when calling"
    r = rollouts.rollout(
        deployment(2),
        [replica_set("r1", 1, 1, 1), replica_set("r2", 2, 1, 0)],
        [pod("r2", **crashing(log, restarts=1))],
    )
    assert r.stuck == (
        "the object store refused the keys for s3://models/tiny/r2/ (InvalidAccessKeyId)"
        " (CrashLoopBackOff, 1 restarts)"
    )


def test_an_unknown_crash_quotes_the_last_error_line_of_the_log():
    log = "INFO starting\nRuntimeError: out of cheese\nINFO exiting\n"
    [why] = [rollouts.pod_reason(pod("r2", **crashing(log)), "s3://m/r2/")]
    assert why == "RuntimeError: out of cheese (CrashLoopBackOff, 3 restarts)"
    long = "ValueError: " + "x" * 500
    assert len(rollouts.explain(long, "s3://m/")) == rollouts.LINE


def test_files_that_are_not_a_model_are_named_by_their_folder_and_quoted():
    # transformers 5.19's words for a config.json that does not parse (configuration_utils)
    log = (
        "Traceback (most recent call last):\n"
        "OSError: It looks like the config file at '/home/vllm/.cache/vllm/assets/"
        "model_streamer/1f2e/config.json' is not a valid JSON file.\n"
    )
    [why] = [rollouts.pod_reason(pod("r2", **crashing(log, restarts=0)), "s3://m/r2/")]
    assert why.startswith("the files at s3://m/r2/ are not a model the server loads: OSError:")
    assert why.endswith("is not a valid JSON file. (CrashLoopBackOff, 0 restarts)")
    header = "safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooLarge"
    assert rollouts.explain(header, "s3://m/r3/") == (
        f"the files at s3://m/r3/ are not a model the server loads: {header}"
    )


def test_a_missing_secret_and_a_pull_failure_say_the_kubelets_words():
    config = {"reason": "CreateContainerConfigError", "message": 'secret "keys" not found'}
    pull = {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "x"'}
    for waiting, said in ((config, 'secret "keys" not found'), (pull, "Back-off pulling")):
        status = {"containerStatuses": [{"state": {"waiting": waiting}, "restartCount": 0}]}
        assert rollouts.pod_reason(pod("r2", **status), "s3://m/").startswith(
            f"{waiting['reason']}: {said}"
        )


KUBELET_SYNC = "failed to sync secret cache: timed out waiting for the condition"


def test_a_secret_the_kubelet_has_not_synced_yet_is_starting_not_stuck():
    """Seen in CI: a Secret created a second before the pod; the kubelet's next sync reads it."""
    syncing = {"reason": "CreateContainerConfigError", "message": KUBELET_SYNC}
    status = {"containerStatuses": [{"state": {"waiting": syncing}, "restartCount": 0}]}
    assert rollouts.pod_reason(pod("r2", **status), "s3://m/") == ""
    r = rollouts.rollout(
        deployment(2),
        [replica_set("r1", 1, 1, 1), replica_set("r2", 2, 1, 0)],
        [pod("r2", **status)],
    )
    assert (r.stuck, r.hopeless) == ("", False)
    assert r.summary() == "r1 (1/1 ready) serves; r2 is starting (0/1 ready)"


def test_a_server_running_again_after_a_crash_is_still_stuck_and_oom_is_named():
    again = crashing(NO_FILES, restarts=2)
    again["containerStatuses"][0]["state"] = {"running": {}}
    assert rollouts.pod_reason(pod("r2", **again), "s3://m/r2/") == (
        "no weights at s3://m/r2/: the server found no model files there (started again,"
        " 2 restarts)"
    )
    oom = crashing("", restarts=1)
    oom["containerStatuses"][0]["lastState"]["terminated"].update(reason="OOMKilled", exitCode=137)
    assert rollouts.pod_reason(pod("r2", **oom), "s3://m/r2/").startswith(
        "killed at its memory limit (OOMKilled)"
    )


def test_a_pod_still_loading_is_starting_not_stuck():
    running = {"containerStatuses": [{"state": {"running": {}}, "restartCount": 0}]}
    r = rollouts.rollout(
        deployment(2),
        [replica_set("r1", 1, 1, 1), replica_set("r2", 2, 1, 0)],
        [pod("r2", **running)],
    )
    assert r.stuck == ""
    assert r.summary() == "r1 (1/1 ready) serves; r2 is starting (0/1 ready)"


def test_an_unschedulable_pod_and_a_passed_deadline_are_stuck():
    pending = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "message": "0/3 nodes are available: 3 Insufficient cpu.",
            }
        ],
    }
    rss = [replica_set("r1", 1, 1, 1), replica_set("r2", 2, 1, 0)]
    r = rollouts.rollout(deployment(2), rss, [pod("r2", **pending)])
    assert r.stuck == "not scheduled: 0/3 nodes are available: 3 Insufficient cpu."
    late = rollouts.rollout(deployment(2, progress_deadline=True), rss, [])
    assert late.stuck == 'ReplicaSet "tiny-b" has timed out progressing.'


def test_replica_sets_of_another_deployment_are_not_its_revisions():
    r = rollouts.rollout(
        deployment(1), [replica_set("r1", 1, 1, 1), replica_set("x", 1, 1, 1, owner="other")], []
    )
    assert [s.name for s in r.serving] == ["r1"]
    assert r.done


def test_during_a_roll_both_revisions_serve_newest_first():
    r = rollouts.rollout(
        deployment(2), [replica_set("r1", 1, 1, 1), replica_set("r2", 2, 2, 1)], []
    )
    assert [s.name for s in r.serving] == ["r2", "r1"]
    assert r.summary() == "r2 (1/2 ready), r1 (1/1 ready) serve; r2 is starting (1/2 ready)"


def test_a_new_pod_template_of_the_serving_revision_is_told_apart():
    log = "botocore.exceptions.ClientError: An error occurred (SignatureDoesNotMatch)"
    r = rollouts.rollout(
        deployment(4),
        [replica_set("r2", 3, 1, 1), {**replica_set("r2", 4, 1, 0), "metadata": {
            **replica_set("r2", 4, 1, 0)["metadata"], "labels": {rollouts.HASH: "h-new"}}}],
        [{"metadata": {"labels": {rollouts.HASH: "h-new"}}, "status": crashing(log)}],
    )  # fmt: skip
    assert r.summary().startswith(
        "r2 (1/1 ready) serves; r2's new pod template (Deployment revision 4) is stuck: the"
        " object store refused the keys for s3://models/tiny/r2/ (SignatureDoesNotMatch)"
    )


# containerd's words when the registry has no such tag (seen on the local cluster)
NO_IMAGE = (
    'failed to pull and unpack image "ghcr.io/gridloop/vllm-cpu:0.32.0": failed to resolve '
    'reference "ghcr.io/gridloop/vllm-cpu:0.32.0": ghcr.io/gridloop/vllm-cpu:0.32.0: not found'
)


def pulling(reason: str, message: str) -> dict:
    return {
        "containerStatuses": [
            {
                "image": "ghcr.io/gridloop/vllm-cpu:0.32.0",
                "state": {"waiting": {"reason": reason, "message": message}},
                "restartCount": 0,
            }
        ]
    }


def test_a_missing_image_says_the_registry_has_none_and_what_to_do():
    why = rollouts.pod_reason(pod("r2", **pulling("ImagePullBackOff", NO_IMAGE)), "s3://m/")
    assert why.startswith("ImagePullBackOff: failed to pull and unpack image")
    assert why.endswith(
        "(the registry has no ghcr.io/gridloop/vllm-cpu:0.32.0: push it, or set another image)"
    )


def test_a_wait_gives_up_only_on_what_no_restart_fixes() -> None:
    rss = [replica_set("r1", 1, 1, 1), replica_set("r2", 2, 1, 0)]

    def hopeless(**status: object) -> bool:
        return rollouts.rollout(deployment(2), rss, [pod("r2", **status)]).hopeless

    def waiting(reason: str) -> dict:
        return {"containerStatuses": [{"state": {"waiting": {"reason": reason}}}]}

    # one crash whose log names the cause: missing weights, refused keys, no bucket
    assert hopeless(**crashing(NO_FILES, restarts=0))
    assert hopeless(**crashing("ClientError: (SignatureDoesNotMatch)", restarts=0))
    assert hopeless(**crashing("botocore: NoSuchBucket", restarts=0))
    # ... or files there that are not a model: a restart reads the same files again
    assert hopeless(**crashing("json.decoder.JSONDecodeError: Expecting value", restarts=0))
    assert hopeless(**crashing("SafetensorError: Error while deserializing header", restarts=0))
    # an unknown crash: once may be bad luck, twice in a row is not
    assert not hopeless(**crashing("RuntimeError: out of cheese", restarts=1))
    assert hopeless(**crashing("RuntimeError: out of cheese", restarts=rollouts.CRASHES))
    # the spec names what is wrong; a pull that backs off may still succeed
    assert hopeless(**waiting("CreateContainerConfigError"))
    assert hopeless(**waiting("InvalidImageName"))
    assert not hopeless(**waiting("ImagePullBackOff"))
    # ... but not the kubelet's own watch of a Secret made just before the pod: it retries
    assert not hopeless(**pulling("CreateContainerConfigError", KUBELET_SYNC))
    # ... but not one the registry answered "no such image": only a push fixes that
    assert hopeless(**pulling("ImagePullBackOff", f"Back-off pulling image: {NO_IMAGE}"))
    assert hopeless(**pulling("ErrImagePull", NO_IMAGE))
    unknown = "GET /v2/x/manifests/1: MANIFEST_UNKNOWN: manifest unknown"
    assert hopeless(**pulling("ErrImagePull", unknown))
    refused = "failed to resolve reference: pulling from host ghcr.io failed: 401 Unauthorized"
    assert not hopeless(**pulling("ErrImagePull", refused))
    unreachable = "dial tcp 127.0.0.1:27413: connect: connection refused"
    assert not hopeless(**pulling("ImagePullBackOff", unreachable))
    # loading, or waiting for a node: the deadline decides
    assert not hopeless(containerStatuses=[{"state": {"running": {}}, "restartCount": 0}])
    pending = {"type": "PodScheduled", "status": "False", "message": "Insufficient cpu"}
    assert not hopeless(phase="Pending", conditions=[pending])

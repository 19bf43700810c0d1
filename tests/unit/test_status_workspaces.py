"""KAITO's Workspaces in `gridloop status`'s inference view, beside the chart's own model
servers: ready from the pods KAITO labels with the Workspace's name, KAITO's conditions in
its own words, and a node of theirs the health service quarantined."""

from __future__ import annotations

import json

from gridloop.status import collecting, printing, views
from gridloop.status.snapshot import Node, Snapshot


def workspace(**status: object) -> dict:
    """As KAITO v0.12.0 keeps a Workspace the chart renders (runtime: kaito)."""
    return {
        "apiVersion": "kaito.sh/v1beta1",
        "kind": "Workspace",
        "metadata": {"name": "tiny-kaito", "namespace": "inference"},
        "resource": {"labelSelector": {"matchLabels": {"gridloop.io/container-node": "true"}}},
        "inference": {
            "template": {
                "metadata": {"annotations": {"gridloop.io/model-revision": "r1"}},
                "spec": {
                    "containers": [
                        {
                            "name": "vllm",
                            "args": ["s3://models/tiny/r1", "--load-format", "runai_streamer"],
                        }
                    ]
                },
            }
        },
        "status": status,
    }


def pod(name: str, workspace: str, node: str, ready: bool) -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": "inference",
            "labels": {"kaito.sh/workspace": workspace},
        },
        "spec": {"nodeName": node},
        "status": {"conditions": [{"type": "Ready", "status": str(ready)}]},
    }


def condition(kind: str, status: str, reason: str = "", message: str = "") -> dict:
    return {"type": kind, "status": status, "reason": reason, "message": message}


SERVING = {
    "targetNodeCount": 1,
    # every node its labelSelector picks (BYO); its pod runs on one
    "workerNodes": ["system-000", "system-001"],
    "conditions": [
        condition("WorkspaceSucceeded", "True", "workspaceSucceeded"),
        condition("InferenceReady", "True", "WorkspaceInferenceStatusSuccess"),
        condition("ResourceReady", "True", "workspaceResourceStatusSuccess"),
        condition("NodesReady", "True", "NodesReady"),
    ],
}


def test_a_serving_workspace_is_a_model_row_with_kaitos_conditions_in_their_order():
    pods = [pod("tiny-kaito-0", "tiny-kaito", "system-000", True), pod("x-0", "other", "n", True)]
    m = collecting.workspace_row(workspace(**SERVING), pods)
    assert (m.kind, m.name, m.ready, m.replicas, m.revision, m.load_format, m.gpus) == (
        "Workspace", "tiny-kaito", 1, 1, "r1", "runai_streamer", 0,
    )  # fmt: skip
    assert m.endpoint == "http://tiny-kaito.inference.svc:80/v1"
    assert m.conditions == (
        "NodesReady=True", "ResourceReady=True", "InferenceReady=True", "WorkspaceSucceeded=True",
    )  # fmt: skip
    assert m.nodes == ("system-000",) and m.serving == ("r1",)
    table = views.inference(Snapshot(taken_at=0.0, models=(m,)))
    (row,) = table.rows
    assert row.cells[2] == "Workspace" and row.cells[-1] == "" and not row.alert


def test_a_workspace_not_ready_says_why_in_kaitos_words():
    waiting = {
        "conditions": [
            condition("ResourceReady", "True"),
            condition(
                "InferenceReady",
                "False",
                "WorkspaceInferenceStatusFailed",
                "statefulset  not ready\n 0/1",
            ),
        ]
    }
    m = collecting.workspace_row(workspace(**waiting), [])
    (row,) = views.inference(Snapshot(taken_at=0.0, models=(m,))).rows
    assert row.cells[-1] == (
        "InferenceReady=False (WorkspaceInferenceStatusFailed): statefulset not ready 0/1"
    )
    assert row.alert and row.cells[3] == "0/1"


def test_the_quarantine_of_a_workspaces_node_is_shown_on_its_row_and_in_json():
    m = collecting.workspace_row(
        workspace(**SERVING), [pod("tiny-kaito-0", "tiny-kaito", "system-000", True)]
    )
    sick = Node(
        name="system-000", site="-", pool="-", region="-", product="-", gpus=0, ready=True,
        unschedulable=False, quarantined_by="gridloop-health",
    )  # fmt: skip
    snapshot = Snapshot(taken_at=0.0, nodes=(sick,), models=(m,))
    (row,) = views.inference(snapshot).rows
    assert row.cells[-1] == "node system-000 quarantined" and row.alert
    (shown,) = json.loads(printing.as_json(snapshot, ["inference"]))["models"]
    assert shown["kind"] == "Workspace" and "InferenceReady=True" in shown["conditions"]


def test_a_preset_workspace_counts_the_gpus_of_the_pods_kaito_made():
    preset = workspace(**SERVING)
    preset["inference"] = {"preset": {"name": "phi-4-mini-instruct"}}
    running = pod("tiny-kaito-0", "tiny-kaito", "eu-west-a100-002", True)
    running["spec"]["containers"] = [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    m = collecting.workspace_row(preset, [running])
    assert (m.load_format, m.revision, m.gpus, m.nodes) == (
        "preset", "phi-4-mini-instruct", 1, ("eu-west-a100-002",),
    )  # fmt: skip

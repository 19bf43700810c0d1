"""kwok's configuration: what the simulated kubelets do (pure; YAML text out).

kwok does nothing without Stage objects; these say how a simulated node and a
pod on it move through their lives:
- node-initialize: a new node gets Ready conditions, keeps the capacity (GPUs
  included) it was created with, and reports the runtime handlers runc and
  runsc (gVisor), as a kubelet on a node with gVisor installed does;
- node-heartbeat: Ready nodes post their conditions every 5 to 5.5 minutes, as a
  kubelet does when nothing changed (its nodeStatusReportFrequency). Every
  watcher of nodes (scheduler, controller-manager, health service, `gridloop
  status`) reads each post in full, about 5 KB: 16 a second at 5,000 nodes.
  A kubelet also renews a node Lease every 10 s; kwok does not (leases off),
  so the controller-manager's grace period is longer than the report period
  (flags.py). Fail a node with the label below, not by waiting for a timeout;
- node-not-ready: a node labelled `gridloop.io/sim-not-ready=true` reports
  Ready=False (kwok would otherwise re-initialise a hand-set Ready=False);
  remove the label and it is initialised again;
- pod-ready: a scheduled pod starts running and becomes Ready;
- pod-complete: a Job's pod succeeds, after `gridloop.io/sim-duration`
  (for example "30s") if the pod carries that annotation, at once otherwise;
- pod-delete: a deleted pod goes away (kwok stands in for the kubelet).
"""

from __future__ import annotations

import yaml

NOT_READY_LABEL = "gridloop.io/sim-not-ready"
STATUS_REPORT_MS = (300_000, 330_000)  # an unchanged node's status post: 5 min, + jitter
DURATION_ANNOTATION = "gridloop.io/sim-duration"

_READY = '.status.conditions.[] | select( .type == "Ready" ) | .status'
_NOT_READY = f'.metadata.labels["{NOT_READY_LABEL}"]'

# Go templates that kwok renders into the object's status.
_NODE_CONDITIONS = """\
{{ $now := Now }}
conditions:
{{ range NodeConditions }}
- type: {{ .type | Quote }}
  status: {{ .status | Quote }}
  reason: {{ .reason | Quote }}
  message: {{ .message | Quote }}
  lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
"""

_NODE_INITIAL_STATUS = (
    _NODE_CONDITIONS
    + """\
addresses:
- type: InternalIP
  address: {{ NodeIP | Quote }}
- type: Hostname
  address: {{ .metadata.name | Quote }}
{{ with NodePort }}
daemonEndpoints:
  kubeletEndpoint:
    Port: {{ . }}
{{ end }}
capacity:
{{ YAML .status.capacity 1 }}
allocatable:
{{ YAML .status.allocatable 1 }}
nodeInfo:
  architecture: amd64
  operatingSystem: linux
  osImage: gridloop simulated GPU node
  kernelVersion: kwok-{{ Version }}
  containerRuntimeVersion: kwok-{{ Version }}
  kubeletVersion: kwok-{{ Version }}
  kubeProxyVersion: ""
  machineID: ""
  bootID: ""
  systemUUID: ""
runtimeHandlers:
- name: runc
- name: runsc
phase: Running
"""
)

_NODE_NOT_READY = """\
{{ $now := Now }}
conditions:
{{ range NodeConditions }}
{{ if eq .type "Ready" }}
- type: Ready
  status: "False"
  reason: SimulatedFailure
  message: "node marked not ready by the gridloop.io/sim-not-ready label"
  lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
{{ else }}
- type: {{ .type | Quote }}
  status: {{ .status | Quote }}
  reason: {{ .reason | Quote }}
  message: {{ .message | Quote }}
  lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
{{ end }}
"""

_POD_RUNNING = """\
{{ $now := Now }}
phase: Running
startTime: {{ $now | Quote }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: {{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) | Quote }}
conditions:
{{ range list "PodScheduled" "Initialized" "ContainersReady" "Ready" }}
- type: {{ . }}
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
{{ range .spec.readinessGates }}
- type: {{ .conditionType | Quote }}
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
initContainerStatuses:
{{ range .spec.initContainers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: true
  restartCount: 0
  state:
    terminated:
      exitCode: 0
      reason: Completed
      startedAt: {{ $now | Quote }}
      finishedAt: {{ $now | Quote }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
"""

_POD_SUCCEEDED = """\
{{ $now := Now }}
phase: Succeeded
conditions:
{{ range list "PodScheduled" "Initialized" }}
- type: {{ . }}
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
{{ range list "ContainersReady" "Ready" }}
- type: {{ . }}
  status: "False"
  reason: PodCompleted
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: false
  started: false
  restartCount: 0
  state:
    terminated:
      exitCode: 0
      reason: Completed
      finishedAt: {{ $now | Quote }}
{{ end }}
"""


def _stage(
    name: str, kind: str, match: list[dict[str, object]], nxt: dict[str, object], **extra: object
) -> dict[str, object]:
    spec: dict[str, object] = {
        "resourceRef": {"apiGroup": "v1", "kind": kind},
        "selector": {"matchExpressions": match},
        "next": nxt,
    }
    spec.update(extra)
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": spec,
    }


def _expr(key: str, op: str, *values: str) -> dict[str, object]:
    out: dict[str, object] = {"key": key, "operator": op}
    if values:
        out["values"] = list(values)
    return out


def stages() -> list[dict[str, object]]:
    healthy = _expr(_NOT_READY, "DoesNotExist")
    alive = _expr(".metadata.deletionTimestamp", "DoesNotExist")
    return [
        _stage(
            "node-initialize",
            "Node",
            [healthy, _expr(_READY, "NotIn", "True")],
            {"statusTemplate": _NODE_INITIAL_STATUS},
        ),
        _stage(
            "node-heartbeat",
            "Node",
            [healthy, _expr(".status.phase", "In", "Running"), _expr(_READY, "In", "True")],
            {"statusTemplate": _NODE_CONDITIONS},
            delay={
                "durationMilliseconds": STATUS_REPORT_MS[0],
                "jitterDurationMilliseconds": STATUS_REPORT_MS[1],
            },
            immediateNextStage=True,
        ),
        _stage(
            "node-not-ready",
            "Node",
            [_expr(_NOT_READY, "In", "true"), _expr(_READY, "NotIn", "False")],
            {"statusTemplate": _NODE_NOT_READY},
        ),
        _stage(
            "pod-ready",
            "Pod",
            [alive, _expr(".status.podIP", "DoesNotExist")],
            {"statusTemplate": _POD_RUNNING},
        ),
        _stage(
            "pod-complete",
            "Pod",
            [
                alive,
                _expr(".status.phase", "In", "Running"),
                _expr(".metadata.ownerReferences.[].kind", "In", "Job"),
            ],
            {"statusTemplate": _POD_SUCCEEDED},
            delay={
                "durationMilliseconds": 0,
                "durationFrom": {
                    "expressionFrom": f'.metadata.annotations["{DURATION_ANNOTATION}"]'
                },
            },
        ),
        _stage(
            "pod-delete",
            "Pod",
            [_expr(".metadata.deletionTimestamp", "Exists")],
            {"finalizers": {"empty": True}, "delete": True},
        ),
    ]


def kwok_config(parallelism: int = 16) -> str:
    """The file passed to `kwok --config`: options, then every stage."""
    options = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {
            # heartbeats travel in node status (stages above), not in Leases: a Lease
            # every 10 s per node is 500 writes a second at 5,000 nodes, and kwok holds
            # a node's Lease before it plays any stage (with 200 s leases a 5,000-node
            # fleet took 114 s to be Ready; 74 to 101 s without, on the same host)
            "nodeLeaseDurationSeconds": 0,
            "nodePlayStageParallelism": parallelism,
            "podPlayStageParallelism": parallelism,
        },
    }
    return yaml.safe_dump_all([options, *stages()], sort_keys=False)

"""Which revision of a model serves, and why a new one does not (pure).

Read from the model's Deployment, its ReplicaSets and their pods. Each ReplicaSet is one
version of the pod template: the chart's `gridloop.io/model-revision` annotation names
the revision, and the vllm container's first argument is its weights folder. The ones
with ready pods serve; the one the Deployment's own `deployment.kubernetes.io/revision`
names is the revision it is rolling to (`wanted`). When the wanted revision is not
ready, its pods say why: the container's waiting reason (CrashLoopBackOff,
ImagePullBackOff, a missing Secret), the tail of a crashed server's log (the chart's
`terminationMessagePolicy: FallbackToLogsOnError`), or the scheduler's message. vLLM's
own error for weights it cannot find names a cache folder, not the object store's URI,
so the known failures are said again in terms of the weights (`explain`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gridloop import names

REVISION = names.MODEL_REVISION
MODEL = names.MODEL_LABEL
DEPLOYMENT_REVISION = "deployment.kubernetes.io/revision"
HASH = "pod-template-hash"
REASON = "RevisionNotReady"  # the Event gridloop writes on the Deployment

# waiting reasons that will not clear on their own
_STUCK_WAITING = {
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
}
# the object store's S3 error codes for keys it refuses (versitygw and AWS alike)
_REFUSED = re.compile(
    r"\b(InvalidAccessKeyId|SignatureDoesNotMatch|AccessDenied|InvalidClientTokenId"
    r"|Access Denied|403 Forbidden|Forbidden)\b"
)
_NO_WEIGHTS = (
    "Invalid repository ID or local directory specified",
    "No safetensors files found",
    "Cannot find any model weights",
    "NoSuchKey",
)
_NO_BUCKET = re.compile(r"\bNoSuchBucket\b")
# files that are there but are not a model: a config.json that is not JSON (transformers'
# words, or json's own when vLLM reads it), weights whose safetensors header does not parse
_BROKEN_WEIGHTS = re.compile(
    r"is not a valid JSON file|JSONDecodeError|Error while deserializing header|SafetensorError"
)
# waiting reasons no retry clears: the pod spec itself is wrong
_WRONG_SPEC = {"InvalidImageName", "CreateContainerConfigError"}
# ... except the kubelet's own wait for its Secret/ConfigMap watch, which times out when
# the object was made just before the pod and clears at its next sync (seen in CI:
# `CreateContainerConfigError: failed to sync secret cache: timed out waiting for the
# condition` for a Secret created a second earlier)
_KUBELET_SYNC = re.compile(r"failed to sync (secret|configmap) cache", re.IGNORECASE)
# a pull the registry answered "no such image" (containerd: `...: <ref>: not found`;
# a registry's own words: MANIFEST_UNKNOWN, NAME_UNKNOWN): backing off will not make it
# appear, only a push or another image will. A pull that failed to connect, or was
# refused for want of credentials, may still succeed and is waited for.
_PULLING = {"ErrImagePull", "ImagePullBackOff"}
_NO_IMAGE = re.compile(r"not found|manifest unknown|name unknown|\bNotFound\b", re.IGNORECASE)
CRASHES = 2  # a server restarted this many times after crashing will crash again
_ERROR_LINE = re.compile(r"(Error|error|Exception|exception|refused|denied|failed)")
LINE = 200  # characters of a log line quoted in a reason


@dataclass(frozen=True)
class Revision:
    name: str  # gridloop.io/model-revision
    weights: str  # the weights folder the pods load, "" when unknown
    ready: int
    replicas: int
    number: int = 0  # deployment.kubernetes.io/revision: higher is newer


@dataclass(frozen=True)
class Rollout:
    model: str
    wanted: Revision | None  # the revision the Deployment rolls to (its newest ReplicaSet)
    serving: tuple[Revision, ...]  # revisions with ready pods, newest first
    stuck: str = ""  # why the wanted revision is not ready and will not be; "" otherwise
    # and no wait can change that: only a new revision, values or Secret will (`certain`)
    hopeless: bool = False

    @property
    def done(self) -> bool:
        w = self.wanted
        return w is not None and w.ready >= w.replicas and self.serving == (w,)

    def summary(self) -> str:
        """`r2 serves (1/1 ready); r-missing is stuck: no weights at s3://...`"""
        serves = ", ".join(f"{r.name} ({r.ready}/{r.replicas} ready)" for r in self.serving)
        head = f"{serves} serves" if len(self.serving) == 1 else f"{serves or 'nothing'} serve"
        w = self.wanted
        if w is None or self.done:
            return head
        # the same revision with another pod template (new keys, resources, args)
        name = w.name
        if any(r.name == w.name and r.number != w.number for r in self.serving):
            name = f"{w.name}'s new pod template (Deployment revision {w.number})"
        if self.stuck:
            return f"{head}; {name} is stuck: {self.stuck}"
        return f"{head}; {name} is starting ({w.ready}/{w.replicas} ready)"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _number(obj: Mapping[str, Any]) -> int:
    value = (_meta(obj).get("annotations") or {}).get(DEPLOYMENT_REVISION, "0")
    return int(value) if str(value).isdigit() else 0


def _template(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("spec") or {}).get("template") or {}


def weights(template: Mapping[str, Any]) -> str:
    """The weights folder of a pod template: the vllm container's first argument."""
    containers = (template.get("spec") or {}).get("containers") or []
    for c in containers:
        if c.get("name") == "vllm" and c.get("args"):
            return str(c["args"][0])
    return ""


def revision(rs: Mapping[str, Any]) -> Revision:
    template = _template(rs)
    annotations = _meta(template).get("annotations") or {}
    status = rs.get("status") or {}
    return Revision(
        name=str(annotations.get(REVISION, "")) or f"#{_number(rs)}",
        weights=weights(template),
        ready=int(status.get("readyReplicas") or 0),
        replicas=int((rs.get("spec") or {}).get("replicas") or 0),
        number=_number(rs),
    )


def _owned(rs: Mapping[str, Any], deployment: Mapping[str, Any]) -> bool:
    uid = _meta(deployment).get("uid")
    owners = _meta(rs).get("ownerReferences") or []
    if uid and owners:
        return any(o.get("uid") == uid for o in owners)
    return _meta(rs).get("namespace") == _meta(deployment).get("namespace") and any(
        o.get("kind") == "Deployment" and o.get("name") == _meta(deployment).get("name")
        for o in owners
    )


def explain(message: str, where: str) -> str:
    """A crashed server's log tail in terms of its weights folder `where`."""
    if any(s in message for s in _NO_WEIGHTS):
        return f"no weights at {where}: the server found no model files there"
    if found := _REFUSED.search(message):
        return f"the object store refused the keys for {where} ({found.group(1)})"
    if _NO_BUCKET.search(message):
        return f"no such bucket for {where}"
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if broken := [line for line in lines if _BROKEN_WEIGHTS.search(line)]:
        return f"the files at {where} are not a model the server loads: {_cut(broken[-1])}"
    errors = [line for line in lines if _ERROR_LINE.search(line)]
    return _cut((errors or lines or ["exited with no log"])[-1])


def _cut(line: str) -> str:
    return line if len(line) <= LINE else line[: LINE - 1] + "…"


def pod_reason(pod: Mapping[str, Any], where: str) -> str:
    """Why one pod of a revision will not become ready, "" when nothing says it will not.

    A server that has crashed and is running again (CrashLoopBackOff alternates with
    Running) is stuck all the same: its last crash says why."""
    status = pod.get("status") or {}
    for c in status.get("containerStatuses") or []:
        waiting = (c.get("state") or {}).get("waiting") or {}
        now = (c.get("state") or {}).get("terminated") or {}
        last = (c.get("lastState") or {}).get("terminated") or {}
        crashed = now if now.get("exitCode") else last if last.get("exitCode") else {}
        reason = waiting.get("reason")
        restarts = int(c.get("restartCount") or 0)
        if _syncing(waiting):
            continue
        if reason in _STUCK_WAITING and reason != "CrashLoopBackOff":
            said = f"{reason}: {waiting.get('message') or 'no message'}"
            if _no_image(waiting):
                image = c.get("image") or "its image"
                said += f" (the registry has no {image}: push it, or set another image)"
            return said
        if crashed:
            if crashed.get("reason") == "OOMKilled":
                why = "killed at its memory limit (OOMKilled): raise resources.limits.memory"
            else:
                why = explain(str(crashed.get("message") or ""), where)
            said = reason or (f"exit code {crashed.get('exitCode')}" if now else "started again")
            return f"{why} ({said}, {restarts} restarts)"
        if reason:
            return f"{reason}: {waiting.get('message') or 'no message'}"
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return f"not scheduled: {cond.get('message') or cond.get('reason')}"
    return ""


def _syncing(waiting: Mapping[str, Any]) -> bool:
    """The kubelet has not yet read the pod's Secret or ConfigMap: it will, nothing is wrong."""
    return waiting.get("reason") == "CreateContainerConfigError" and bool(
        _KUBELET_SYNC.search(str(waiting.get("message") or ""))
    )


def _no_image(waiting: Mapping[str, Any]) -> bool:
    return waiting.get("reason") in _PULLING and bool(
        _NO_IMAGE.search(str(waiting.get("message") or ""))
    )


def certain(pod: Mapping[str, Any]) -> bool:
    """The pod will not become ready until something is changed: a waiting reason that
    names its spec, an image the registry says it does not have, a crashed server whose
    log names a cause no restart fixes (weights missing or not a model, keys refused, no
    bucket), or a crash after CRASHES restarts. An install's wait ends on it at once
    rather than at its deadline (chart/waiting.py)."""
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        state = c.get("state") or {}
        waiting = state.get("waiting") or {}
        if (waiting.get("reason") in _WRONG_SPEC and not _syncing(waiting)) or _no_image(waiting):
            return True
        now, last = state.get("terminated") or {}, (c.get("lastState") or {}).get("terminated")
        crashed = now if now.get("exitCode") else (last or {})
        if not crashed.get("exitCode"):
            continue
        message = str(crashed.get("message") or "")
        if _named_cause(message) or int(c.get("restartCount") or 0) >= CRASHES:
            return True
    return False


def _named_cause(message: str) -> bool:
    """A crashed server's log names one of the causes `explain` words (none a restart fixes)."""
    return any(s in message for s in _NO_WEIGHTS) or any(
        p.search(message) for p in (_REFUSED, _NO_BUCKET, _BROKEN_WEIGHTS)
    )


def _deadline(deployment: Mapping[str, Any]) -> str:
    for cond in (deployment.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
            return str(cond.get("message") or "the progress deadline passed")
    return ""


def rollout(
    deployment: Mapping[str, Any],
    replica_sets: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
) -> Rollout:
    """The model's revisions: which serve, which it rolls to, and why that one is stuck."""
    model = str((_meta(_template(deployment)).get("labels") or {}).get(MODEL, ""))
    owned = sorted((rs for rs in replica_sets if _owned(rs, deployment)), key=_number, reverse=True)
    want = _number(deployment)
    wanted_rs = next((rs for rs in owned if _number(rs) == want), owned[0] if owned else None)
    wanted = revision(wanted_rs) if wanted_rs is not None else None
    serving = tuple(r for r in (revision(rs) for rs in owned) if r.ready > 0)
    if wanted_rs is None or wanted is None or wanted.ready >= wanted.replicas:
        return Rollout(model, wanted, serving)
    template_hash = (_meta(wanted_rs).get("labels") or {}).get(HASH)
    mine = [p for p in pods if (_meta(p).get("labels") or {}).get(HASH) == template_hash]
    where = wanted.weights or wanted.name
    reasons = [why for why in (pod_reason(p, where) for p in mine) if why]
    stuck = reasons[0] if reasons else _deadline(deployment)
    return Rollout(model, wanted, serving, stuck, bool(stuck) and any(map(certain, mine)))

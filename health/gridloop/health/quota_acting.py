"""Carry out the quota plan on Kueue's ClusterQueues: the thin shell around queues.py.

One merge patch per ClusterQueue per cycle, with the resourceVersion it was
computed from and gridloop's field manager; a queue changed since it was read
(409) is read again and patched again, up to five times. Each change is an
Event on the ClusterQueue (Warning when quota is taken away). Dry-run patches
nothing and records no Event: it reports what it would have done.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from gridloop.health.acting import BACKOFFS, api_error, record_event
from gridloop.health.observed import MANAGER
from gridloop.health.queues import GROUP, VERSION, quota_patch
from gridloop.health.quotas import CapQuota, QuotaAction, SetQuota


@dataclass(frozen=True)
class QuotaOutcome:
    action: QuotaAction
    applied: bool
    detail: str = ""
    failed: bool = False


def _reason(action: SetQuota) -> str:
    return "GPUQuotaLowered" if action.after < action.before else "GPUQuotaRestored"


class QuotaExecutor:
    def __init__(
        self, api: client.ApiClient, dry_run: bool = False, instance: str = MANAGER
    ) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.dry_run, self.instance = dry_run, instance

    def apply(
        self, actions: list[QuotaAction], queues: dict[str, dict[str, Any]]
    ) -> list[QuotaOutcome]:
        """One outcome per SetQuota and CapQuota; HoldQuotas needs nothing done."""
        by_queue: dict[str, list[SetQuota]] = defaultdict(list)
        for action in actions:
            if isinstance(action, SetQuota):
                by_queue[action.queue].append(action)
        outcomes: list[QuotaOutcome] = []
        for queue, changes in by_queue.items():
            if self.dry_run:
                outcomes += [QuotaOutcome(a, False, "dry-run: not applied") for a in changes]
                continue
            try:
                self._patch(queue, queues[queue], changes)
            except Exception as err:  # one refused queue must not stop the others
                detail = f"failed: {api_error(err)}"
                outcomes += [QuotaOutcome(a, False, detail, failed=True) for a in changes]
                continue
            for a in changes:
                self._event(a.queue, _reason(a), a.reason, warning=a.after < a.before)
                outcomes.append(QuotaOutcome(a, True))
        for action in actions:
            if isinstance(action, CapQuota):
                if not self.dry_run:
                    self._event(action.queue, "GPUQuotaRemovalCapped", action.reason, warning=True)
                outcomes.append(QuotaOutcome(action, not self.dry_run))
        return outcomes

    def _patch(self, name: str, obj: dict[str, Any], changes: list[SetQuota]) -> None:
        wanted = {a.flavor: (a.after, a.configured) for a in changes}
        for delay in (*BACKOFFS, None):
            try:
                self.custom.patch_cluster_custom_object(
                    GROUP,
                    VERSION,
                    "clusterqueues",
                    name,
                    quota_patch(obj, wanted),
                    field_manager=MANAGER,
                )
                return
            except ApiException as err:
                if err.status != 409 or delay is None:
                    raise
                time.sleep(delay)
                obj = self.custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", name)

    def _event(self, queue: str, reason: str, message: str, warning: bool) -> None:
        ref = client.V1ObjectReference(
            api_version=f"{GROUP}/{VERSION}", kind="ClusterQueue", name=queue
        )
        record_event(self.core, "default", ref, reason, message, warning, self.instance)

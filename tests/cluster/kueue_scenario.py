"""A team's Kueue queues over the simulated fleet, and 8-GPU Jobs submitted to them.

Shared by the quota rebalancing tests and bench/bench_quota_failover.py. The
queues are the shape the chart renders (tests/unit/test_chart_render.py pins
that): one ResourceFlavor per pool, labelled by site and pool, a ClusterQueue
listing them in failover order, a LocalQueue in the team's namespace. Names
carry a prefix so a run never touches the chart's own objects.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from fleet_reset import QUICK_POLICY
from kubernetes import client
from kubernetes.client.rest import ApiException

from gridloop.health.policy import QuotaLimits

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
GPU = "nvidia.com/gpu"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
DURATION = "gridloop.io/sim-duration"  # how long a simulated pod runs (stages.py)

# region one, region two, on-prem: the order a team's work falls over in
POOLS = (("us-east", "h100"), ("eu-west", "h100"), ("onprem-fra", "a100"))
# the team's GPU quota: each whole pool of the default fleet
QUOTA = {"us-east": 64, "eu-west": 32, "onprem-fra": 64}

# a health policy for these scenarios: quick release, limits out of the way
POLICY = dataclasses.replace(
    QUICK_POLICY,
    quota_limits=QuotaLimits(max_removed_gpus=64, max_removed_percent=100, window_s=3600),
)


@dataclass(frozen=True)
class Placement:
    """Where Kueue put one Job: admitted in a flavor, or pending and why."""

    job: str
    flavor: str | None  # None: not admitted
    reason: str  # the pending reason, or "" once admitted
    finished: bool = False


def gpu_job(name: str, queue: str, gpus: int, runs_for: str = "1h") -> dict[str, Any]:
    """A one-pod batch Job in LocalQueue `queue` asking for `gpus` GPUs; its simulated pod
    runs for `runs_for`, so the quota it holds stays held."""
    container = {
        "name": "train",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {
            "requests": {"cpu": "1", "memory": "1Gi", GPU: str(gpus)},
            "limits": {GPU: str(gpus)},
        },
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {DURATION: runs_for}},
                "spec": {"restartPolicy": "Never", "containers": [container]},
            },
        },
    }


class TeamQueues:
    def __init__(self, api: client.ApiClient, namespace: str, prefix: str) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.batch = client.BatchV1Api(api)
        self.namespace, self.prefix = namespace, prefix
        self.queue = f"{prefix}-team"
        self.flavors = [f"{prefix}-{site}-{pool}" for site, pool in POOLS]
        self.submitted: list[str] = []

    def flavor_of(self, site: str) -> str:
        return next(f for f in self.flavors if f.startswith(f"{self.prefix}-{site}-"))

    def create(self, gpus: dict[str, int], annotations: dict[str, str] | None = None) -> None:
        """Flavors, the team's ClusterQueue (GPU quota per site) and its LocalQueue."""
        for (site, pool), name in zip(POOLS, self.flavors, strict=True):
            labels = {"gridloop.io/site": site, "gridloop.io/pool": pool}
            self._create_cluster("resourceflavors", name, {"nodeLabels": labels})
        flavors = [
            {
                "name": name,
                "resources": [
                    {"name": "cpu", "nominalQuota": "10000"},
                    {"name": "memory", "nominalQuota": "100Ti"},
                    {"name": GPU, "nominalQuota": str(gpus[site])},
                ],
            }
            for (site, _pool), name in zip(POOLS, self.flavors, strict=True)
        ]
        spec = {
            "cohortName": self.prefix,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.namespace}},
            "resourceGroups": [{"coveredResources": ["cpu", "memory", GPU], "flavors": flavors}],
            "flavorFungibility": {
                "whenCanBorrow": "TryNextFlavor",
                "whenCanPreempt": "TryNextFlavor",
            },
        }
        self._create_cluster("clusterqueues", self.queue, spec, annotations or {})
        self.custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            self.namespace,
            "localqueues",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "LocalQueue",
                "metadata": {"name": "default", "namespace": self.namespace},
                "spec": {"clusterQueue": self.queue},
            },
        )

    def _create_cluster(
        self, plural: str, name: str, spec: dict[str, Any], notes: dict[str, str] | None = None
    ) -> None:
        kind = {"resourceflavors": "ResourceFlavor", "clusterqueues": "ClusterQueue"}[plural]
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": kind,
            "metadata": {"name": name, "annotations": notes or {}},
            "spec": spec,
        }
        self.custom.create_cluster_custom_object(GROUP, VERSION, plural, body)

    def delete(self) -> None:
        """The team's Jobs first (their Workloads hold quota), then the queues and flavors."""
        for job in self.batch.list_namespaced_job(self.namespace).items:
            self.batch.delete_namespaced_job(
                job.metadata.name, self.namespace, propagation_policy="Background"
            )
        for plural, name in (
            ("clusterqueues", self.queue),
            *(("resourceflavors", f) for f in self.flavors),
        ):
            try:
                self.custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
            except ApiException as err:
                if err.status != 404:
                    raise

    def cluster_queue(self) -> dict[str, Any]:
        obj: dict[str, Any] = self.custom.get_cluster_custom_object(
            GROUP, VERSION, "clusterqueues", self.queue
        )
        return obj

    def quota(self, site: str) -> int:
        """The team's GPU nominalQuota in the site's flavor, now."""
        flavor = self.flavor_of(site)
        for group in self.cluster_queue()["spec"]["resourceGroups"]:
            for f in group["flavors"]:
                if f["name"] == flavor:
                    return next(int(r["nominalQuota"]) for r in f["resources"] if r["name"] == GPU)
        raise KeyError(flavor)

    def annotate(self, notes: dict[str, str | None]) -> None:
        self.custom.patch_cluster_custom_object(
            GROUP, VERSION, "clusterqueues", self.queue, {"metadata": {"annotations": notes}}
        )

    def submit(self, name: str, gpus: int = 8, runs_for: str = "1h") -> None:
        """A one-pod Job asking for `gpus` GPUs through the team's LocalQueue."""
        job = gpu_job(name, "default", gpus, runs_for)
        self.batch.create_namespaced_job(self.namespace, job)
        self.submitted.append(name)

    def finish(self, names: list[str], timeout: float = 30.0) -> None:
        """Delete these Jobs and wait until Kueue has let go of their quota."""
        for name in names:
            self.batch.delete_namespaced_job(name, self.namespace, propagation_policy="Background")
        deadline = time.monotonic() + timeout
        while set(names) & set(self.placements()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"Workloads of {names} still there after {timeout:.0f}s")
            time.sleep(0.1)

    def placements(self) -> dict[str, Placement]:
        """Every Job's Workload: the flavor it was admitted in, or why it waits."""
        items = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "workloads"
        )["items"]
        out = {}
        for wl in items:
            owners = [o["name"] for o in wl["metadata"].get("ownerReferences", [])]
            if not owners:
                continue
            status = wl.get("status") or {}
            conditions = {c["type"]: c for c in status.get("conditions", [])}
            finished = conditions.get("Finished", {}).get("status") == "True"
            admitted = conditions.get("Admitted", {}).get("status") == "True"
            flavor = None
            if admitted or finished:
                sets = (status.get("admission") or {}).get("podSetAssignments") or [{}]
                flavor = (sets[0].get("flavors") or {}).get(GPU)
            pending = conditions.get("QuotaReserved", {})
            reason = "" if admitted else pending.get("message") or pending.get("reason", "")
            out[owners[0]] = Placement(owners[0], flavor, reason, finished)
        return out

    def wait_placed(self, names: list[str], timeout: float = 30.0) -> dict[str, Placement]:
        """Wait until each named Job is admitted or pending with a reason from Kueue."""
        deadline = time.monotonic() + timeout
        while True:
            seen = self.placements()
            placed = {n: seen[n] for n in names if n in seen and (seen[n].flavor or seen[n].reason)}
            if len(placed) == len(names) or time.monotonic() > deadline:
                return placed
            time.sleep(0.2)

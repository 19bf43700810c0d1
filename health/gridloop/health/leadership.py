"""Leader election through a coordination.k8s.io Lease: one replica acts.

A replica acts only in a cycle in which it holds the lease. It takes the lease
when nobody holds it or the holder has not renewed it for `duration_s`; a
conflicting write (another replica got there first) means "not leader this
time". Losing the lease mid-cycle costs at most one cycle of double work, and
every action is idempotent on the node (the patches carry resourceVersions).
"""

from __future__ import annotations

import datetime as dt

from kubernetes import client
from kubernetes.client.rest import ApiException


class Lease:
    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        identity: str,
        name: str = "gridloop-health",
        duration_s: int = 15,
    ) -> None:
        self.coord = client.CoordinationV1Api(api)
        self.namespace, self.name, self.identity = namespace, name, identity
        self.duration_s = duration_s

    def hold(self, now: dt.datetime | None = None) -> bool:
        """Acquire or renew; True when this replica is the leader for the next period."""
        now = now or dt.datetime.now(dt.UTC)
        try:
            lease = self.coord.read_namespaced_lease(self.name, self.namespace)
        except ApiException as err:
            if err.status != 404:
                raise
            return self._create(now)
        spec = lease.spec
        holder = spec.holder_identity
        renewed = spec.renew_time or spec.acquire_time
        expired = renewed is None or (now - renewed).total_seconds() > (
            spec.lease_duration_seconds or self.duration_s
        )
        if holder != self.identity and not expired:
            return False
        if holder != self.identity:
            spec.acquire_time = now
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
        spec.holder_identity = self.identity
        spec.renew_time = now
        spec.lease_duration_seconds = self.duration_s
        try:
            self.coord.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as err:
            if err.status == 409:  # someone else renewed or took it first
                return False
            raise
        return True

    def _create(self, now: dt.datetime) -> bool:
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
            spec=client.V1LeaseSpec(
                holder_identity=self.identity,
                lease_duration_seconds=self.duration_s,
                acquire_time=now,
                renew_time=now,
                lease_transitions=0,
            ),
        )
        try:
            self.coord.create_namespaced_lease(self.namespace, body)
        except ApiException as err:
            if err.status == 409:
                return False
            raise
        return True

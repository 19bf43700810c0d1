"""Leader election through a coordination.k8s.io Lease: one replica acts.

A replica acts only in a cycle in which it holds the lease. It takes the lease
when nobody holds it or the holder has not renewed it for `duration_s`; a
conflicting write (another replica got there first) means "not leader this
time". Losing the lease mid-cycle costs at most one cycle of double work, and
every action is idempotent on the node (the patches carry resourceVersions).

A leader renews at most every `renew_every_s` (client-go's retry period, 2 s), not every
cycle: within that time its lease, good for `duration_s`, cannot have been taken, and a
cycle saves a read and a write on the API server.
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
        renew_every_s: float = 2.0,
    ) -> None:
        self.coord = client.CoordinationV1Api(api)
        self.namespace, self.name, self.identity = namespace, name, identity
        self.duration_s, self.renew_every_s = duration_s, renew_every_s
        self._renewed: dt.datetime | None = None  # when this replica last wrote the lease

    def hold(self, now: dt.datetime | None = None) -> bool:
        """Acquire or renew; True when this replica is the leader for the next period."""
        now = now or dt.datetime.now(dt.UTC)
        if self._renewed and 0 <= (now - self._renewed).total_seconds() < self.renew_every_s:
            return True
        self._renewed = None
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
        if spec.acquire_time:  # the one read back goes out again: in the server's format too
            spec.acquire_time = _micro_time(spec.acquire_time)
        spec.holder_identity = self.identity
        spec.renew_time = _micro_time(now)
        spec.lease_duration_seconds = self.duration_s
        try:
            self.coord.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as err:
            if err.status == 409:  # someone else renewed or took it first
                return False
            raise
        self._renewed = now
        return True

    def _create(self, now: dt.datetime) -> bool:
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
            spec=client.V1LeaseSpec(
                holder_identity=self.identity,
                lease_duration_seconds=self.duration_s,
                acquire_time=_micro_time(now),
                renew_time=_micro_time(now),
                lease_transitions=0,
            ),
        )
        try:
            self.coord.create_namespaced_lease(self.namespace, body)
        except ApiException as err:
            if err.status == 409:
                return False
            raise
        self._renewed = now
        return True


def _micro_time(at: dt.datetime) -> str:
    """A MicroTime as the API server parses it. The client would send `isoformat()`, which
    drops the fraction at a whole second ("08:00:00+00:00"): the server refuses that."""
    return at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

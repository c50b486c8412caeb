"""A coordination.k8s.io Lease, so that exactly one loadext replica rebalances.

The holder renews it every cycle; another replica takes it over only once it has not been
renewed for `duration` seconds. Every write carries the Lease's resourceVersion, so two
replicas racing for it cannot both win: the loser's write is refused (409). Before each
eviction the holder reads the Lease again (`still_held`): a replica that lost it mid-cycle (an
SRE deleted it, or the API server was away long enough for another to take over) stops there.
"""

from __future__ import annotations

import logging
import os
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from loadext.sources.kube import API_ERRORS

log = logging.getLogger(__name__)

NAME = "loadext-rebalancer"


def holder_identity() -> str:
    """This process: its pod name and a random suffix (two processes of one pod differ)."""
    return f"{os.environ.get('HOSTNAME', 'loadext')}_{uuid.uuid4().hex[:8]}"


class Lease:
    def __init__(self, api: Any, namespace: str, identity: str, duration: float = 90.0, name: str = NAME) -> None:
        self._api = client.CoordinationV1Api(api.api_client)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration = duration
        self._held = False

    def hold(self) -> bool:
        """Take or renew the Lease; whether this replica holds it now. Never raises."""
        try:
            held = self._hold(datetime.now(UTC))
        except API_ERRORS as exc:
            status = getattr(exc, "status", None)
            if status != 409:  # 409: another replica wrote first, which is the Lease doing its job
                log.warning("rebalancer Lease %s/%s: %s", self.namespace, self.name, status or exc)
            held = False
        if held != self._held:
            log.info("rebalancer Lease %s/%s %s", self.namespace, self.name, "taken" if held else "not held")
            self._held = held
        return held

    def still_held(self) -> bool:
        """Read it again: whether it still names this replica and has not expired."""
        try:
            lease = self._api.read_namespaced_lease(self.name, self.namespace, _request_timeout=5)
        except API_ERRORS:
            return False
        return bool(lease.spec.holder_identity == self.identity and not self._expired(lease, datetime.now(UTC)))

    def _hold(self, now: datetime) -> bool:
        try:
            lease = self._api.read_namespaced_lease(self.name, self.namespace, _request_timeout=5)
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = client.V1Lease(
                metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                spec=self._spec(now, acquired=now, transitions=0),
            )
            self._api.create_namespaced_lease(self.namespace, body, _request_timeout=5)
            return True
        spec = lease.spec
        if spec.holder_identity != self.identity and not self._expired(lease, now):
            return False
        ours = spec.holder_identity == self.identity
        lease.spec = self._spec(
            now,
            acquired=spec.acquire_time if ours and spec.acquire_time else now,
            transitions=(spec.lease_transitions or 0) + (0 if ours else 1),
        )
        self._api.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=5)  # resourceVersion kept
        return True

    def _spec(self, now: datetime, acquired: datetime, transitions: int) -> Any:
        return client.V1LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=int(self.duration),
            acquire_time=acquired,
            renew_time=now,
            lease_transitions=transitions,
        )

    def _expired(self, lease: Any, now: datetime) -> bool:
        spec = lease.spec
        if not spec.holder_identity or spec.renew_time is None:
            return True
        duration = timedelta(seconds=spec.lease_duration_seconds or self.duration)
        renewed: datetime = spec.renew_time
        return renewed + duration < now

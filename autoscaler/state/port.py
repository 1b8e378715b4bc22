"""The state-store port: everything the stages keep across a restart or a failover.

Each stage owns the narrow port it uses: the alert stage
(:class:`~autoscaler.alerting.store.AlertStore`), the GitHub poll's ETag cache
(:class:`~autoscaler.observe.github.cache.PollCacheStore`), the scaler's memory of
back-offs and pending terminations (:class:`~autoscaler.scale.memory.ScalingMemoryStore`),
the job-retry ledger (:class:`~autoscaler.job_retry.ledger.JobRetryStore`), the ledger of
runner credentials handed to instances (:class:`~autoscaler.scale.handover.HandoverStore`)
and the webhook job index (:class:`~autoscaler.observe.github.webhook_rows.JobIndexStore`).
:class:`StateStore` is their union: what a backend implements, plus :meth:`close`.

Every method raises only :class:`autoscaler.errors.StateError` (the backend translates
its vendor's errors), or :class:`autoscaler.errors.NotLeaderError` when a write is fenced
off because this controller is not (or no longer) the leader. The job index's event writes
are the exception: any replica behind the load balancer records the deliveries it
receives, so they are unfenced writes made idempotent by their condition
(:mod:`autoscaler.state.dynamodb_jobs`); the reconcile's changes are the leader's.
"""

from __future__ import annotations

from typing import Protocol

from autoscaler.alerting.store import AlertStore
from autoscaler.job_retry.ledger import JobRetryStore
from autoscaler.observe.github.cache import PollCacheStore
from autoscaler.observe.github.webhook_rows import JobIndexStore
from autoscaler.scale.handover import HandoverStore
from autoscaler.scale.memory import ScalingMemoryStore


class StateStore(
    AlertStore,
    PollCacheStore,
    ScalingMemoryStore,
    JobRetryStore,
    HandoverStore,
    JobIndexStore,
    Protocol,
):
    """Everything that must survive a restart, in one backend."""

    #: What messages call the store (a file's path, ``dynamodb table NAME``).
    path: str

    def close(self) -> None:
        """Release the backend; later calls raise a StateError (code ``closed``)."""
        ...

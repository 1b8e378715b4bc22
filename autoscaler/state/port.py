"""The state-store port: what the stages keep across a restart or a failover.

Narrow and owned by its users: the alert stage and its delivery workers
(:class:`AlertStore`), the GitHub poll's ETag cache
(:class:`~autoscaler.observe.github.cache.PollCacheStore`), the scaler's memory of
back-offs and pending terminations (:class:`~autoscaler.scale.memory.ScalingMemoryStore`),
the job-retry ledger (:class:`~autoscaler.job_retry.ledger.JobRetryStore`) and ephemeral
runners' JIT ledger (:class:`~autoscaler.scale.ephemeral.JitLedgerStore`).
A backend implements all of them plus :meth:`StateStore.close`. Every method raises only
:class:`autoscaler.errors.StateError` (the backend translates its vendor's errors);
:class:`autoscaler.errors.NotLeaderError` when a write is fenced off because this
controller is not (or no longer) the leader.

The webhook job index is the sixth user: the
:class:`~autoscaler.observe.github.webhook_rows.JobIndexStore` port owned by the webhook
source. Unlike everything here its event writes are not the leader's alone (any replica
behind the load balancer records the events it receives), so they are unfenced writes made
idempotent by their condition (:mod:`autoscaler.state.dynamodb_jobs`); the reconcile's
changes are the leader's.

:class:`Leadership` is what the controller asks before a tick acts, and :class:`ActionGate`
what an action (a scale call, a notification) asks right before it happens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from autoscaler.alerting.lifecycle import AlertState, Notification
from autoscaler.job_retry.ledger import JobRetryStore
from autoscaler.observe.github.cache import PollCacheStore
from autoscaler.observe.github.webhook_rows import JobIndexStore
from autoscaler.scale.ephemeral import JitLedgerStore
from autoscaler.scale.memory import ScalingMemoryStore


@dataclass(frozen=True)
class OutboxItem:
    """One notification still owed to one receiver."""

    id: str
    """The backend's key for it (opaque; handed back to mark it)."""
    receiver: str
    notification: Notification
    attempts: int = 0
    last_error: str | None = None


class AlertStore(Protocol):
    """Alert states, the outbox of notifications owed, and the GitHub issue numbers the
    ``github_issue`` receiver keeps."""

    def load_states(self) -> dict[str, AlertState]:
        """Every stored alert state by fingerprint."""
        ...

    def save(
        self, states: Mapping[str, AlertState], outbox: Sequence[tuple[str, Notification]] = ()
    ) -> None:
        """Make ``states`` the stored states and append ``outbox`` ((receiver, notification)
        pairs), atomically per transition: a state is never stored without the
        notifications its transition owes, nor the other way round."""
        ...

    def pending(self, receiver: str | None = None) -> list[OutboxItem]:
        """Notifications not yet delivered (to ``receiver``), oldest first."""
        ...

    def mark_delivered(self, item_id: str) -> None:
        """The receiver confirmed it (or refused it for good): never sent again."""
        ...

    def mark_failed(self, item_id: str, error: str) -> None:
        """An attempt failed: count it and keep the error; it stays owed."""
        ...

    def issue_number(self, receiver: str, fingerprint: str) -> int | None: ...

    def set_issue_number(self, receiver: str, fingerprint: str, number: int | None) -> None: ...


class StateStore(
    AlertStore,
    PollCacheStore,
    ScalingMemoryStore,
    JobRetryStore,
    JitLedgerStore,
    JobIndexStore,
    Protocol,
):
    """Everything that must survive a restart, in one backend."""

    #: What messages call the store (a file's path, ``dynamodb table NAME``).
    path: str

    def close(self) -> None:
        """Release the backend; later calls raise a StateError (code ``closed``)."""
        ...


class Leadership(Protocol):
    """Whether this controller may act now (the leader lease, held with its margin)."""

    def acting(self) -> bool: ...

    def token(self) -> tuple[str, int] | None:
        """(owner, epoch) while acting, else None."""
        ...


class ActionGate(Protocol):
    """Asked right before an action that only the leader may take: a scale call, a
    termination, a deregistration, a notification. False: skip it (it is counted)."""

    def allows(self, action: str, detail: str = "") -> bool: ...


class SoleWriter:
    """The gate and leadership of a controller that needs no lease (the SQLite backend:
    its file lock already keeps a second controller out): always acting."""

    def acting(self) -> bool:
        return True

    def allows(self, action: str, detail: str = "") -> bool:
        return True

"""What the alert stage keeps across a restart or a failover: alert states, the outbox of
notifications still owed, and the GitHub issue numbers the ``github_issue`` receiver keeps.

The port is owned here, by its user; the state backends (:mod:`autoscaler.state`)
implement it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from autoscaler.alerting.lifecycle import AlertState, Notification


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

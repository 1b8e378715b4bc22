"""Pure: the webhook job index as rows in the state store, and its ordering rules.

Why rows: with two controllers (``state.backend: dynamodb``) a delivery may reach either
(the load balancer picks), and the leader may die. The index therefore lives in the state
store, one row per job id, written by whichever replica received the event and read by
the leader every tick; a follower that takes over reads the same rows.

A row is an observation, not a leader action: it is written unfenced, by a *conditional*
write that encodes the rules of :class:`~autoscaler.observe.github.webhook_index.JobIndex`
(:func:`decide`), so two replicas racing, a redelivery, or an event older than the row
cannot move a job back whatever order the writes land in:

- a ``completed`` row (a tombstone) is final: a later ``queued`` is ``stale``, a second
  ``completed`` a ``duplicate``;
- a lower rank than the row's is ``stale`` (``queued`` after ``in_progress``);
- the same rank with the same job is a ``duplicate``; with a changed job (``queued`` then
  ``waiting``, a runner name filled in) it is ``accepted``.

The reconcile (the leader's poll) writes with a weaker condition (:func:`poll_may_write`):
the poll is the truth for live jobs, but never over a tombstone nor over a row further
along than the listing (an event newer than the page).

Rows expire (``expires_at``): a tombstone after :data:`DONE_TTL` (as long as the in-memory
index remembers one), a live row :data:`LIVE_TTL` after its last write (the reconcile
drops those GitHub no longer lists long before; the TTL only clears what a dead
deployment left behind).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from autoscaler.errors import StateError

#: The rank of an ``in_progress`` row.
IN_PROGRESS = 1
#: The rank of a ``completed`` row: final.
DONE = 2
#: Seconds a tombstone is kept (GitHub's automatic retries are long over by then).
DONE_TTL = 6 * 3600
#: Seconds a live row is kept after its last write, when no reconcile removed it.
LIVE_TTL = 2 * 86400
#: ``via`` of a row written from a delivery, and of one the reconcile wrote.
EVENT, POLL = "event", "poll"


class Outcome(enum.Enum):
    """What applying one event did (the ``result`` label of the events counter)."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    STALE = "stale"


@dataclass(frozen=True, slots=True)
class IndexRow:
    """One job of the index as stored."""

    job_id: int
    rank: int
    """0 queued/waiting, 1 in progress, 2 completed (:data:`DONE`)."""
    data: str
    """The job (live) or its completion (done) as canonical JSON: equal jobs, equal text."""
    received_at: float
    """Unix time the receiving replica took the event (or the reconcile wrote the row)."""
    via: str = EVENT
    """:data:`EVENT` or :data:`POLL`; only events tell that webhooks flow."""

    @property
    def expires_at(self) -> int:
        return int(self.received_at) + (DONE_TTL if self.rank >= DONE else LIVE_TTL)


def decide(current: IndexRow | None, new: IndexRow) -> Outcome:
    """The outcome of writing event row ``new`` over ``current`` (the stored row, if any)."""
    if current is None:
        return Outcome.ACCEPTED
    if current.rank >= DONE:
        return Outcome.DUPLICATE if new.rank >= DONE else Outcome.STALE
    if new.rank < current.rank:
        return Outcome.STALE
    if new.rank == current.rank and new.data == current.data:
        return Outcome.DUPLICATE
    return Outcome.ACCEPTED


def poll_may_write(current: IndexRow | None, new: IndexRow) -> bool:
    """May the reconcile write ``new`` over ``current``? Not over a tombstone, not back."""
    return current is None or (current.rank < DONE and current.rank <= new.rank)


@dataclass(frozen=True, slots=True)
class Changes:
    """The event rows a store accepted since a reader's cursor, in the order they landed
    (one writer's order; across replicas only roughly, which :func:`decide` makes safe)."""

    rows: tuple[IndexRow, ...]
    cursor: object
    """Where the next read starts: pass it back (opaque, the backend's own)."""
    complete: bool = True
    """False: rows were lost to this reader (it fell too far behind, or a writer's log
    expired before it was read): read the index whole again."""


class JobIndexStore(Protocol):
    """The index's rows in the state store (both backends implement it).

    ``record_job_events`` is any replica's, unfenced and idempotent; ``reconcile_job_index``
    the leader's (fenced where the backend fences). A process reads the index whole once
    (``load_job_index``) and then follows what was accepted since
    (``job_index_changes``). Every method raises only
    :class:`autoscaler.errors.StateError`."""

    def record_job_events(self, rows: Sequence[IndexRow]) -> list[Outcome | StateError]:
        """Write each event row that :func:`decide` accepts, in order, atomically against
        any other writer, and durably before returning: the outcome of each row, or the
        error that kept it out (a backend that writes in several requests can fail some and
        not others). Raises StateError when none could be written."""
        ...

    def load_job_index(self, now: float) -> list[IndexRow]:
        """Every row not expired at ``now`` (unix seconds), by job id."""
        ...

    def job_index_changes(self, cursor: object | None) -> Changes:
        """The event rows accepted since ``cursor`` (by any writer), and the cursor to pass
        next time. ``None``: nothing, only the cursor of now (take it before
        :meth:`load_job_index`: a row accepted in between is read twice, never missed)."""
        ...

    def prune_job_index(self, now: float) -> None:
        """Delete the rows expired at ``now`` (a backend whose TTL deletes them does
        nothing)."""
        ...

    def reconcile_job_index(self, put: Sequence[IndexRow], drop: Sequence[IndexRow]) -> None:
        """The reconcile's changes: write ``put`` where :func:`poll_may_write` allows, and
        delete each ``drop`` row only if it is still exactly as read (a newer event stays)."""
        ...

    def job_index_version(self) -> str | None:
        """A token that changes whenever a ``queued`` event is accepted by any replica (the
        leader polls it to wake at once); None when no other process can write (SQLite)."""
        ...

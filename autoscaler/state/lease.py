"""The leader lease: which of several controllers sharing one state table may act.

Pure logic over a three-call port (:class:`LeaseTable`: read, create if absent, replace if
unchanged), with the monotonic clock passed in. :mod:`autoscaler.state.keeper` calls
:meth:`Lease.step` on a thread; :mod:`autoscaler.state.dynamodb_lease` implements the table.

**Why no expiry timestamp.** DynamoDB has no clock a client can read, and comparing the
leader's wall clock with a follower's would make safety depend on NTP. So the lease item
carries no expiry: it carries a *version* (a fresh random string on every write, renewals
included) and the *duration* its holder promises to stay within. Expiry is judged from
DynamoDB's serialised view of that item and each process's own monotonic clock only:

- the **leader** notes its monotonic time ``t0`` before sending a renewal; once the
  conditional write succeeds it may act until ``t0 + duration``, minus a safety
  ``margin`` (a fifth of the duration) for clock-rate drift and for an action that was
  checked just before the deadline;
- a **follower** reads the item (strongly consistent) and notes the monotonic time each
  version was *first seen*, after the read returned. That is later than the leader's
  ``t0`` for that version (the leader sent the write before DynamoDB applied it, and it
  was applied before it was served). If the version is unchanged ``duration`` after it
  was first seen, the leader cannot be acting any more, and the follower takes over with
  a write conditional on that very version (compare-and-set): a renewal that lands first
  makes the takeover fail, and two followers racing cannot both win.

**Fencing.** The takeover increments the *epoch*; every state write of a leader is a
transaction conditional on ``owner`` and ``epoch`` being its own
(:mod:`autoscaler.state.dynamodb_lease`). A leader that paused (GC, SIGSTOP, a network partition)
past its lease and wakes up finds its ``acting()`` false, and any write it had already
decided to make fails: it cannot write after its successor took over. What cannot be
fenced (a scale call to AWS, a POST to a receiver) is preceded by ``acting()`` with the
margin left; docs/two-controllers.md lists what remains.

A leader that stops cleanly releases the lease (``owner`` empty): a follower takes it at
its next step instead of waiting out the duration (rolling deploys). A process that finds
its *own* owner id in the item (a takeover whose answer was lost, or a lease it let lapse
that nobody took since) takes it again at once, conditional on that version.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from autoscaler.errors import StateError

#: The leader stops acting with this share of its lease still left.
MARGIN_SHARE = 0.2
#: The leader renews every this share of the lease (three renewals per lease).
RENEW_SHARE = 1 / 3
#: A follower reads the lease every this share of it (and when the one it saw expires).
WATCH_SHARE = 1 / 6


@dataclass(frozen=True)
class LeaseRecord:
    """The lease item as stored."""

    owner: str
    """The holder's id (host, pid, random); ``""`` once released."""
    epoch: int
    """Incremented on every change of holder: the fencing token of every state write."""
    version: str
    """New on every write (renewals too): what a follower watches for progress."""
    duration: float
    """Seconds the holder may act after sending its last successful write."""
    acquired_at: float = 0.0
    """Wall time (unix) the holder took it; for people and tests, never for decisions."""
    renewed_at: float = 0.0
    """Wall time (unix) of the last renewal; for people, never for decisions."""


class LeaseTable(Protocol):
    """Where the lease item lives. Each call raises only StateError."""

    def read_lease(self) -> LeaseRecord | None:
        """The item, strongly consistent; None when there is none yet."""
        ...

    def create_lease(self, record: LeaseRecord) -> bool:
        """Write ``record`` if no lease item exists; False if one does."""
        ...

    def replace_lease(self, expected_version: str, record: LeaseRecord) -> bool:
        """Write ``record`` if the stored item's version is ``expected_version``; False if
        not (someone else wrote it since)."""
        ...


class Event(enum.Enum):
    ACQUIRED = "acquired"
    RENEWED = "renewed"
    FOLLOWING = "following"
    LOST = "lost"
    RELEASED = "released"
    ERROR = "error"


@dataclass(frozen=True)
class Step:
    """What one step did; ``record`` is the lease item as this process last saw it."""

    event: Event
    record: LeaseRecord | None = None
    error: StateError | None = None
    previous: LeaseRecord | None = None
    """ACQUIRED: the item it replaced (None: there was none)."""


class Lease:
    """One process's view of the lease. Thread-safe: the keeper thread steps it, the tick
    and delivery workers ask :meth:`acting` and :meth:`token`."""

    def __init__(
        self,
        table: LeaseTable,
        owner: str,
        duration: float,
        *,
        monotonic: Callable[[], float],
        wall_clock: Callable[[], float],
        new_version: Callable[[], str],
        table_name: str = "the state table",
    ) -> None:
        self.table = table
        #: How log lines name where the lease lives.
        self.table_name = table_name
        self.owner = owner
        self.duration = duration
        self.margin = duration * MARGIN_SHARE
        self._monotonic = monotonic
        self._wall = wall_clock
        self._new_version = new_version
        self._lock = threading.Lock()
        self._mine: LeaseRecord | None = None
        self._held_until = 0.0
        self._seen: LeaseRecord | None = None
        self._seen_at = 0.0
        self._last: Event | None = None

    # --- asked by the stages

    def acting(self) -> bool:
        """True while this process holds the lease with more than the margin left."""
        with self._lock:
            return self._mine is not None and self._monotonic() < self._held_until - self.margin

    def token(self) -> tuple[str, int] | None:
        """(owner, epoch) to fence a write with, while :meth:`acting`; else None."""
        with self._lock:
            mine = self._mine
            if mine is None or self._monotonic() >= self._held_until - self.margin:
                return None
            return mine.owner, mine.epoch

    @property
    def holder(self) -> LeaseRecord | None:
        """The lease item as last seen (ours when leading)."""
        with self._lock:
            return self._mine if self._mine is not None else self._seen

    def next_step_in(self) -> float:
        """Seconds until :meth:`step` should run again."""
        with self._lock:
            watch = self.duration * WATCH_SHARE
            if self._last is Event.ERROR:  # try again soon: a leader has two more chances
                return watch
            if self._mine is not None:
                return self.duration * RENEW_SHARE
            if self._seen is None:
                return watch
            due = self._seen_at + max(self._seen.duration, 0.0) - self._monotonic()
            return max(0.0, min(watch, due))

    # --- the keeper's side

    def step(self) -> Step:
        """Renew (leader) or watch and take over when due (follower). Never raises."""
        with self._lock:
            mine, lapsed = self._mine, self._monotonic() >= self._held_until
        if mine is not None and lapsed:
            self._demote()
            return self._done(Step(Event.LOST, mine))
        try:
            step = self._renew(mine) if mine is not None else self._watch()
        except StateError as exc:
            step = Step(Event.ERROR, self.holder, exc)
        return self._done(step)

    def release(self) -> Step:
        """Give the lease up (a clean stop): a follower takes it at its next step."""
        with self._lock:
            mine = self._mine
        if mine is None:
            return self._done(Step(Event.FOLLOWING, self._seen))
        self._demote()
        gone = replace(mine, owner="", version=self._new_version(), renewed_at=self._wall())
        try:
            released = self.table.replace_lease(mine.version, gone)
        except StateError as exc:
            return self._done(Step(Event.ERROR, mine, exc))
        return self._done(Step(Event.RELEASED if released else Event.LOST, gone))

    def _done(self, step: Step) -> Step:
        with self._lock:
            self._last = step.event
        return step

    def _demote(self) -> None:
        with self._lock:
            self._mine, self._held_until = None, 0.0
            self._seen = None

    def _renew(self, mine: LeaseRecord) -> Step:
        for _ in range(2):  # a second try only after adopting our own unconfirmed renewal
            sent = self._monotonic()
            new = replace(mine, version=self._new_version(), renewed_at=self._wall())
            if self.table.replace_lease(mine.version, new):
                with self._lock:
                    self._mine, self._held_until = new, sent + self.duration
                return Step(Event.RENEWED, new)
            stored = self.table.read_lease()
            if stored is None or stored.owner != self.owner or stored.epoch != mine.epoch:
                self._demote()
                return Step(Event.LOST, stored)
            # Our own renewal whose answer was lost applied: adopt its version (the lease
            # still ends where the last confirmed renewal said) and renew from it.
            with self._lock:
                self._mine = mine = stored
        return Step(Event.RENEWED, mine)

    def _watch(self) -> Step:
        stored = self.table.read_lease()
        seen_at = self._monotonic()
        if stored is None:
            return self._take(None)
        if stored.owner in ("", self.owner):
            # Released, or ours: a takeover (or renewal) of ours whose answer was lost, or a
            # lease this process let lapse that nobody took since. The write is conditional
            # on this very version, so no other process can hold it: take it now rather
            # than wait a whole lease for our own record to expire.
            return self._take(stored)
        with self._lock:
            if self._seen is None or stored.version != self._seen.version:
                self._seen, self._seen_at = stored, seen_at
                return Step(Event.FOLLOWING, stored)
            due = seen_at - self._seen_at >= stored.duration
        return self._take(stored) if due else Step(Event.FOLLOWING, stored)

    def _take(self, previous: LeaseRecord | None) -> Step:
        now = self._wall()
        epoch = 1 if previous is None else previous.epoch + 1
        new = LeaseRecord(self.owner, epoch, self._new_version(), self.duration, now, now)
        sent = self._monotonic()
        if previous is None:
            won = self.table.create_lease(new)
        else:
            won = self.table.replace_lease(previous.version, new)
        if not won:
            return Step(Event.FOLLOWING, previous)
        with self._lock:
            self._mine, self._held_until = new, sent + self.duration
            self._seen = None
        return Step(Event.ACQUIRED, new, previous=previous)

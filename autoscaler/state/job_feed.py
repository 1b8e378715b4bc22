"""The event rows this process's store accepted, in the order they landed, for the readers in
this process (:meth:`~autoscaler.observe.github.webhook_rows.JobIndexStore.job_index_changes`).

Why: a process reads the stored job index once and then keeps it in memory, applying what
was accepted since. Every row this process writes passes through its store, so the store
can hand each reader the rows past its cursor instead of the reader selecting and parsing
the whole index every tick. Both backends keep one (DynamoDB adds the rows other replicas
wrote, from their logs in the table).

A row is kept until every reader has read it, and at most ``capacity`` rows are kept: a
reader that falls further behind is told its read is incomplete (it reads the index whole
again), so a stalled tick never makes this grow. A reader that is gone (its cursor
garbage-collected) holds nothing back.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections import deque
from collections.abc import Iterable

from autoscaler.observe.github.webhook_rows import IndexRow

#: Rows kept for readers that have not read them yet (at 1,000 deliveries a second, a
#: minute of them: a tick falls that far behind only while GitHub takes that long).
CAPACITY = 60_000


class FeedCursor:
    """One reader's place in a :class:`JobFeed`: the number of the next row it reads."""

    __slots__ = ("__weakref__", "next")

    def __init__(self, next_row: int) -> None:
        self.next = next_row


class JobFeed:
    """A bounded, numbered log of accepted rows; thread-safe."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._rows: deque[IndexRow] = deque()
        self._first = 0  # the number of self._rows[0]
        self._readers: weakref.WeakSet[FeedCursor] = weakref.WeakSet()
        self._lock = threading.Lock()

    def append(self, rows: Iterable[IndexRow]) -> None:
        with self._lock:
            if not self._readers:  # no one to read them
                self._first += len(self._rows) + sum(1 for _ in rows)
                self._rows.clear()
                return
            self._rows.extend(rows)
            while len(self._rows) > self.capacity:
                self._rows.popleft()
                self._first += 1

    def open(self) -> FeedCursor:
        """A new reader's cursor, at the end: it reads only what is appended later."""
        with self._lock:
            cursor = FeedCursor(self._first + len(self._rows))
            self._readers.add(cursor)
            return cursor

    def read(self, cursor: FeedCursor) -> tuple[list[IndexRow], bool]:
        """The rows from ``cursor`` on (the cursor moves past them), and False when some were
        dropped before this reader read them."""
        with self._lock:
            end = self._first + len(self._rows)
            complete = cursor.next >= self._first
            count = end - max(cursor.next, self._first)
            rows = list(itertools.islice(reversed(self._rows), count))
            rows.reverse()
            cursor.next = end
            self._readers.add(cursor)
            self._trim()
            return rows, complete

    def _trim(self) -> None:
        """Drop the rows every reader has read."""
        low = min((c.next for c in self._readers), default=self._first + len(self._rows))
        while self._rows and self._first < low:
            self._rows.popleft()
            self._first += 1

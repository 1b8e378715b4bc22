"""Group commit: deliveries are made durable together, each answered once its own row is.

A delivery is acknowledged (202) only after its row is in the state store, durably. One
write a delivery costs one fsync (SQLite) or one request (DynamoDB) each, and serialises
them: the listener's rate is then the disk's. Here the listener's handlers hand their
rows to one committer thread (:meth:`GroupCommit.submit`, which returns at once with a
future) and the committer writes whatever is waiting as one batch
(:meth:`~autoscaler.observe.github.webhook_rows.JobIndexStore.record_job_events`): one
transaction, one fsync. While it writes, the next batch gathers. There is no waiting
window: a lone delivery is written at once, and under load a batch is what arrived
during the previous write, so the batch grows with the rate and the latency stays about
two writes.

A row's future holds its outcome, or the StateError that kept it out of the store (the
handler answers 503 and GitHub marks the delivery failed). Never more than
``max_batch`` rows a write; the queue is bounded by the listener's connections (each
waits for its answer).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from autoscaler.errors import StateError, StateUnusableError
from autoscaler.observe.github.webhook_rows import IndexRow, JobIndexStore, Outcome

log = logging.getLogger(__name__)

#: Rows in one write at most (a SQLite transaction of this many takes a few ms of CPU).
MAX_BATCH = 512


class GroupCommit:
    """One committer thread over ``store``; thread-safe. Started by the first
    :meth:`submit`; :meth:`close` writes what waits, then stops it."""

    def __init__(
        self,
        store: JobIndexStore,
        *,
        max_batch: int = MAX_BATCH,
        on_batch: Callable[[int], None] = lambda _: None,
    ) -> None:
        self.store = store
        self.max_batch = max_batch
        #: Called with each batch's size after it is written (a metric, a test).
        self.on_batch = on_batch
        self._waiting: deque[tuple[IndexRow, Future[Outcome]]] = deque()
        self._ready = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    def submit(self, row: IndexRow) -> Future[Outcome]:
        """Queue ``row`` for the next write; its future completes once it is durable."""
        done: Future[Outcome] = Future()
        with self._ready:
            if self._closed:
                done.set_exception(
                    StateUnusableError(
                        "the job index is closed (the controller is stopping)",
                        path="job index",
                        code="closed",
                        operation="record_job_events",
                    )
                )
                return done
            self._waiting.append((row, done))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="webhook-commit", daemon=True
                )
                self._thread.start()
            self._ready.notify()
        return done

    def close(self, timeout: float = 10.0) -> None:
        """Write what is waiting, then stop (later submits fail with code ``closed``)."""
        with self._ready:
            self._closed = True
            self._ready.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._waiting and not self._closed:
                    self._ready.wait()
                if not self._waiting:
                    return  # closed, and nothing left
                count = min(len(self._waiting), self.max_batch)
                batch = [self._waiting.popleft() for _ in range(count)]
            self._write(batch)

    def _write(self, batch: list[tuple[IndexRow, Future[Outcome]]]) -> None:
        results: Sequence[Outcome | BaseException]
        try:
            results = self.store.record_job_events([row for row, _ in batch])
        except StateError as exc:
            results = [exc] * len(batch)
        except Exception as exc:  # a bug: every handler answers 500, the thread goes on
            log.exception("writing %d webhook rows failed", len(batch))
            results = [exc] * len(batch)
        for (_, done), result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                done.set_exception(result)
            else:
                done.set_result(result)
        self.on_batch(len(batch))

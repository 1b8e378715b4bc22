"""A fixed pool of worker threads fed by a queue: the poll's cost per request stays flat.

A worker takes a task from one queue and puts its outcome on its batch's queue; the
coordinator takes outcomes one at a time. Every step is O(1), whatever the number of
outstanding requests (waiting on a set of thousands of futures is not: each wait scans
them all).

Tasks have a priority (:data:`FIRST`, :data:`BUSY`, :data:`QUIET`): one FIFO per level,
a worker takes from the most urgent non-empty one, so a run discovered late in a poll
(it holds queued jobs) still goes before quiet re-lists when the budget runs short.

A :class:`Batch` is one poll. Cancelling it (the poll's deadline passed, or it ended on an
error) makes workers drop its queued tasks unrun; a task already running finishes (its
request has its own timeout) and its outcome goes to the abandoned batch's queue.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_STOP = object()
CLOSE_WAIT = 2.0
"""Seconds ``close`` waits, in all, for workers to finish their request."""
#: Task priorities, most urgent first: the skeleton (runners, repositories), busy units
#: (with queued jobs, or new), quiet units.
FIRST, BUSY, QUIET = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one task gave: ``value`` or the ``error`` it raised; ``tag`` says what it was."""

    tag: Any
    value: Any = None
    error: BaseException | None = None
    ran: bool = True


class Batch:
    """The tasks of one poll and their outcomes."""

    def __init__(self, pool: WorkerPool) -> None:
        self._pool = pool
        self._outcomes: queue.SimpleQueue[Outcome] = queue.SimpleQueue()
        self.cancelled = threading.Event()
        #: Submitted and not yet taken by :meth:`next` (the coordinator's thread only).
        self.outstanding = 0

    def submit(self, tag: Any, fn: Callable[..., Any], *args: Any, priority: int = BUSY) -> None:
        self.outstanding += 1
        self._pool.put(priority, (self, tag, fn, args))

    def next(self, timeout: float) -> Outcome:
        """The next outcome; raises ``queue.Empty`` after ``timeout`` seconds."""
        outcome = self._outcomes.get(timeout=max(0.0, timeout))
        self.outstanding -= 1
        return outcome

    def cancel(self) -> None:
        self.cancelled.set()

    def _run(self, tag: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        if self.cancelled.is_set():
            self._outcomes.put(Outcome(tag, ran=False))
            return
        try:
            self._outcomes.put(Outcome(tag, fn(*args)))
        except BaseException as exc:  # the coordinator classifies it
            self._outcomes.put(Outcome(tag, error=exc))


class WorkerPool:
    """``size`` daemon threads, started once and reused by every poll."""

    def __init__(self, size: int, name: str = "github") -> None:
        self._queues: tuple[deque[Any], ...] = (deque(), deque(), deque())
        self._ready = threading.Condition()
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
            for i in range(size)
        ]
        for thread in self._threads:
            thread.start()

    def batch(self) -> Batch:
        return Batch(self)

    def put(self, priority: int, task: Any) -> None:
        with self._ready:
            self._queues[priority].append(task)
            self._ready.notify()

    def close(self) -> None:
        with self._ready:
            for _ in self._threads:
                self._queues[FIRST].appendleft(_STOP)
            self._ready.notify_all()
        # One deadline for all of them, not 5 s each: with GitHub hanging every worker sits
        # in a read until its timeout, and a Ctrl-C waited 15 s for the joins one by one.
        # The threads are daemons; one still reading when the deadline passes dies with
        # the process.
        deadline = time.monotonic() + CLOSE_WAIT
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def _take(self) -> Any:
        with self._ready:
            while True:
                for waiting in self._queues:
                    if waiting:
                        return waiting.popleft()
                self._ready.wait()

    def _work(self) -> None:
        while True:
            task = self._take()
            if task is _STOP:
                return
            batch, tag, fn, args = task
            batch._run(tag, fn, args)

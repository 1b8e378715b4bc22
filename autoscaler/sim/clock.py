"""Virtual time: an event queue that jumps from one event to the next, never sleeping.

Time is float seconds from the trace's start. Events at the same instant run in the order
they were scheduled, so a replay is deterministic. A day of jobs is a few hundred thousand
events: each costs one heap push and pop.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any


class VirtualClock:
    """``now`` is whatever the event being run says; ``at`` schedules another."""

    def __init__(self, start: datetime) -> None:
        self.start = start
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = itertools.count()

    def at(self, when: float, callback: Callable[..., None], *args: Any) -> None:
        """Run ``callback(*args)`` at ``when`` (never before now)."""
        heapq.heappush(self._heap, (max(when, self.now), next(self._seq), callback, args))

    def after(self, delay: float, callback: Callable[..., None], *args: Any) -> None:
        self.at(self.now + delay, callback, *args)

    def datetime(self, seconds: float | None = None) -> datetime:
        """``seconds`` (default: now) as a UTC time."""
        return self.start + timedelta(seconds=self.now if seconds is None else seconds)

    def run(self, until: Callable[[], bool], limit: float) -> None:
        """Run events in time order until ``until()`` holds (checked after each event), the
        queue is empty, or the next event lies past ``limit``."""
        heap = self._heap
        while heap and not until():
            when, _, callback, args = heap[0]
            if when > limit:
                break
            heapq.heappop(heap)
            self.now = when
            callback(*args)

    @property
    def pending(self) -> int:
        return len(self._heap)

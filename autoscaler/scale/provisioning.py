"""How long capacity takes to arrive: from our scale-up to a runner online (pure).

``ci_autoscaler_provisioning_seconds{runner_type,pool}`` is the time from the tick that
raised a pool's desired capacity to the first observation of each new runner of that pool
online. Each instance asked for is one entry in the pool's queue of asks; the next new
runner seen online in the pool takes the oldest ask (first in, first out: instances of one
pool are alike, so which ask a runner "answers" does not matter, only that each is
answered once). Asks the pool gave back (capacity released after a failed launch) are
dropped newest first, and an ask nobody answered within ``horizon`` is forgotten (the
instance never came; ``provisioning_failures_total`` counts that).

Each runner that answered an ask is remembered with its ask and the time it came online
(:meth:`ProvisioningClock.answer`): where a job's wait went
(:mod:`autoscaler.observe.waits`) reads both for the job that runner takes.

Memory is bounded: at most ``max_asks`` asks per pool, the ids of runners seen online
in the last observation, and the answers of the last ``horizon`` (at most
``max_answers``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from datetime import datetime, timedelta


class ProvisioningClock:
    """Pairs asks for capacity with runners coming online, per pool."""

    def __init__(
        self, *, horizon: float = 6 * 3600.0, max_asks: int = 1000, max_answers: int = 10_000
    ) -> None:
        self.horizon = timedelta(seconds=horizon)
        self.max_asks = max_asks
        self.max_answers = max_answers
        self._asks: dict[str, deque[datetime]] = {}
        self._online: set[int] | None = None  # None: no observation yet
        #: Runner id -> (the ask it answered, when it was first seen online), oldest first.
        self._answers: dict[int, tuple[datetime, datetime]] = {}

    def answer(self, runner_id: int) -> tuple[datetime, datetime] | None:
        """The ask a runner answered and when it came online (None: it answered none of
        ours, or too long ago)."""
        return self._answers.get(runner_id)

    def asked(self, pool: str, count: int, at: datetime) -> None:
        """``count`` more instances were asked of ``pool`` at ``at``."""
        asks = self._asks.setdefault(pool, deque(maxlen=self.max_asks))
        asks.extend([at] * max(0, count))

    def released(self, pool: str, count: int) -> None:
        """The pool gave ``count`` asked instances back (they will not come)."""
        asks = self._asks.get(pool)
        for _ in range(min(max(0, count), len(asks or ()))):
            assert asks is not None
            asks.pop()

    def pending(self, pool: str) -> int:
        return len(self._asks.get(pool, ()))

    def observed(self, online: Iterable[tuple[int, str]], now: datetime) -> list[tuple[str, float]]:
        """Runners online now as ``(runner id, pool)``; returns ``(pool, seconds)`` for each
        runner newly online that answers an ask. The first observation only learns who is
        already online."""
        current = dict(online)
        before = self._online
        new = [] if before is None else [(r, p) for r, p in current.items() if r not in before]
        self._online = set(current)
        cutoff = now - self.horizon
        for asks in self._asks.values():
            while asks and asks[0] < cutoff:
                asks.popleft()
        out = []
        for runner, pool in sorted(new):
            waiting = self._asks.get(pool)
            if waiting:
                asked = waiting.popleft()
                self._answers[runner] = (asked, now)
                out.append((pool, max(0.0, (now - asked).total_seconds())))
        for runner in [r for r, (_, at) in self._answers.items() if at < cutoff]:
            del self._answers[runner]
        while len(self._answers) > self.max_answers:
            del self._answers[next(iter(self._answers))]
        return out

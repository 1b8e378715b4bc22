"""The thread that keeps the leader lease: renews it (leader) or watches it (follower).

Off the tick on purpose: a tick can take longer than a third of the lease (a slow GitHub,
AWS retries), and the lease must be renewed on time whatever the tick does. The leader
steps every third of ``lease_duration``; a follower every sixth, and exactly when the
version it watches is due to expire (:meth:`autoscaler.state.lease.Lease.next_step_in`).

What it reports:

- ``ci_autoscaler_leader`` reads :meth:`Lease.acting` at scrape time (never stale);
- ``ci_autoscaler_lease_transitions_total{event}`` (acquired, lost, released) and a log
  line for each, naming the epoch and the other holder;
- a failed step (the table missing, forbidden, unreachable) is a ``lease`` problem in
  :class:`autoscaler.health.Health` (``/readyz`` fails, saying why) until a step works
  again, counted in ``state_store_errors_total{operation="lease"}`` and logged: at once
  when the problem changes, then at most once a minute;
- ``on_acquired`` is called when this controller becomes the leader: the service loop
  ticks at once instead of at its next interval, so a takeover acts within a tick.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from autoscaler.errors import StateError
from autoscaler.health import LEASE, Health
from autoscaler.state.lease import Event, Lease, Step
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)

#: A standing error is logged again at most this often (it is counted every time).
REPEAT_LOG_SECONDS = 60.0
#: The shortest wait between two steps (a lease due now is stepped at once, once).
MIN_WAIT = 0.01


class LeaseKeeper:
    """Steps a :class:`Lease` on a daemon thread and reports what happened."""

    def __init__(
        self,
        lease: Lease,
        metrics: Metrics,
        health: Health,
        *,
        on_acquired: Callable[[], None] = lambda: None,
        monotonic: Callable[[], float] = time.monotonic,
        check: Callable[[], None] | None = None,
    ) -> None:
        self.lease = lease
        #: Run before the first lease step until it passes (the table's schema).
        self._check = check
        self.metrics = metrics
        self.health = health
        self.on_acquired = on_acquired
        self._monotonic = monotonic
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_error: tuple[str, float] | None = None
        self._holder: tuple[str, int] | None = None
        metrics.leader.set_function(lambda: 1.0 if lease.acting() else 0.0)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
        self._thread.start()

    def stop(self, *, release: bool = True) -> None:
        """Stop stepping; ``release`` gives the lease up (a follower takes it at once)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if release:
            self.report(self.lease.release())

    def _run(self) -> None:
        while not self._stop.is_set():
            self.step()
            self._stop.wait(max(MIN_WAIT, self.lease.next_step_in()))

    def step(self) -> Step:
        """One step, reported (``once`` calls it directly, before its single tick)."""
        if self._check is not None:
            try:
                self._check()
            except StateError as exc:
                step = Step(Event.ERROR, None, exc)
                self.report(step)
                return step
            self._check = None
        step = self.lease.step()
        self.report(step)
        return step

    def report(self, step: Step) -> None:
        record = step.record
        if step.event is Event.ERROR:
            assert step.error is not None
            self._failed(step)
            return
        self._last_error = None
        self.health.report(LEASE, None)
        if step.event is Event.ACQUIRED:
            assert record is not None
            before = step.previous
            was = "nobody" if before is None else (before.owner or "nobody (released)")
            log.info(
                "leader: took the lease on %s (epoch %d; was %s)",
                self.lease.table_name,
                record.epoch,
                was,
            )
            self.metrics.lease_transitions.labels("acquired").inc()
            self.on_acquired()
        elif step.event is Event.LOST:
            holder = record.owner if record is not None and record.owner else "nobody"
            log.warning("lost the lease (now held by %s): following, acting on nothing", holder)
            self.metrics.lease_transitions.labels("lost").inc()
        elif step.event is Event.RELEASED:
            log.info("released the lease")
            self.metrics.lease_transitions.labels("released").inc()
        elif step.event is Event.FOLLOWING and record is not None:
            seen = (record.owner, record.epoch)
            if seen != self._holder:
                log.info("following: %s leads (epoch %d)", record.owner or "nobody", record.epoch)
            self._holder = seen

    def _failed(self, step: Step) -> None:
        error = step.error
        assert error is not None
        self.metrics.state_store_errors.labels("lease", error.code).inc()
        message = str(error)
        self.health.report(LEASE, message)
        now = self._monotonic()
        last = self._last_error
        if last is None or last[0] != message or now - last[1] >= REPEAT_LOG_SECONDS:
            acting = "still leading until the lease ends" if self.lease.acting() else "not leading"
            log.error("leader lease: %s (%s)", message, acting)
            self._last_error = (message, now)

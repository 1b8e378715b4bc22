"""A JobSource fed by ``workflow_job`` webhooks, with the poll as its reconcile.

Every ``observe`` first applies what the listener queued (:class:`WebhookReceiver`) to
the :class:`JobIndex`, then either

- **reconciles**: runs the wrapped source's poll, makes the index what GitHub
  lists and counts each difference (``webhook_reconcile_corrections_total{kind}``).
  That happens at the first tick, every ``reconcile_interval``, and at *every* tick
  while no delivery has arrived for longer than ``reconcile_interval`` (webhooks that
  stopped are polling as before, not a blind controller). The first and the silent
  ones are the full poll; the interval's, while deliveries flow, is *lean* when the
  wrapped source can (:class:`LeanSource`): every runs listing and the runner list, but
  the jobs of a known run only where :func:`~.reconcile_plan.jobs_reason` says the index
  may be wrong about it (a run whose jobs all run on runners GitHub shows busy is not
  re-read: its steps moved, which costs a counted request and tells the queue nothing); or
- **answers from the index**: the jobs the webhooks told of, and the runners of the
  last poll, each runner's ``busy`` taken from the ``in_progress``/``completed`` events
  since. No request reaches GitHub: this is where the rate limit is saved.

**With the webhook's delivery log** (``deliveries``, ``webhook.hook_id``): a start or
interval reconcile first reads the log (:class:`~.delivery_watch.DeliveryWatch`), which
redelivers failed deliveries. When it shows no delivery lost since its previous read, an
interval reconcile is *vouched*: it lists GitHub's runner list, and the jobs only of the
known runs :func:`~.reconcile_plan.trusted_reason` names (a run whose hour since its last
listing, or its creation, is up: what a delivery GitHub never attempted can hide is
bounded per run); once an hour (:data:`~.reconcile_plan.MAX_AGE_SECONDS`) it lists the
runs listings too, for runs GitHub lists live that the index knows nothing live of, and
drops the index's jobs of runs GitHub no longer lists. It replaces only the runs it
listed; the rest of the index stands (every delivery since their listing arrived). The
log unreadable, incomplete or showing a loss: the lean reconcile as without it.

A failed reconcile raises like a failed poll (the tick keeps its last picture; readiness
and "GitHub unreachable" work as without webhooks) and is tried again at the next tick
at most once per ``poll_interval``.

The index outlives a failed poll and is read on the tick's thread only; the listener
reaches it solely through the receiver's queue.

**With a state store** (``store``; ``run`` always has one) the listener writes each event
to the store's job index instead (:class:`WebhookReceiver`), and every ``observe`` first
reads the whole index back from the store (:meth:`JobIndex.restore`): the leader counts
the deliveries a follower received, and a follower that takes over starts with the
leader's index, without waiting for a reconcile. The reconcile's replacement is written
back (only by the controller that acts: ``acting``), the diff only. A store that cannot be
read keeps the last index for this tick (counted, logged); one that cannot be written to
by the reconcile leaves the store as it was until the next reconcile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from autoscaler.config import WebhookConfig
from autoscaler.domain import Job, JobStatus, Observation, Runner
from autoscaler.errors import StateError, TransientError
from autoscaler.observe.github.delivery_watch import DeliveryWatch
from autoscaler.observe.github.poll import Lean, ListedScope
from autoscaler.observe.github.reconcile_plan import (
    MAX_AGE_SECONDS,
    Reason,
    RunFacts,
    jobs_reason,
    trusted_reason,
    unexplained_busy,
)
from autoscaler.observe.github.webhook_index import JobIndex, Outcome, reconcile_rows
from autoscaler.observe.github.webhook_receiver import Delivery, WebhookReceiver
from autoscaler.observe.github.webhook_rows import EVENT, IndexRow, JobIndexStore, decide
from autoscaler.ports import JobSource
from autoscaler.telemetry import Metrics

log = logging.getLogger("autoscaler.observe.github.webhooks")

#: How often live rows past their TTL are swept from memory and the store pruned (their
#: TTL is days: a minute late is nothing).
EXPIRE_EVERY = timedelta(seconds=60)


@runtime_checkable
class LeanSource(Protocol):
    """A JobSource that can poll for a webhook reconcile, skipping settled runs' jobs."""

    def reconcile(self, now: datetime, lean: Lean, *, runs: bool = True) -> Observation: ...

    def scope(self) -> ListedScope: ...


class WebhookSource:
    """JobSource: the index between reconciles, the wrapped source's poll at them."""

    def __init__(
        self,
        inner: JobSource,
        receiver: WebhookReceiver,
        config: WebhookConfig,
        metrics: Metrics,
        *,
        poll_interval: float,
        index: JobIndex | None = None,
        store: JobIndexStore | None = None,
        acting: Callable[[], bool] = lambda: True,
        deliveries: DeliveryWatch | None = None,
    ) -> None:
        self.inner = inner
        #: The webhook's delivery log (``webhook.hook_id``); None: not read.
        self.deliveries = deliveries
        #: When a reconcile last listed runs (not the runner list alone).
        self._listed_at: datetime | None = None
        self._sweep = timedelta(seconds=MAX_AGE_SECONDS)
        self.receiver = receiver
        self.index = index if index is not None else JobIndex()
        self._interval = timedelta(seconds=config.reconcile_interval)
        self._retry = timedelta(seconds=poll_interval)
        self._metrics = metrics
        self._base: Observation | None = None
        self._reconciled_at: datetime | None = None
        self._failed_at: datetime | None = None
        #: Queued events applied (job id -> when received), for the reaction histogram.
        self.queued_received: dict[int, datetime] = {}
        self.store = store
        self._acting = acting
        #: The live rows as the store holds them (None: not read yet).
        self._rows: dict[int, IndexRow] | None = None
        #: Where this reader is in the store's accepted rows (None: not read yet).
        self._cursor: object | None = None
        self._was_acting = False
        self._expired_at: datetime | None = None
        #: Whole reads of the stored index (the first, takeovers, rows lost): a number
        #: tests and the benchmark read.
        self.whole_reads = 0
        self._logged_at = -1e9

    def __repr__(self) -> str:
        return f"WebhookSource(inner={self.inner!r})"

    # --- JobSource
    def observe(self, now: datetime) -> Observation:
        if self.store is None:
            self.apply(self.receiver.drain(), now)
        else:
            self.load(now)
        reason = self.reconcile_reason(now)
        if reason is None and self._base is not None:
            return self._from_index(now, self._base)
        if self._failed_at is not None and now - self._failed_at < self._retry:
            raise TransientError("GitHub reconcile poll failed; retried within a poll interval")
        clean = self._read_log(now, reason)
        scope: set[int] | None = None  # the runs replaced (None: all)
        swept = True
        try:
            inner = self.inner
            if reason == "interval" and isinstance(inner, LeanSource):
                if clean:
                    swept = self._listed_at is None or now - self._listed_at >= self._sweep
                    observation, scope = self._vouched(now, inner, swept)
                else:
                    observation = inner.reconcile(now, self.lean(now))
            else:
                observation = inner.observe(now)
        except Exception:
            self._failed_at = now
            if self.deliveries is not None:
                # The window this read judged was not listed around: the next read must
                # not vouch for it (a first read vouches for nothing).
                self.deliveries.horizon = None
            raise
        if swept:
            self._listed_at = now
        corrections = self.index.replace(observation.jobs, now, scope)
        self._write_back(now)
        for kind, count in corrections.items():
            self._metrics.webhook_reconcile_corrections.labels(kind).inc(count)
        if any(corrections.values()):
            log.info(
                "webhook reconcile (%s) corrected the index: %s",
                reason,
                ", ".join(f"{n} {kind}" for kind, n in corrections.items() if n),
            )
        return self._reconciled(now, observation, reason or "interval")

    def _vouched(
        self, now: datetime, inner: LeanSource, sweep: bool
    ) -> tuple[Observation, set[int]]:
        """The delivery log vouches for the window: the runner list, the jobs of the runs
        whose bound is up, and with ``sweep`` the runs listings. Returns the observation
        and the runs whose index jobs it replaces: those listed, and the index's runs of a
        repository listed whole that GitHub no longer lists live."""
        observation = inner.reconcile(now, self.lean(now, trusted=True), runs=sweep)
        listed = inner.scope()
        runs = set(listed.fresh)
        for run_id, jobs in self.index.live_by_run().items():
            if jobs[0].repo in listed.repos and run_id not in listed.live:
                runs.add(run_id)
        return observation, runs

    def _read_log(self, now: datetime, reason: str | None) -> bool:
        """The delivery log at a start or interval reconcile (failed deliveries
        redelivered); True: no delivery lost since the last read. Only the acting
        controller reads it. Not while webhooks are silent: a listener that is down
        would fail every redelivery, and the silent reconciles are full polls anyway
        (the first read after them judges nothing)."""
        if self.deliveries is None:
            return False
        if reason not in ("start", "interval") or not self._acting():
            # A follower reads no log (the leader redelivers; the same token's budget).
            self.deliveries.horizon = None
            return False
        return self.deliveries.check(now)

    def _reconciled(self, now: datetime, observation: Observation, reason: str) -> Observation:
        """A reconcile went through: counted, its observation the base of the ticks that
        answer from the index until the next one, the jobs the index's."""
        self._failed_at = None
        self._metrics.webhook_reconciles.labels(reason).inc()
        self._base, self._reconciled_at = observation, now
        self._forget_reactions()
        return replace(observation, jobs=self.index.jobs())

    def remove_runner(self, runner_id: int) -> None:
        self.inner.remove_runner(runner_id)

    def find_runner(self, name: str) -> Runner | None:
        return self.inner.find_runner(name)

    # --- the parts
    def apply(self, deliveries: list[Delivery], now: datetime) -> None:
        """Apply queued deliveries in arrival order; count each outcome."""
        for delivery in deliveries:
            event = delivery.event
            outcome = self.index.apply(event, now)
            self._metrics.webhook_events.labels("workflow_job", event.action, outcome.value).inc()
            if outcome is Outcome.ACCEPTED and event.job.status is JobStatus.QUEUED:
                self.queued_received[event.job.id] = delivery.received_at
        if deliveries:
            self._metrics.webhook_last_event.set(deliveries[-1].received_at.timestamp())

    def load(self, now: datetime) -> None:
        """Bring the index up to date with the store: read it whole at the first tick, when
        this controller starts to act (a takeover) and when rows were lost to it; else
        apply the rows accepted since the last read (every replica's deliveries, in the
        order they landed). Then expire what is due."""
        assert self.store is not None
        acting = self._acting()
        takeover = acting and not self._was_acting
        self._was_acting = acting
        try:
            if self._cursor is None or takeover:
                self._read_whole(now, "start" if self._cursor is None else "takeover")
            else:
                changes = self.store.job_index_changes(self._cursor)
                self._cursor = changes.cursor
                if changes.complete:
                    self._follow(changes.rows, now)
                else:
                    log.warning(
                        "webhook job index: rows accepted since the last tick were lost to "
                        "this reader (it fell behind); reading the stored index whole"
                    )
                    self._read_whole(now, "lost")
        except StateError as exc:
            self._store_failed("load", exc)
            return
        self._expire(now, acting)
        if self.index.last_event_at is not None:
            self._metrics.webhook_last_event.set(self.index.last_event_at.timestamp())

    def _read_whole(self, now: datetime, reason: str) -> None:
        """The stored index, whole; rows accepted from here on are followed. A queued job
        new since the last read starts its reaction clock."""
        assert self.store is not None
        cursor = self.store.job_index_changes(None).cursor  # first: nothing falls between
        rows = self.store.load_job_index(now.timestamp())
        self.whole_reads += 1
        self._metrics.webhook_index_reads.labels(reason).inc()
        before = self._rows
        self._rows = self.index.restore(rows)
        self._cursor = cursor
        self._expired_at = now
        if before is None:
            return
        for job_id, row in self._rows.items():
            old = before.get(job_id)
            if old is None or old.rank != row.rank or old.data != row.data:
                self._note_queued(row, self.index.get(job_id), now)

    def _follow(self, rows: Sequence[IndexRow], now: datetime) -> None:
        """Apply the rows the store accepted since the last read, by the store's own rule
        (:func:`decide`) against what this index holds: a row that lands here out of order
        (two replicas' logs) never moves a job back."""
        assert self._rows is not None
        for row in rows:
            if self.index.completion(row.job_id) is not None:
                continue  # a tombstone is final (decide: duplicate or stale)
            if decide(self._rows.get(row.job_id), row) is not Outcome.ACCEPTED:
                continue
            job = self.index.apply_row(row)
            if job is None:
                self._rows.pop(row.job_id, None)
            else:
                self._rows[row.job_id] = row
                self._note_queued(row, job, now)

    def _note_queued(self, row: IndexRow, job: Job | None, now: datetime) -> None:
        if row.via == EVENT and job is not None and job.status is JobStatus.QUEUED:
            received = datetime.fromtimestamp(row.received_at, now.tzinfo)
            self.queued_received.setdefault(row.job_id, received)

    def _expire(self, now: datetime, acting: bool) -> None:
        """Forget expired tombstones every tick (oldest first: as cheap as what expired);
        sweep the live rows past their TTL, and prune the store, once a minute."""
        self.index.expire(now)
        if self._expired_at is not None and now - self._expired_at < EXPIRE_EVERY:
            return
        self._expired_at = now
        assert self._rows is not None and self.store is not None
        wall = now.timestamp()
        gone = [job_id for job_id, row in self._rows.items() if row.expires_at < wall]
        self.index.drop(gone)
        for job_id in gone:
            del self._rows[job_id]
        if acting:
            try:
                self.store.prune_job_index(wall)
            except StateError as exc:
                self._store_failed("prune", exc)  # the rows expired are pruned next time

    def _write_back(self, now: datetime) -> None:
        """The reconcile's changes to the store (the acting controller's only)."""
        if self.store is None or self._rows is None or not self._acting():
            return
        put, drop = reconcile_rows(self._rows, self.index, now)
        try:
            self.store.reconcile_job_index(put, drop)
        except StateError as exc:
            self._store_failed("reconcile", exc)
            return
        dropped = {row.job_id for row in drop}
        rows = {i: row for i, row in self._rows.items() if i not in dropped}
        self._rows = rows | {row.job_id: row for row in put}

    def _store_failed(self, operation: str, exc: StateError) -> None:
        self._metrics.webhook_store_errors.labels(operation, exc.code or "error").inc()
        loud = time.monotonic() - self._logged_at >= 60.0
        if loud:
            self._logged_at = time.monotonic()
        log.log(
            logging.WARNING if loud else logging.DEBUG,
            "webhook job index: %s on the state store failed (%s); %s",
            operation,
            exc,
            "the last index is used" if operation == "load" else "tried again later",
        )

    def lean(self, now: datetime, *, trusted: bool = False) -> Lean:
        """The reconcile's choice of runs whose jobs to list, from the index as it is now
        (``trusted``: the delivery log vouches for the window, :func:`trusted_reason`)."""
        live, done, index = self.index.live_by_run(), self.index.completed_ids(), self.index
        wall = now.timestamp()
        if trusted:
            return lambda run, _runners: trusted_reason(
                run, live.get(run.run_id, ()), done, now=wall
            )
        running_on, shared = self.index.busy_runners(), self.index.shared_runners()
        # One runner list a reconcile, looked at once: does a busy runner run a job the
        # index does not know started? A runner two index jobs claim counts as idle for
        # both (all but one of them ended unseen).
        seen: dict[int, tuple[bool, dict[str, bool]]] = {}

        def decide(run: RunFacts, runners_busy: Mapping[str, bool]) -> Reason:
            if id(runners_busy) not in seen:
                seen.clear()
                busy = {n: b and n not in shared for n, b in runners_busy.items()}
                seen[id(runners_busy)] = (unexplained_busy(runners_busy, running_on), busy)
            unexplained, busy = seen[id(runners_busy)]
            return jobs_reason(
                run,
                live.get(run.run_id, ()),
                done,
                last_event_at=index.run_event_at(run.run_id),
                runners_busy=busy,
                busy_unexplained=unexplained,
                now=wall,
            )

        return decide

    def reconcile_reason(self, now: datetime) -> str | None:
        """Why this tick must poll GitHub (None: the index answers)."""
        if self._reconciled_at is None:
            return "start"
        last = self.index.last_event_at
        if last is None or now - last > self._interval:
            return "silent"
        if now - self._reconciled_at >= self._interval:
            return "interval"
        return None

    def due_in(self, now: datetime) -> float | None:
        """Seconds until the next reconcile is due, so the loop wakes for it (a woken tick
        must not push it back a whole poll interval); None when the poll interval rules
        (no reconcile yet, webhooks silent, or one already due and retried)."""
        if self._reconciled_at is None or self.reconcile_reason(now) is not None:
            return None
        return (self._reconciled_at + self._interval - now).total_seconds()

    def _from_index(self, now: datetime, base: Observation) -> Observation:
        busy = self.index.busy_runners()
        since = self._reconciled_at
        freed = self.index.freed_since(since) if since is not None else set()
        runners = tuple(
            replace(r, busy=r.name in busy or (r.busy and r.name not in freed))
            for r in base.runners
        )
        return Observation(
            observed_at=now,
            jobs=self.index.jobs(),
            runners=runners,
            skipped_runners=base.skipped_runners,
            clock_skew_seconds=base.clock_skew_seconds,
            runners_observed_at=base.runners_seen_at,  # the last poll's list, not now's
            unlisted_repos=base.unlisted_repos,
        )

    def _forget_reactions(self) -> None:
        """Drop reaction start times of jobs no longer queued (they will never be asked)."""
        self.queued_received = {
            job_id: at
            for job_id, at in self.queued_received.items()
            if (job := self.index.get(job_id)) is not None and job.status is JobStatus.QUEUED
        }

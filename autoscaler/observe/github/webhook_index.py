"""Pure: the jobs ``workflow_job`` webhooks have told us about, keyed by job id.

Deliveries are lost, duplicated and reordered (GitHub does not redeliver a failed delivery
on its own; a redelivery reuses ``X-GitHub-Delivery``; deliveries race). The index is
built so that none of that can make it wrong for long, and only the reconcile can make
it forget:

- a delivery id already applied changes nothing (``duplicate``);
- an event never moves a job back: ``queued`` after ``in_progress`` is ``stale``
  (:data:`~autoscaler.observe.github.webhooks.RANK`);
- a ``completed`` is remembered (a tombstone, with its conclusion, runner name and run
  attempt: job retry reads them, :meth:`JobIndex.completions`), even for a job never
  seen, so a late ``queued`` cannot resurrect it;
- :meth:`JobIndex.replace` takes what the poll lists as the truth for live jobs and
  counts each difference by kind (``missed``: a live job the webhooks never told us of;
  ``status``: one they left behind; ``gone``: one the index held that GitHub no longer
  lists, its ``completed`` lost). A tombstone outranks the poll: GitHub never moves a
  completed job back, and a listing may be older than the event.

Memory is bounded: delivery ids and tombstones are kept for ``memory_seconds`` (default
six hours, well past GitHub's automatic retries) and at most ``max_remembered`` of each.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from autoscaler.domain import Job, JobStatus
from autoscaler.observe.github.webhook_rows import (
    DONE,
    EVENT,
    IN_PROGRESS,
    POLL,
    IndexRow,
    Outcome,
)
from autoscaler.observe.github.webhooks import RANK, WorkflowJobEvent

__all__ = ["CORRECTION_KINDS", "Completion", "JobIndex", "Outcome", "event_row", "poll_row"]

#: Rank of a polled job's status (the poll lists live jobs only).
_STATUS_RANK = {
    JobStatus.QUEUED: RANK["queued"],
    JobStatus.WAITING: RANK["waiting"],
    JobStatus.IN_PROGRESS: RANK["in_progress"],
    JobStatus.COMPLETED: RANK["completed"],
}
#: How far out of order completions may be remembered (rows of several replicas).
_SLACK = timedelta(seconds=60)
#: The kinds of reconcile corrections (``ci_autoscaler_webhook_reconcile_corrections_total``).
CORRECTION_KINDS = ("missed", "status", "gone")


@dataclass(frozen=True, slots=True)
class Completion:
    """A ``completed`` event, as job retry needs it (it never reaches the queue math)."""

    job_id: int
    run_id: int
    repo: str
    name: str
    labels: frozenset[str]
    conclusion: str | None
    runner_name: str | None
    run_attempt: int
    completed_at: datetime | None
    received_at: datetime
    started_at: datetime | None = None
    failed_step: bool | None = None
    """A step concluded ``failure``; None: the event listed no steps."""


@dataclass
class _Entry:
    rank: int
    job: Job
    received_at: datetime


class JobIndex:
    """Live jobs by id, tombstones of completed ones, and the delivery ids applied."""

    def __init__(
        self, *, memory_seconds: float = 6 * 3600.0, max_remembered: int = 200_000
    ) -> None:
        self.memory = timedelta(seconds=memory_seconds)
        self.max_remembered = max_remembered
        self._live: dict[int, _Entry] = {}
        self._done: OrderedDict[int, Completion] = OrderedDict()
        #: job id -> when its completion was (re)written, in a count that only grows: the
        #: order of ``_done``, so what came after a cursor is a suffix of it.
        self._done_seq: dict[int, int] = {}
        self._seq = 0
        self._deliveries: OrderedDict[str, datetime] = OrderedDict()
        #: run id -> the last accepted event that can change what its job listing holds
        #: besides running jobs' steps: a job appeared (``queued``, ``waiting``) or one
        #: ended (``completed``: its dependents queue next). The reconcile reads it.
        self._run_events: OrderedDict[int, datetime] = OrderedDict()
        self.last_event_at: datetime | None = None
        """When the last event was applied (any outcome): webhooks are flowing."""

    # --- events
    def apply(self, event: WorkflowJobEvent, now: datetime) -> Outcome:
        """Apply one verified event; the outcome says whether it changed anything."""
        self.last_event_at = now
        self._forget(now)
        if event.delivery:
            if event.delivery in self._deliveries:
                return Outcome.DUPLICATE
            self._deliveries[event.delivery] = now
            self._trim(self._deliveries)
        job = event.job
        if job.id in self._done:
            return Outcome.DUPLICATE if event.action == "completed" else Outcome.STALE
        outcome = self._apply(event, now)
        if outcome is Outcome.ACCEPTED and event.action != "in_progress":
            self._run_events[job.run_id] = now
            self._run_events.move_to_end(job.run_id)
            self._trim(self._run_events)
        return outcome

    def _apply(self, event: WorkflowJobEvent, now: datetime) -> Outcome:
        job = event.job
        if event.action == "completed":
            self._live.pop(job.id, None)
            self._done[job.id] = Completion(
                job_id=job.id,
                run_id=job.run_id,
                repo=job.repo,
                name=job.name,
                labels=job.labels,
                conclusion=event.conclusion,
                runner_name=job.runner_name,
                run_attempt=event.run_attempt,
                completed_at=event.completed_at,
                received_at=now,
                started_at=job.started_at,
                failed_step=event.failed_step,
            )
            self._stamp(job.id)
            self._trim_done()
            return Outcome.ACCEPTED
        current = self._live.get(job.id)
        if current is not None:
            if event.rank < current.rank:
                return Outcome.STALE
            if event.rank == current.rank and job == current.job:
                return Outcome.DUPLICATE
        self._live[job.id] = _Entry(event.rank, job, now)
        return Outcome.ACCEPTED

    # --- the reconcile
    def replace(
        self, listed: Iterable[Job], now: datetime, runs: Container[int] | None = None
    ) -> dict[str, int]:
        """Make the live jobs what the poll listed; returns the corrections by kind.

        A job the index already knows further along than the listing (an event newer
        than the page) keeps the index's state; a tombstone keeps the job completed.
        ``runs``: only the jobs of these runs are replaced (the runs a reconcile listed,
        and those GitHub no longer lists live); the rest stay as the index holds them."""
        corrections = dict.fromkeys(CORRECTION_KINDS, 0)
        live: dict[int, _Entry] = {}
        if runs is not None:
            live = {i: e for i, e in self._live.items() if e.job.run_id not in runs}
        for job in listed:
            if runs is not None and job.run_id not in runs:
                continue
            if job.id in self._done or job.status is JobStatus.COMPLETED:
                continue
            rank = _STATUS_RANK[job.status]
            current = self._live.get(job.id)
            if current is None:
                corrections["missed"] += 1
            elif current.rank > rank:
                live[job.id] = current
                continue
            elif current.rank < rank or current.job.status is not job.status:
                corrections["status"] += 1
            live[job.id] = _Entry(rank, job, now)
        corrections["gone"] = sum(1 for job_id in self._live if job_id not in live)
        self._live = live
        self._forget(now)
        return corrections

    # --- what the tick and job retry read
    def jobs(self) -> tuple[Job, ...]:
        """The live jobs (queued, waiting, in progress), by id."""
        return tuple(self._live[job_id].job for job_id in sorted(self._live))

    def get(self, job_id: int) -> Job | None:
        entry = self._live.get(job_id)
        return entry.job if entry is not None else None

    def completion(self, job_id: int) -> Completion | None:
        """The ``completed`` event of this job, while remembered."""
        return self._done.get(job_id)

    def completions(self) -> tuple[Completion, ...]:
        """Every remembered ``completed`` event, oldest first."""
        return tuple(self._done.values())

    def completions_since(self, cursor: int) -> tuple[list[Completion], int]:
        """The completions written after ``cursor`` (0: all), oldest first, and the
        cursor to pass next time. As cheap as what is new, however many are remembered.
        A :meth:`restore` writes every completion anew: the next call returns them all."""
        new: list[Completion] = []
        for job_id in reversed(self._done):
            if self._done_seq[job_id] <= cursor:
                break
            new.append(self._done[job_id])
        new.reverse()
        return new, self._seq

    def run_event_at(self, run_id: int) -> datetime | None:
        """When the last accepted ``queued``, ``waiting`` or ``completed`` event about a
        job of this run was applied (while remembered): a sibling's lost delivery may hide
        in its job listing since."""
        return self._run_events.get(run_id)

    def live_by_run(self) -> dict[int, list[Job]]:
        """The live jobs grouped by run id."""
        runs: dict[int, list[Job]] = {}
        for entry in self._live.values():
            runs.setdefault(entry.job.run_id, []).append(entry.job)
        return runs

    def freed_since(self, since: datetime) -> set[str]:
        """Runner names of the jobs completed since ``since``: read from the newest back,
        so the cost is what completed since, not the six hours remembered. (Rows from
        several replicas arrive a little out of order: a minute's slack.)"""
        stop = since - _SLACK
        freed: set[str] = set()
        for completion in reversed(self._done.values()):
            if completion.received_at < stop:
                break
            if completion.runner_name and completion.received_at >= since:
                freed.add(completion.runner_name)
        return freed

    def completed_ids(self) -> Container[int]:
        """Ids of the jobs remembered completed (tombstones)."""
        return self._done.keys()

    def shared_runners(self) -> set[str]:
        """Runner names more than one live job runs on per the index: a runner runs one
        job at a time, so the ``completed`` of all but one was lost."""
        seen: set[str] = set()
        shared: set[str] = set()
        for e in self._live.values():
            name = e.job.runner_name
            if e.job.status is JobStatus.IN_PROGRESS and name:
                (shared if name in seen else seen).add(name)
        return shared

    def busy_runners(self) -> Mapping[str, int]:
        """Runner name -> the live job it runs (from ``in_progress`` events)."""
        return {
            e.job.runner_name: job_id
            for job_id, e in self._live.items()
            if e.job.status is JobStatus.IN_PROGRESS and e.job.runner_name
        }

    def __len__(self) -> int:
        return len(self._live)

    # --- the state store's rows (webhook_rows)
    def restore(self, rows: Iterable[IndexRow]) -> dict[int, IndexRow]:
        """Make the index hold exactly the stored rows (what every replica wrote); returns
        the live rows by job id (the reconcile diffs against them). Delivery ids are not
        stored: a redelivery is told apart by its content (:func:`.webhook_rows.decide`)."""
        live: dict[int, _Entry] = {}
        done: list[Completion] = []
        last: float | None = None
        live_rows: dict[int, IndexRow] = {}
        rows_seen: list[IndexRow] = []
        for row in rows:
            rows_seen.append(row)
            received = datetime.fromtimestamp(row.received_at, UTC)
            if row.via == EVENT:
                last = row.received_at if last is None else max(last, row.received_at)
            data = json.loads(row.data)
            if row.rank >= DONE:
                done.append(_completion(data, received))
            else:
                live[row.job_id] = _Entry(row.rank, _job(data), received)
                live_rows[row.job_id] = row
        self._note_run_events(rows_seen, live, done)
        self._live = live
        self._done = OrderedDict((c.job_id, c) for c in sorted(done, key=lambda c: c.received_at))
        self._done_seq = {}
        for job_id in self._done:
            self._stamp(job_id)
        if last is not None:
            when = datetime.fromtimestamp(last, UTC)
            if self.last_event_at is None or when > self.last_event_at:
                self.last_event_at = when
        return live_rows

    def apply_row(self, row: IndexRow) -> Job | None:
        """Take one stored row the store accepted after the last :meth:`restore` (the
        caller checked :func:`~.webhook_rows.decide` against the rows it holds), as
        :meth:`restore` would have it; returns the live job it holds (None: a completion).
        What keeps the index in memory between two whole reads."""
        received = datetime.fromtimestamp(row.received_at, UTC)
        data = json.loads(row.data)
        known = row.job_id in self._live or row.job_id in self._done
        job: Job | None = None
        if row.rank >= DONE:
            completion = _completion(data, received)
            self._live.pop(row.job_id, None)
            self._done[row.job_id] = completion
            self._done.move_to_end(row.job_id)
            self._stamp(row.job_id)
            self._trim_done()
            run_id = completion.run_id
        else:
            job = _job(data)
            self._live[row.job_id] = _Entry(row.rank, job, received)
            run_id = job.run_id
        if row.via == EVENT:
            if self.last_event_at is None or received > self.last_event_at:
                self.last_event_at = received
            if row.rank != IN_PROGRESS or not known:  # as _note_run_events reads a row
                current = self._run_events.get(run_id)
                if current is None or received > current:
                    self._run_events[run_id] = received
                    self._run_events.move_to_end(run_id)
                    self._trim(self._run_events)
        return job

    def drop(self, job_ids: Iterable[int]) -> None:
        """Forget these live jobs (their rows expired)."""
        for job_id in job_ids:
            self._live.pop(job_id, None)

    def expire(self, now: datetime) -> None:
        """Forget what is older than the index remembers (tombstones, delivery ids, run
        events): the oldest first, so as cheap as what expired."""
        self._forget(now)

    def _note_run_events(
        self, rows: list[IndexRow], live: dict[int, _Entry], done: list[Completion]
    ) -> None:
        """The run events (:meth:`run_event_at`) the stored rows show, as :meth:`apply`
        notes them: a ``queued``/``waiting``/``completed`` event row, and an in-progress
        event row of a job this replica never saw (its ``queued`` went by between two
        reads). Kept across reads: a row overwritten by its ``in_progress`` keeps the run
        event its ``queued`` row gave."""
        run_of = {job_id: e.job.run_id for job_id, e in live.items()}
        run_of |= {c.job_id: c.run_id for c in done}
        for row in rows:
            run_id = run_of.get(row.job_id)
            if row.via != EVENT or run_id is None:
                continue
            known = row.job_id in self._live or row.job_id in self._done
            if row.rank == IN_PROGRESS and known:
                continue
            received = datetime.fromtimestamp(row.received_at, UTC)
            current = self._run_events.get(run_id)
            if current is None or received > current:
                self._run_events[run_id] = received
                self._run_events.move_to_end(run_id)
        self._trim(self._run_events)

    # --- memory
    def _stamp(self, job_id: int) -> None:
        self._seq += 1
        self._done_seq[job_id] = self._seq

    def _forget(self, now: datetime) -> None:
        horizon = now - self.memory
        while self._deliveries and next(iter(self._deliveries.values())) < horizon:
            self._deliveries.popitem(last=False)
        while self._done and next(iter(self._done.values())).received_at < horizon:
            job_id, _ = self._done.popitem(last=False)
            del self._done_seq[job_id]
        while self._run_events and next(iter(self._run_events.values())) < horizon:
            self._run_events.popitem(last=False)

    def _trim_done(self) -> None:
        while len(self._done) > self.max_remembered:
            job_id, _ = self._done.popitem(last=False)
            del self._done_seq[job_id]

    def _trim(
        self,
        remembered: OrderedDict[str, datetime] | OrderedDict[int, datetime],
    ) -> None:
        while len(remembered) > self.max_remembered:
            remembered.popitem(last=False)


# --- rows in the state store (autoscaler.observe.github.webhook_rows)


def _iso(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat()


def _time(s: Any) -> datetime | None:
    return None if s is None else datetime.fromisoformat(str(s))


def _job_json(job: Job) -> str:
    return json.dumps(
        {
            "id": job.id,
            "run_id": job.run_id,
            "repo": job.repo,
            "name": job.name,
            "labels": sorted(job.labels),
            "status": job.status.value,
            "created_at": _iso(job.created_at),
            "started_at": _iso(job.started_at),
            "has_steps": job.has_steps,
            "run_completed": job.run_completed,
            "runner_name": job.runner_name,
        },
        sort_keys=True,
    )


def _job(data: dict[str, Any]) -> Job:
    created = _time(data["created_at"])
    assert created is not None
    return Job(
        id=int(data["id"]),
        run_id=int(data["run_id"]),
        repo=str(data["repo"]),
        name=str(data["name"]),
        labels=frozenset(data["labels"]),
        status=JobStatus(data["status"]),
        created_at=created,
        started_at=_time(data.get("started_at")),
        has_steps=bool(data.get("has_steps")),
        run_completed=bool(data.get("run_completed")),
        runner_name=data.get("runner_name"),
    )


def event_row(event: WorkflowJobEvent, received_at: datetime) -> IndexRow:
    """The row a verified event writes (a completion for ``completed``, else the job)."""
    job = event.job
    if event.action == "completed":
        data = json.dumps(
            {
                "job_id": job.id,
                "run_id": job.run_id,
                "repo": job.repo,
                "name": job.name,
                "labels": sorted(job.labels),
                "conclusion": event.conclusion,
                "runner_name": job.runner_name,
                "run_attempt": event.run_attempt,
                "completed_at": _iso(event.completed_at),
                "started_at": _iso(job.started_at),
                "failed_step": event.failed_step,
            },
            sort_keys=True,
        )
    else:
        data = _job_json(job)
    return IndexRow(job.id, event.rank, data, received_at.timestamp(), EVENT)


def poll_row(job: Job, now: datetime) -> IndexRow:
    """The row the reconcile writes for a live job GitHub listed."""
    return IndexRow(job.id, _STATUS_RANK[job.status], _job_json(job), now.timestamp(), POLL)


def _completion(data: dict[str, Any], received_at: datetime) -> Completion:
    return Completion(
        job_id=int(data["job_id"]),
        run_id=int(data["run_id"]),
        repo=str(data["repo"]),
        name=str(data["name"]),
        labels=frozenset(data["labels"]),
        conclusion=data.get("conclusion"),
        runner_name=data.get("runner_name"),
        run_attempt=int(data.get("run_attempt", 1)),
        completed_at=_time(data.get("completed_at")),
        received_at=received_at,
        started_at=_time(data.get("started_at")),
        failed_step=data.get("failed_step"),
    )


def reconcile_rows(
    before: Mapping[int, IndexRow], index: JobIndex, now: datetime
) -> tuple[list[IndexRow], list[IndexRow]]:
    """What the store must change after :meth:`JobIndex.replace`: (put, drop). A live job
    the replace changed is put; a row it dropped is dropped; a row it kept is left."""
    put: list[IndexRow] = []
    for job in index.jobs():
        row = before.get(job.id)
        if row is None or _job(json.loads(row.data)) != job:
            put.append(poll_row(job, now))
    drop = [row for job_id, row in before.items() if index.get(job_id) is None]
    return put, drop

"""Values the job-retry core works on: completed jobs and runs, annotations, instance facts.

A :class:`CompletedJob` is shaped after what both of GitHub's views of a job give: an item
of ``GET /repos/{o}/{r}/actions/runs/{run_id}/jobs`` and the ``workflow_job`` object of a
``workflow_job`` ``completed`` webhook (the same fields: ``conclusion``, ``runner_name``,
``run_attempt``, ``steps``). Annotations come from a separate call
(``GET /repos/{o}/{r}/check-runs/{job_id}/annotations``; a job's id is its check run's id),
so they are optional: ``None`` when they could not be read. A :class:`CompletedRun` is
every job of one run attempt once all of them completed: the unit a re-run is decided for
(``POST .../actions/runs/{run_id}/rerun-failed-jobs`` brings back a whole run attempt).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

#: Conclusions of a job that failed (``cancelled`` is a person's, a newer push's, or a
#: failing matrix sibling's doing: ``strategy.fail-fast``).
FAILED_CONCLUSIONS = frozenset({"failure", "timed_out"})
CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class Annotation:
    """One check-run annotation (GitHub: ``annotation_level``, ``message``, ``title``)."""

    level: str
    message: str
    title: str = ""


@dataclass(frozen=True, slots=True)
class RunProgress:
    """Where a workflow run is now (``GET /repos/{o}/{r}/actions/runs/{run_id}``): read
    after GitHub answers a re-run with 403, which it does for three different reasons."""

    status: str
    """``completed``, ``in_progress``, ``queued``, ``waiting``..."""
    attempt: int
    """``run_attempt``: above the failed job's, the run was re-run already."""


@dataclass(frozen=True, slots=True)
class CompletedJob:
    """One completed workflow job, as the poll or a webhook saw it."""

    repo: str
    run_id: int
    job_id: int
    name: str
    conclusion: str
    """``success``, ``failure``, ``cancelled``, ``timed_out``, ``skipped``, ``neutral``..."""
    run_attempt: int
    """GitHub counts from 1; a re-run makes attempt 2 of the same run."""
    runner_name: str | None = None
    """None (or empty at GitHub): the job never got a runner, or the runner is unknown."""
    labels: frozenset[str] = frozenset()
    started_at: datetime | None = None
    completed_at: datetime | None = None
    failed_step: bool | None = None
    """A step concluded ``failure``; None: the job reports no steps at all."""
    annotations: tuple[Annotation, ...] | None = None
    """The job's annotations; None: not read (no call made, or an unreadable answer)."""

    @property
    def failed(self) -> bool:
        return self.conclusion in FAILED_CONCLUSIONS

    @property
    def key(self) -> str:
        """Stable id of this job (one attempt of one job): ``repo#job_id``."""
        return f"{self.repo}#{self.job_id}"


def run_key(repo: str, run_id: int, attempt: int) -> str:
    """Stable id of one run attempt: ``repo#run_id#attempt`` (the ledger's key)."""
    return f"{repo}#{run_id}#{attempt}"


@dataclass(frozen=True, slots=True)
class CompletedRun:
    """One workflow run attempt after every job of it completed.

    ``jobs`` is what ``GET .../runs/{run_id}/jobs?filter=latest`` lists then: the latest
    of each job. A re-run attempt keeps the results of the jobs it did not re-run, so a
    job may carry an earlier ``run_attempt`` than the run's."""

    repo: str
    run_id: int
    attempt: int
    """The run's ``run_attempt`` (GitHub counts from 1)."""
    jobs: tuple[CompletedJob, ...]

    @property
    def key(self) -> str:
        return run_key(self.repo, self.run_id, self.attempt)

    @property
    def of_interest(self) -> bool:
        """A job of it failed or was cancelled: something job retry may judge."""
        return any(j.failed or j.conclusion == CANCELLED for j in self.jobs)


def completed_run(repo: str, run_id: int, jobs: Iterable[CompletedJob]) -> CompletedRun:
    """The run of these jobs (its attempt: the newest any of them belongs to)."""
    listed = tuple(jobs)
    attempt = max((j.run_attempt for j in listed), default=1)
    return CompletedRun(repo, run_id, attempt, listed)


#: Instance event kinds, strongest evidence first (bounded: metric labels).
SPOT_INTERRUPTION = "spot_interruption"
REBALANCE = "rebalance_recommendation"
SPOT_TERMINATED = "spot_terminated"
TERMINATED = "terminated"
EVENT_KINDS = (SPOT_INTERRUPTION, REBALANCE, SPOT_TERMINATED, TERMINATED)
#: AWS interrupted the instance (the others: this controller or the ASG terminated it).
BY_AWS = frozenset({SPOT_INTERRUPTION, REBALANCE, SPOT_TERMINATED})


@dataclass(frozen=True, slots=True)
class InstanceEvent:
    """Something that happened to an instance: ``kind`` one of :data:`EVENT_KINDS`."""

    instance_id: str
    kind: str
    at: datetime
    detail: str = ""
    """For people (the EventBridge ``detail-type``, the ASG's cause); never parsed."""


@dataclass(frozen=True, slots=True)
class InstanceEnd:
    """EC2's word on an instance that has ended (shutting down, terminated, stopping or
    stopped), translated from ``DescribeInstances`` by the cloud adapter
    (:meth:`autoscaler.scale.aws.asg.AwsAsgPool.instance_ends`).

    It is what is left to read when the interruption warning and the state-change event
    never reached us: EC2 keeps a terminated instance, with its ``StateReason``, in
    ``DescribeInstances`` for about an hour."""

    instance_id: str
    spot: bool
    """EC2 ended it to take its Spot capacity back (``StateReason.Code``
    ``Server.SpotInstanceTermination``, or ``Server.SpotInstanceShutdown`` for a Spot
    instance that stops instead); False for every other reason, or none given."""
    code: str = ""
    """EC2's ``StateReason.Code``, for people (logs, evidence); the adapter alone reads it."""


class InstanceEvents:
    """What happened to which instance, for the classifier: filled by the interruption
    reader and by the scaler's terminations, read by the retry stage (thread-safe).

    Bounded: events older than ``keep`` are dropped on every add; at most ``limit`` kept.
    """

    def __init__(self, *, keep: timedelta = timedelta(hours=12), limit: int = 50_000) -> None:
        self._events: dict[str, list[InstanceEvent]] = {}
        self._count = 0
        self._keep = keep
        self._limit = limit
        self._lock = threading.Lock()

    def add(self, event: InstanceEvent) -> None:
        with self._lock:
            self._events.setdefault(event.instance_id, []).append(event)
            self._count += 1
            if self._count > self._limit:
                self._prune(event.at, force=True)

    def prune(self, now: datetime) -> None:
        with self._lock:
            self._prune(now, force=False)

    def _prune(self, now: datetime, *, force: bool) -> None:
        cutoff = now - self._keep
        kept = {i: [e for e in evs if e.at >= cutoff] for i, evs in self._events.items()}
        self._events = {i: evs for i, evs in kept.items() if evs}
        self._count = sum(len(evs) for evs in self._events.values())
        if force and self._count > self._limit:  # still over: keep the newest
            newest = sorted((e for evs in self._events.values() for e in evs), key=lambda e: e.at)[
                -self._limit :
            ]
            self._events = {}
            for e in newest:
                self._events.setdefault(e.instance_id, []).append(e)
            self._count = len(newest)

    def of(self, instance_id: str) -> tuple[InstanceEvent, ...]:
        with self._lock:
            return tuple(self._events.get(instance_id, ()))

    def snapshot(self) -> dict[str, tuple[InstanceEvent, ...]]:
        with self._lock:
            return {i: tuple(evs) for i, evs in self._events.items()}

    def extend(self, events: Iterable[InstanceEvent]) -> None:
        for e in events:
            self.add(e)

"""Pure: jobs + runners + runner types + now -> the queue per runner type.

Contracts (docs/github.md, "Which jobs are demand"):
- A job goes to the runner type whose labels include all of the job's labels
  (case-insensitive); ties go to the type with the fewest extra labels, then by name.
  A job no type covers is *unmatched*: nothing will ever run it.
- A queued job that already has steps, or whose run has completed, is a *ghost*:
  GitHub left it queued; it is not demand.
- Queue time of a queued job is ``now - created_at``; of a started job
  ``started_at - created_at``.
- A job no type covers that asks for a GitHub-hosted runner (a label matching one of
  ``hosted_labels``, e.g. ``ubuntu-latest``) is not ours: GitHub runs it, it is counted
  as ``hosted_jobs`` and never as unmatched.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from fnmatch import fnmatchcase

from autoscaler.domain import (
    Job,
    JobStatus,
    QueueSnapshot,
    QueueStats,
    Runner,
    RunnerCounts,
    RunnerState,
    RunnerType,
)


def match_job(labels: frozenset[str], types: Sequence[RunnerType]) -> RunnerType | None:
    """The runner type that serves a job with these labels, or None."""
    covering = [t for t in types if labels <= t.labels]
    if not covering:
        return None
    return min(covering, key=lambda t: (len(t.labels - labels), t.name))


def match_runner(labels: frozenset[str], types: Sequence[RunnerType]) -> RunnerType | None:
    """The most specific runner type whose labels this runner carries, or None."""
    carried = [t for t in types if t.labels <= labels]
    if not carried:
        return None
    return min(carried, key=lambda t: (-len(t.labels), t.name))


def is_ghost(job: Job) -> bool:
    """A job GitHub still calls queued but will never run."""
    return job.status is JobStatus.QUEUED and (job.has_steps or job.run_completed)


def queue_time_seconds(job: Job, now: datetime) -> float:
    """How long the job waited (or has waited so far) for a runner; never negative."""
    end = job.started_at if job.started_at is not None else now
    return max(0.0, (end - job.created_at).total_seconds())


def is_hosted(labels: frozenset[str], hosted_labels: Sequence[str]) -> bool:
    """True when a job asks for a GitHub-hosted runner (glob patterns, lower-case)."""
    return any(fnmatchcase(label, pattern) for label in labels for pattern in hosted_labels)


def compute_queue(
    jobs: Iterable[Job],
    runners: Iterable[Runner],
    types: Sequence[RunnerType],
    now: datetime,
    hosted_labels: Sequence[str] = (),
) -> QueueSnapshot:
    """Queue size, max queue time and runner counts per runner type.

    Matching is memoised per label set: 50,000 jobs share a few hundred label sets, and
    matching each job against 200 types would cost 10 million subset checks a tick.
    """
    job_types: dict[frozenset[str], RunnerType | None] = {}
    runner_types: dict[frozenset[str], RunnerType | None] = {}
    ages: dict[str, list[float]] = {t.name: [] for t in types}
    started: dict[str, list[float]] = {t.name: [] for t in types}
    oldest: dict[str, datetime] = {}
    ghosts: dict[str, int] = {t.name: 0 for t in types}
    unmatched: list[float] = []
    total_ghosts = hosted = 0
    for job in jobs:
        if job.status is not JobStatus.QUEUED and job.status is not JobStatus.IN_PROGRESS:
            continue
        if job.labels not in job_types:
            job_types[job.labels] = match_job(job.labels, types)
        rtype = job_types[job.labels]
        if job.status is JobStatus.IN_PROGRESS:
            if rtype is not None:
                started[rtype.name].append((now - job.created_at).total_seconds())
            continue
        if is_ghost(job):
            total_ghosts += 1
            if rtype is not None:
                ghosts[rtype.name] += 1
            continue
        age = queue_time_seconds(job, now)
        if rtype is None:
            if is_hosted(job.labels, hosted_labels):
                hosted += 1
            else:
                unmatched.append(age)
            continue
        ages[rtype.name].append(age)
        if rtype.name not in oldest or job.created_at < oldest[rtype.name]:
            oldest[rtype.name] = job.created_at

    counts: dict[str, dict[RunnerState, int]] = {
        t.name: dict.fromkeys(RunnerState, 0) for t in types
    }
    for runner in runners:
        if runner.labels not in runner_types:
            runner_types[runner.labels] = match_runner(runner.labels, types)
        rtype = runner_types[runner.labels]
        if rtype is not None:
            counts[rtype.name][runner.state] += 1

    per_type = {}
    for t in types:
        type_ages = sorted(ages[t.name], reverse=True)
        c = counts[t.name]
        per_type[t.name] = QueueStats(
            runner_type=t.name,
            queue_size=len(type_ages),
            max_queue_time_seconds=type_ages[0] if type_ages else 0.0,
            runners=RunnerCounts(
                idle=c[RunnerState.IDLE], busy=c[RunnerState.BUSY], offline=c[RunnerState.OFFLINE]
            ),
            ghost_jobs=ghosts[t.name],
            oldest_queued_at=oldest.get(t.name),
            queued_ages_seconds=tuple(type_ages),
            started_ages_seconds=tuple(started[t.name]),
        )
    return QueueSnapshot(
        observed_at=now,
        per_type=per_type,
        unmatched_jobs=len(unmatched),
        ghost_jobs=total_ghosts,
        unmatched_ages_seconds=tuple(sorted(unmatched, reverse=True)),
        hosted_jobs=hosted,
    )

"""Job retry's completed jobs with webhooks on: the ``completed`` events, then the poll's.

Polling alone finds a failed job by seeing its run leave the runs listings, then listing
the run's jobs (:mod:`autoscaler.observe.github.failures`). With webhooks the poll is a
reconcile five minutes apart, so a run that starts and ends between two of them was never
seen running and its failed jobs were never judged. Each ``completed`` event already
carries what job retry needs (conclusion, runner name, run attempt, failed step): this
feed hands every remembered completion to the stage once, a failed one with its
annotations (one request each, at most :data:`ANNOTATE_PER_CALL` a call, none while the
rate limit is kept for the poll: those wait for a later call), and the poll's own finds
that no event told of (a lost delivery). Each job is handed over once per process; a new
leader hands the remembered ones over again, and the job-retry ledger keeps that from
re-running any job twice.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from autoscaler.domain import CompletedJob
from autoscaler.observe.github.webhook_index import Completion, JobIndex

#: Failed jobs annotated a call; the rest wait for the next tick.
ANNOTATE_PER_CALL = 20
#: Keys of jobs handed over, remembered (oldest forgotten first).
REMEMBERED = 100_000


@runtime_checkable
class PolledCompletions(Protocol):
    """What the poll's source offers: its finds, and annotations for a failed job."""

    def completed_jobs(self, now: datetime) -> Sequence[CompletedJob]: ...

    def annotate(self, job: CompletedJob) -> CompletedJob | None: ...


def completed_job(c: Completion) -> CompletedJob:
    """The stage's view of a ``completed`` event."""
    return CompletedJob(
        repo=c.repo,
        run_id=c.run_id,
        job_id=c.job_id,
        name=c.name,
        conclusion=c.conclusion or "",
        run_attempt=c.run_attempt,
        runner_name=c.runner_name,
        labels=c.labels,
        started_at=c.started_at,
        completed_at=c.completed_at,
        failed_step=c.failed_step,
    )


class WebhookCompletedJobs:
    """:class:`autoscaler.job_retry.stage.CompletedJobSource` over the webhook index and the
    poll's source."""

    def __init__(self, index: JobIndex, polled: PolledCompletions) -> None:
        self.index = index
        self.polled = polled
        self._handed: OrderedDict[str, None] = OrderedDict()

    def completed_jobs(self, now: datetime) -> list[CompletedJob]:
        out: list[CompletedJob] = []
        budget = ANNOTATE_PER_CALL
        for completion in self.index.completions():
            job = completed_job(completion)
            if job.key in self._handed:
                continue
            if job.failed:
                if budget == 0:
                    continue  # the next call
                budget -= 1
                annotated = self.polled.annotate(job)
                if annotated is None:
                    budget = 0  # the rate limit is kept for the poll: later
                    continue
                job = annotated
            self._hand(job, out)
        for job in self.polled.completed_jobs(now):
            if job.key not in self._handed:
                self._hand(job, out)
        return out

    def _hand(self, job: CompletedJob, out: list[CompletedJob]) -> None:
        self._handed[job.key] = None
        while len(self._handed) > REMEMBERED:
            self._handed.popitem(last=False)
        out.append(job)

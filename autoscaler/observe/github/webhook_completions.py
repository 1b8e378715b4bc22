"""Job retry's completed runs with webhooks on: the ``completed`` events, then the poll's.

Polling alone finds a failed job by seeing its run leave the runs listings, then listing
the run's jobs (:mod:`autoscaler.observe.github.failures`). With webhooks the poll is a
reconcile five minutes apart, so a run that starts and ends between two of them was never
seen running. Its ``completed`` events tell of it instead; job retry decides per run
attempt, and an event says nothing of the run's other jobs (its cancelled siblings, a
failure whose delivery was lost), so a run whose events tell of a failed job is read
whole once it has completed: once the index holds no live job of it, the source reads the
run (``GET .../runs/{run_id}``) and, completed, its jobs with their annotations (at most
:data:`READS_PER_CALL` runs a call, none while the rate limit is kept for the poll). A run
still going is read again when another of its events arrives, or :data:`RECHECK` later.
Runs the poll's own reconciles saw complete come too (a lost delivery). Each run attempt
is handed over once per process; a new leader hands the remembered ones over again, and
the job-retry ledger keeps any run attempt from being re-run twice.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from autoscaler.domain import CompletedJob, CompletedRun, RunProgress, run_key
from autoscaler.errors import AutoscalerError, DeferredError, NotFoundError
from autoscaler.observe.github.webhook_index import Completion, JobIndex

log = logging.getLogger("autoscaler.observe.github")

#: Runs read a call; the rest wait for the next tick.
READS_PER_CALL = 20
#: A run found still in progress is read again this long after, or at its next event.
RECHECK = timedelta(minutes=5)
#: Runs waiting to be read at most (the oldest are dropped first, and logged).
MAX_WAITING = 2000
#: Keys of events looked at, and of run attempts handed over, remembered (oldest first out).
REMEMBERED = 100_000


@runtime_checkable
class PolledCompletions(Protocol):
    """What the poll's source offers: its finds, and a run read whole on demand."""

    def completed_runs(self, now: datetime) -> Sequence[CompletedRun]: ...

    def read_run(self, repo: str, run_id: int) -> CompletedRun | RunProgress: ...


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


@dataclass
class _Waiting:
    """A run an event told of a failure in, to read once it has completed."""

    attempt: int
    due: datetime


def _remember(keys: OrderedDict[str, None], key: str) -> None:
    keys[key] = None
    keys.move_to_end(key)
    while len(keys) > REMEMBERED:
        keys.popitem(last=False)


class WebhookCompletedRuns:
    """:class:`autoscaler.job_retry.stage.CompletedRunSource` over the webhook index and the
    poll's source."""

    def __init__(self, index: JobIndex, polled: PolledCompletions) -> None:
        self.index = index
        self.polled = polled
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._cursor = 0  # the index's completions already looked at
        self._handed: OrderedDict[str, None] = OrderedDict()
        self.waiting: OrderedDict[tuple[str, int], _Waiting] = OrderedDict()

    def completed_runs(self, now: datetime) -> list[CompletedRun]:
        self._take_events(now)
        out: list[CompletedRun] = []
        self._read_due(now, out)
        for run in self.polled.completed_runs(now):
            self._hand(run, out)
        return out

    def _take_events(self, now: datetime) -> None:
        new, self._cursor = self.index.completions_since(self._cursor)
        for completion in new:
            job = completed_job(completion)
            if job.key in self._seen:
                continue
            _remember(self._seen, job.key)
            key = (job.repo, job.run_id)
            waiting = self.waiting.get(key)
            if waiting is not None:  # something happened in the run: read it soon
                waiting.due = min(waiting.due, now)
                waiting.attempt = max(waiting.attempt, job.run_attempt)
            elif job.failed and run_key(*key, job.run_attempt) not in self._handed:
                self.waiting[key] = _Waiting(job.run_attempt, now)
        while len(self.waiting) > MAX_WAITING:
            (repo, run_id), _ = self.waiting.popitem(last=False)
            log.warning(
                "job retry: run %s/%d not read (over %d waiting)", repo, run_id, MAX_WAITING
            )

    def _read_due(self, now: datetime, out: list[CompletedRun]) -> None:
        live = self.index.live_by_run()
        reads = READS_PER_CALL
        for key, waiting in list(self.waiting.items()):
            repo, run_id = key
            if waiting.due > now or run_id in live:
                continue  # its jobs still run, as far as the events tell
            if run_key(repo, run_id, waiting.attempt) in self._handed:
                del self.waiting[key]
                continue
            if reads == 0:
                return
            reads -= 1
            try:
                found = self.polled.read_run(repo, run_id)
            except DeferredError:
                return  # the rate limit is kept for the poll: a later call
            except NotFoundError:
                del self.waiting[key]
                continue
            except AutoscalerError as exc:
                log.warning("run %s/%d not read (%s): %s", repo, run_id, exc.kind, exc)
                waiting.due = now + RECHECK
                continue
            if isinstance(found, RunProgress):
                if found.attempt > waiting.attempt:
                    del self.waiting[key]  # re-run meanwhile: its new attempt has its own events
                else:
                    waiting.due = now + RECHECK
                continue
            del self.waiting[key]
            self._hand(found, out)

    def _hand(self, run: CompletedRun, out: list[CompletedRun]) -> None:
        if run.key in self._handed:
            return
        _remember(self._handed, run.key)
        out.append(run)

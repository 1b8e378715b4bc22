"""The job-retry stage of a tick: see completed jobs, judge, decide, re-run, remember.

Each tick (when ``job_retry.enabled``):

1. take the jobs of runs the CI source saw complete (:class:`CompletedJobSource`) into a
   bounded buffer (jobs still waiting for a decision stay there: deferred by the hourly
   bound, a failed call, a refused repository, or too fresh to judge);
2. judge each with :func:`~autoscaler.job_retry.classify.classify` against what happened to
   the instances (:class:`~autoscaler.job_retry.model.InstanceEvents`). A failure with no
   evidence yet waits :data:`SETTLE` after its completion first: a Spot warning's event
   may reach the queue a little after GitHub reports the job failed. One still without
   evidence then is checked with EC2 itself (:class:`InstanceFates`, one call a tick for
   all of them): an instance EC2 says Spot ended counts as a Spot loss even when the
   interruption warning and the state-change event were both missed (no queue, a lost
   message). Only within ``EVENT_GRACE`` of the job's completion: an instance found
   ended later may have ended after the job;
3. :func:`~autoscaler.job_retry.decide.decide` over the ledger, re-read from the store first
   whenever something may be re-run (a new leader, or a restarted one, sees what the
   last one did: idempotent across ticks, restarts and a leader change);
4. act: ``POST .../actions/jobs/{id}/rerun`` (:class:`JobRerunner`). 422 (GitHub says the
   job was already re-run, or cannot be) is recorded as done, never asked again; 403 (no
   permission) is said once, in one ERROR line and the "Job re-runs not permitted" alert,
   and the repository is left alone for :data:`~autoscaler.job_retry.ledger.DENIED_PAUSE`;
5. save what changed in the ledger; report the jobs whose retries are exhausted (the
   "Job retries exhausted" alert) and the refusing repositories.

Every judged job is counted once in ``ci_autoscaler_job_retries_total{runner_type,reason,
result}`` (a deferred one again when it is finally decided). ``dry_run`` judges and decides
and changes nothing (no call, no ledger write).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

from autoscaler.config import Config
from autoscaler.domain import CompletedJob, RunProgress
from autoscaler.errors import (
    AuthenticationError,
    AutoscalerError,
    NotFoundError,
    RejectedError,
    StateError,
)
from autoscaler.job_retry.classify import EVENT_GRACE, NOT_FAILED, Verdict, classify, settled
from autoscaler.job_retry.decide import (
    ALREADY,
    DEFERRED,
    DENIED,
    EXHAUSTED,
    FAILED,
    RERUN,
    Choice,
    RetryReport,
    decide,
    record_allowed,
    record_denied,
    record_exhausted,
    record_rerun,
)
from autoscaler.job_retry.ledger import JobRetryStore, Ledger, decode, diff, encode
from autoscaler.job_retry.model import SPOT_TERMINATED, InstanceEnd, InstanceEvent, InstanceEvents
from autoscaler.observe.queue import match_job
from autoscaler.ports import instance_id_of
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)

#: A failure with no evidence is judged this long after it completed, not before.
SETTLE = timedelta(minutes=2)
#: Jobs waiting for a decision at most (the oldest are dropped past it, and logged).
MAX_PENDING = 2000
#: Sorts before every completion time (a job without one is dropped first).
_EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
#: Results that keep a job in the buffer for a later tick.
WAITING = frozenset({DEFERRED, DENIED, FAILED})


@runtime_checkable
class CompletedJobSource(Protocol):
    """Completed jobs to judge: the poll's recently completed runs with failed jobs, and
    with webhooks on ``workflow_job`` ``completed`` events first
    (:class:`~autoscaler.observe.github.webhook_completions.WebhookCompletedJobs`)."""

    def completed_jobs(self, now: datetime) -> Sequence[CompletedJob]:
        """Jobs of runs seen complete since the last call, failed ones with annotations.
        Raises our errors; what it could not afford this call, it returns later."""
        ...


@runtime_checkable
class JobRerunner(Protocol):
    def rerun_job(self, repo: str, job_id: int) -> None:
        """Ask the CI provider to re-run one job. RejectedError: already re-run (422);
        AuthenticationError: 403 (no permission, or see :meth:`run_progress`);
        NotFoundError: the job is gone."""
        ...

    def run_progress(self, repo: str, run_id: int) -> RunProgress:
        """Where the run is now (a read). GitHub answers a re-run 403 without permission,
        but also for a job that is not its run's latest attempt (re-run already: by someone
        else, or by us when the 201 was lost) and for a run still in progress."""
        ...


@runtime_checkable
class InstanceFates(Protocol):
    """How instances ended, in EC2's words (:class:`autoscaler.scale.aws.asg.AwsAsgPool`)."""

    def instance_ends(self, instance_ids: Sequence[str]) -> Mapping[str, InstanceEnd]:
        """The listed instances that have ended (a running or unknown one is absent).
        Raises our errors."""
        ...


class RetryStage:
    def __init__(
        self,
        config: Config,
        source: CompletedJobSource,
        rerunner: JobRerunner,
        metrics: Metrics,
        *,
        store: JobRetryStore | None = None,
        events: InstanceEvents | None = None,
        fates: InstanceFates | None = None,
        max_pending: int = MAX_PENDING,
    ) -> None:
        self.config = config
        self.max_pending = max_pending
        self.retry = config.job_retry
        self.source = source
        self.rerunner = rerunner
        self.metrics = metrics
        self.store = store
        self.events = events if events is not None else InstanceEvents()
        self.fates = fates
        self.types = tuple(rt.runner_type for rt in config.runner_types)
        self.pending: dict[str, CompletedJob] = {}
        self.ledger = Ledger()
        #: The ledger as the store holds it (what the next save diffs against).
        self._stored = Ledger()
        self._loaded = False
        self._denied_why: dict[str, str] = {}
        self.last_report = RetryReport()

    # --- the tick
    def step(self, now: datetime, *, dry_run: bool = False) -> RetryReport:
        if not self.retry.enabled:
            return self.last_report
        try:
            fresh = self.source.completed_jobs(now)
        except AutoscalerError as exc:
            log.warning("completed jobs not read this tick (%s): %s", exc.kind, exc)
            self.metrics.stage_failed("job_retry_observe")
            fresh = ()
        self._buffer(fresh)
        self.events.prune(now)
        judged, waiting = self._judge(now)
        if any(v.infrastructure for _, v in judged) or not self._loaded:
            self._reload()
        self.ledger = self.ledger.pruned(now)
        choices = []
        for choice in decide(judged, self.ledger, self.retry, now):
            result = choice.result
            if not dry_run:
                result = self._act(choice, now)
            self._count(choice, result)
            if result in WAITING or (dry_run and result in (RERUN, EXHAUSTED)):
                # (a dry run acts on nothing: the job is still to be decided for real, by
                # this controller or, for a follower, by the leader whose ledger says so)
                waiting[choice.job.key] = choice.job
            choices.append(replace(choice, result=result))
        self.pending = waiting
        if not dry_run:
            self._save()
        self.last_report = RetryReport(
            self.ledger.alerting(now),
            {r: self._denied_why.get(r, "403") for r in self.ledger.denied},
            tuple(choices),
        )
        return self.last_report

    def _buffer(self, jobs: Sequence[CompletedJob]) -> None:
        for job in jobs:
            if job.failed or job.conclusion == "cancelled":
                self.pending.setdefault(job.key, job)
        if len(self.pending) > self.max_pending:
            drop = sorted(self.pending.values(), key=lambda j: j.completed_at or _EARLIEST)
            excess = drop[: len(self.pending) - self.max_pending]
            for job in excess:
                del self.pending[job.key]
            log.warning(
                "job retry: %d waiting jobs dropped (over %d)", len(excess), self.max_pending
            )

    def _judge(
        self, now: datetime
    ) -> tuple[list[tuple[CompletedJob, Verdict]], dict[str, CompletedJob]]:
        events = self.events.snapshot()
        judged: list[tuple[CompletedJob, Verdict]] = []
        waiting: dict[str, CompletedJob] = {}
        unexplained: list[CompletedJob] = []
        for job in self.pending.values():
            verdict = classify(job, events, self.retry)
            if verdict.reason == NOT_FAILED:
                continue
            if not verdict.infrastructure and job.failed and not settled(job, now, SETTLE):
                waiting[job.key] = job  # an interruption's event may still be on its way
                continue
            if not verdict.infrastructure and job.failed and self._may_ask_ec2(job, now):
                unexplained.append(job)
                continue
            judged.append((job, verdict))
        if unexplained:
            if self._ask_ec2(unexplained, now):
                events = self.events.snapshot()
                judged += [(job, classify(job, events, self.retry)) for job in unexplained]
            else:  # asked again next tick (still within EVENT_GRACE, or judged without)
                waiting.update((job.key, job) for job in unexplained)
        return judged, waiting

    def _may_ask_ec2(self, job: CompletedJob, now: datetime) -> bool:
        """EC2 can say how the job's instance ended, and an end seen now still falls
        within the job's window (at most ``EVENT_GRACE`` after its completion)."""
        return (
            self.fates is not None
            and instance_id_of(job.runner_name or "") is not None
            and (job.completed_at is None or now <= job.completed_at + EVENT_GRACE)
        )

    def _ask_ec2(self, jobs: Sequence[CompletedJob], now: datetime) -> bool:
        """Ask EC2 how the jobs' instances ended; a Spot end becomes a ``spot_terminated``
        event dated ``now`` (it happened after the job started and no later than now).
        False when EC2 could not be asked (counted and logged)."""
        assert self.fates is not None
        ids = sorted({iid for job in jobs if (iid := instance_id_of(job.runner_name or ""))})
        try:
            ends = self.fates.instance_ends(ids)
        except AutoscalerError as exc:
            self.metrics.stage_failed("job_retry_instances")
            log.warning("job retry: instances not described (%s): %s", exc.kind, exc)
            return False
        for end in ends.values():
            if end.spot:
                detail = f"ended by EC2 for Spot (StateReason {end.code}); no event received"
                self.events.add(InstanceEvent(end.instance_id, SPOT_TERMINATED, now, detail))
                log.info("job retry: instance %s %s", end.instance_id, detail)
        return True

    def _act(self, choice: Choice, now: datetime) -> str:
        job = choice.job
        if choice.result == EXHAUSTED:
            self.ledger = record_exhausted(self.ledger, choice, now)
            log.warning(
                "job retries exhausted: %s run %d job %d (%s) on %s, attempt %d: %s",
                job.repo,
                job.run_id,
                job.job_id,
                job.name,
                job.runner_name or "no runner",
                job.run_attempt,
                choice.verdict.evidence,
            )
            return EXHAUSTED
        if choice.result != RERUN:
            return choice.result
        if self.ledger.is_denied(job.repo, now):  # refused earlier in this same tick
            return DENIED
        try:
            self.rerunner.rerun_job(job.repo, job.job_id)
        except RejectedError as exc:  # 422: already re-run (or not re-runnable): never again
            log.info("re-run of %s job %d: GitHub says no (%s)", job.repo, job.job_id, exc)
            self.ledger = record_rerun(self.ledger, choice, now)
            return ALREADY
        except AuthenticationError as exc:  # 403: which of GitHub's three reasons?
            return self._refused(choice, exc, now)
        except NotFoundError as exc:
            log.info("re-run of %s job %d: gone (%s)", job.repo, job.job_id, exc)
            self.ledger = record_rerun(self.ledger, choice, now)
            return ALREADY
        except AutoscalerError as exc:
            log.warning("re-run of %s job %d failed (%s): %s", job.repo, job.job_id, exc.kind, exc)
            return FAILED
        log.info(
            "re-ran %s run %d job %d (%s), attempt %d: %s",
            job.repo,
            job.run_id,
            job.job_id,
            job.name,
            job.run_attempt,
            choice.verdict.evidence,
        )
        self.ledger = record_allowed(record_rerun(self.ledger, choice, now), job.repo)
        self._denied_why.pop(job.repo, None)
        return RERUN

    def _refused(self, choice: Choice, exc: AuthenticationError, now: datetime) -> str:
        """A 403 is a missing permission only when the run is complete and still at the
        failed job's attempt. Before this, a re-run whose 201 was lost (sent again: 403,
        "not the latest attempt") paused the whole repository for hours and paged."""
        job = choice.job
        try:
            progress: RunProgress | None = self.rerunner.run_progress(job.repo, job.run_id)
        except AutoscalerError as lookup:
            log.warning(
                "re-run of %s job %d: 403, and the run could not be read (%s)",
                job.repo,
                job.job_id,
                lookup.kind,
            )
            progress = None
        if progress is not None and progress.attempt > job.run_attempt:
            log.info(
                "re-run of %s job %d: the run is at attempt %d already (re-run before)",
                job.repo,
                job.job_id,
                progress.attempt,
            )
            self.ledger = record_rerun(self.ledger, choice, now)
            return ALREADY
        if progress is not None and progress.status != "completed":
            log.info(
                "re-run of %s job %d: the run is %s; asked again once it completes",
                job.repo,
                job.job_id,
                progress.status,
            )
            return DEFERRED
        if job.repo not in self.ledger.denied:  # said once per incident
            log.error(
                "job re-runs in %s are not permitted: %s. The token or GitHub App needs "
                "Actions: read and write on the repository; no re-run is tried there for "
                "the next hours",
                job.repo,
                exc,
            )
        self.ledger = record_denied(self.ledger, job.repo, now)
        self._denied_why[job.repo] = str(exc)
        return DENIED

    def _count(self, choice: Choice, result: str) -> None:
        matched = match_job(choice.job.labels, self.types)
        runner_type = matched.name if matched is not None else "unmatched"
        self.metrics.job_retries.labels(runner_type, choice.verdict.reason, result).inc()

    # --- the ledger's persistence
    def _reload(self) -> None:
        if self.store is None:
            self._loaded = True
            return
        try:
            stored = decode(self.store.load_job_retries())
        except StateError as exc:
            log.warning("job retry ledger not read (%s); using the one in memory", exc.kind)
            return
        # What this process recorded but could not save yet stays; what another controller
        # recorded is learned.
        unsaved_put, _ = diff(self._stored, self.ledger)
        self._stored = stored
        merged = decode({**encode(stored), **unsaved_put}) if unsaved_put else stored
        self.ledger = merged
        self._loaded = True

    def _save(self) -> None:
        if self.store is None:
            self._stored = self.ledger
            return
        put, drop = diff(self._stored, self.ledger)
        if not put and not drop:
            return
        try:
            self.store.save_job_retries(put, drop)
        except StateError as exc:
            log.warning(
                "job retry ledger not saved (%s %s); the next tick retries", exc.kind, exc.code
            )
            return
        self._stored = self.ledger

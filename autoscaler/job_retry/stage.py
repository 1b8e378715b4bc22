"""The job-retry stage of a tick: see completed runs, judge, decide, re-run, remember.

Each tick (when ``job_retry.enabled``):

1. take the run attempts the CI source saw complete (:class:`CompletedRunSource`: every
   job of the attempt, each completed) into a bounded buffer, those with a failed or
   cancelled job (runs still waiting for a decision stay there: deferred by the hourly
   bound, a failed call, a refused repository, or too fresh to judge);
2. judge each failed or cancelled job with
   :func:`~autoscaler.job_retry.classify.classify` against what happened to the instances
   (:class:`~autoscaler.job_retry.model.InstanceEvents`). A failure with no evidence yet
   waits :data:`SETTLE` after its completion first (its whole run waits): a Spot warning's
   event may reach the queue a little after GitHub reports the job failed. One still
   without evidence then is checked with EC2 itself (:class:`InstanceFates`, one call a
   tick for all of them): an instance EC2 says Spot ended counts as a Spot loss even when
   the interruption warning and the state-change event were both missed. Only within
   ``EVENT_GRACE`` of the job's completion: an instance found ended later may have ended
   after the job. Then the run as a whole
   (:func:`~autoscaler.job_retry.classify.judge_run`): every failure lost, every cancel
   caused by the loss;
3. :func:`~autoscaler.job_retry.decide.decide` per run attempt over the ledger, re-read
   from the store first whenever something may be re-run (a new leader, or a restarted
   one, sees what the last one did);
4. act: ``POST .../actions/runs/{run_id}/rerun-failed-jobs`` (:class:`JobRerunner`), one
   per run attempt, with the ledger's record of it saved first: a controller that dies
   before GitHub's answer is recorded leaves a record that makes the next one read the
   run (:meth:`JobRerunner.run_progress`) instead of asking again. 422 (GitHub says the
   run was already re-run, or cannot be) and 404 are recorded as done, never asked again;
   403 means three things, told apart by reading the run: re-run already (a newer
   attempt), still running (asked again later), or no permission: said once, in one ERROR
   line and the "Job re-runs not permitted" alert, and the repository is left alone for
   :data:`~autoscaler.job_retry.ledger.DENIED_PAUSE`;
5. save what changed in the ledger; report the runs whose retries are exhausted (the
   "Job retries exhausted" alert) and the refusing repositories.

Every decided run is counted once in ``ci_autoscaler_job_retry_runs_total{verdict,result}``
and each of its failed or cancelled jobs in ``ci_autoscaler_job_retries_total{runner_type,
reason,result}`` (a deferred run again when it is finally decided). ``dry_run`` judges and
decides and changes nothing (no call, no ledger write).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

from autoscaler.config import Config
from autoscaler.domain import CANCELLED, CompletedJob, CompletedRun, RunProgress
from autoscaler.errors import (
    AuthenticationError,
    AutoscalerError,
    NotFoundError,
    RejectedError,
    StateError,
    TransientError,
)
from autoscaler.job_retry.classify import (
    EVENT_GRACE,
    LOST,
    RunVerdict,
    Verdict,
    classify,
    judge_run,
    settled,
)
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
    forget_rerun,
    record_allowed,
    record_denied,
    record_exhausted,
    record_rerun,
)
from autoscaler.job_retry.ledger import JobRetryStore, Ledger, decode, diff
from autoscaler.job_retry.model import SPOT_TERMINATED, InstanceEnd, InstanceEvent, InstanceEvents
from autoscaler.observe.queue import match_job
from autoscaler.ports import instance_id_of
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)

#: A failure with no evidence is judged this long after it completed, not before.
SETTLE = timedelta(minutes=2)
#: Runs waiting for a decision at most (the oldest are dropped past it, and logged).
MAX_PENDING = 2000
#: Sorts before every completion time (a run without one is dropped first).
_EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
#: Results that keep a run in the buffer for a later tick.
WAITING = frozenset({DEFERRED, DENIED, FAILED})


@runtime_checkable
class CompletedRunSource(Protocol):
    """Completed run attempts to judge: the poll's runs seen complete, and with webhooks
    the runs whose ``workflow_job`` ``completed`` events told of a failure
    (:class:`~autoscaler.observe.github.webhook_completions.WebhookCompletedRuns`)."""

    def completed_runs(self, now: datetime) -> Sequence[CompletedRun]:
        """Run attempts seen complete since the last call, every job of each (failed
        ones with their annotations). Raises our errors; what it could not afford this
        call, it returns later."""
        ...


@runtime_checkable
class JobRerunner(Protocol):
    def rerun_failed_jobs(self, repo: str, run_id: int) -> None:
        """Ask the CI provider to re-run the run's failed and cancelled jobs (and their
        dependents) in one new attempt. RejectedError: refused as a request (422);
        AuthenticationError: 403 (no permission, or see :meth:`run_progress`);
        NotFoundError: the run is gone."""
        ...

    def run_progress(self, repo: str, run_id: int) -> RunProgress:
        """Where the run is now (a read). GitHub answers a re-run 403 without permission,
        but also for a run re-run already (by someone else, or by us when the 201 was lost)
        and for a run still in progress."""
        ...


@runtime_checkable
class InstanceFates(Protocol):
    """How instances ended, in EC2's words (:class:`autoscaler.scale.aws.asg.AwsAsgPool`)."""

    def instance_ends(self, instance_ids: Sequence[str]) -> Mapping[str, InstanceEnd]:
        """The listed instances that have ended (a running or unknown one is absent).
        Raises our errors."""
        ...


def _pending_key(run: CompletedRun) -> tuple[str, int]:
    return (run.repo, run.run_id)


def _newest(run: CompletedRun) -> datetime:
    return max((j.completed_at for j in run.jobs if j.completed_at), default=_EARLIEST)


class RetryStage:
    def __init__(
        self,
        config: Config,
        source: CompletedRunSource,
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
        #: (repo, run id) -> its latest completed attempt, waiting for a decision.
        self.pending: dict[tuple[str, int], CompletedRun] = {}
        self.ledger = Ledger()
        #: The entries as the store holds them (what the next save diffs against).
        self._stored: dict[str, str] = {}
        self._loaded = False
        self._denied_why: dict[str, str] = {}
        #: (repo, run id, attempt, result) a dry run has logged (each said once).
        self._said: set[tuple[str, int, int, str]] = set()
        self.last_report = RetryReport()

    # --- the tick
    def step(self, now: datetime, *, dry_run: bool = False) -> RetryReport:
        if not self.retry.enabled:
            return self.last_report
        try:
            fresh = self.source.completed_runs(now)
        except AutoscalerError as exc:
            log.warning("completed runs not read this tick (%s): %s", exc.kind, exc)
            self.metrics.stage_failed("job_retry_observe")
            fresh = ()
        self._buffer(fresh)
        self.events.prune(now)
        judged, waiting = self._judge(now)
        if any(v.verdict == LOST for _, v in judged) or not self._loaded:
            self._reload()
        self.ledger = self.ledger.pruned(now)
        choices = []
        for choice in decide(judged, self.ledger, self.retry, now):
            result = choice.result
            if dry_run:
                self._say_once(choice, result)
            else:
                result = self._act(choice, now)
                self._count(choice, result)
            if result in WAITING or (dry_run and result in (RERUN, EXHAUSTED)):
                # (a dry run acts on nothing: the run is still to be decided for real, by
                # this controller or, for a follower, by the leader whose ledger says so)
                waiting[_pending_key(choice.run)] = choice.run
            choices.append(replace(choice, result=result))
        self.pending = waiting
        self._said = {k for k in self._said if (k[0], k[1]) in waiting}
        if not dry_run:
            self._save()
        self.last_report = RetryReport(
            self.ledger.alerting(now),
            {r: self._denied_why.get(r, "403") for r in self.ledger.denied},
            tuple(choices),
        )
        return self.last_report

    def _buffer(self, runs: Sequence[CompletedRun]) -> None:
        for run in runs:
            if not run.of_interest:
                continue
            key = _pending_key(run)
            known = self.pending.get(key)
            if known is None or run.attempt >= known.attempt:  # a newer attempt replaces it
                self.pending[key] = run
        if len(self.pending) > self.max_pending:
            drop = sorted(self.pending.items(), key=lambda kv: _newest(kv[1]))
            excess = drop[: len(self.pending) - self.max_pending]
            for key, _ in excess:
                del self.pending[key]
            log.warning(
                "job retry: %d waiting runs dropped (over %d)", len(excess), self.max_pending
            )

    def _judge(
        self, now: datetime
    ) -> tuple[list[tuple[CompletedRun, RunVerdict]], dict[tuple[str, int], CompletedRun]]:
        events = self.events.snapshot()
        judged: list[tuple[CompletedRun, RunVerdict]] = []
        waiting: dict[tuple[str, int], CompletedRun] = {}
        unexplained: list[CompletedRun] = []
        for key, run in self.pending.items():
            verdicts = self._verdicts(run, events)
            fresh = [
                j for j, v in verdicts if self._unexplained(j, v) and not settled(j, now, SETTLE)
            ]
            if fresh:
                waiting[key] = run  # an interruption's event may still be on its way
                continue
            if any(self._unexplained(j, v) and self._may_ask_ec2(j, now) for j, v in verdicts):
                unexplained.append(run)
                continue
            judged.append((run, judge_run(verdicts)))
        if unexplained:
            asked = [j for r in unexplained for j, v in self._verdicts(r, events)]
            if self._ask_ec2([j for j in asked if j.failed], now):
                events = self.events.snapshot()
                judged += [(r, judge_run(self._verdicts(r, events))) for r in unexplained]
            else:  # asked again next tick (still within EVENT_GRACE, or judged without)
                waiting.update((_pending_key(r), r) for r in unexplained)
        return judged, waiting

    def _verdicts(
        self, run: CompletedRun, events: Mapping[str, Sequence[InstanceEvent]]
    ) -> list[tuple[CompletedJob, Verdict]]:
        """Each failed or cancelled job of the run with its own verdict."""
        return [
            (j, classify(j, events, self.retry))
            for j in run.jobs
            if j.failed or j.conclusion == CANCELLED
        ]

    @staticmethod
    def _unexplained(job: CompletedJob, verdict: Verdict) -> bool:
        return job.failed and not verdict.infrastructure

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

    # --- acting
    def _act(self, choice: Choice, now: datetime) -> str:
        run = choice.run
        if choice.result == EXHAUSTED:
            self.ledger = record_exhausted(self.ledger, choice, now)
            e = self.ledger.exhausted[run.key]
            log.warning(
                "job retries exhausted: %s run %d attempt %d, %d job(s) lost again, first "
                "%d (%s) on %s: %s",
                run.repo,
                run.run_id,
                run.attempt,
                e.lost_jobs,
                e.job_id,
                e.job_name,
                e.runner or "no runner",
                e.evidence,
            )
            return EXHAUSTED
        if choice.result != RERUN:
            return choice.result
        if self.ledger.is_denied(run.repo, now):  # refused earlier in this same tick
            return DENIED
        if choice.confirm:
            settled_result = self._confirm(choice, now)
            if settled_result is not None:
                return settled_result
        # The record first: whoever finds it unanswered reads the run before asking.
        self.ledger = record_rerun(self.ledger, choice, now, asked=False)
        if not choice.confirm and not self._save():
            self.ledger = forget_rerun(self.ledger, choice)
            return FAILED
        return self._ask(choice, now)

    def _confirm(self, choice: Choice, now: datetime) -> str | None:
        """An asking whose answer was never recorded: the run says whether it went
        through. None: it did not (the run is complete at the same attempt): ask."""
        run = choice.run
        try:
            progress = self.rerunner.run_progress(run.repo, run.run_id)
        except AutoscalerError as exc:
            log.warning(
                "re-run of %s run %d: asked before with no answer recorded, and the run "
                "could not be read (%s); tried again next tick",
                run.repo,
                run.run_id,
                exc.kind,
            )
            return FAILED
        if progress.attempt > run.attempt:
            log.info(
                "re-run of %s run %d attempt %d went through before (the run is at attempt %d)",
                run.repo,
                run.run_id,
                run.attempt,
                progress.attempt,
            )
            self.ledger = record_rerun(self.ledger, choice, now)
            return ALREADY
        if progress.status != "completed":
            return DEFERRED
        return None

    def _ask(self, choice: Choice, now: datetime) -> str:
        run = choice.run
        try:
            self.rerunner.rerun_failed_jobs(run.repo, run.run_id)
        except RejectedError as exc:  # 422: already re-run (or not re-runnable): never again
            log.info("re-run of %s run %d: GitHub says no (%s)", run.repo, run.run_id, exc)
            self.ledger = record_rerun(self.ledger, choice, now)
            return ALREADY
        except AuthenticationError as exc:  # 403: which of GitHub's three reasons?
            return self._refused(choice, exc, now)
        except NotFoundError as exc:
            log.info("re-run of %s run %d: gone (%s)", run.repo, run.run_id, exc)
            self.ledger = record_rerun(self.ledger, choice, now)
            return ALREADY
        except TransientError as exc:
            # It may have reached GitHub (a timeout): the record stays unanswered, and the
            # next tick reads the run before it asks again.
            log.warning(
                "re-run of %s run %d: no answer (%s): %s", run.repo, run.run_id, exc.kind, exc
            )
            return FAILED
        except AutoscalerError as exc:  # not sent (the fence: no longer the leader), ...
            log.warning("re-run of %s run %d failed (%s): %s", run.repo, run.run_id, exc.kind, exc)
            self.ledger = forget_rerun(self.ledger, choice)
            return FAILED
        lost = choice.verdict.lost
        log.info(
            "re-ran the failed jobs of %s run %d, attempt %d: %s; first lost: %s (%s)",
            run.repo,
            run.run_id,
            run.attempt,
            choice.verdict.why,
            lost[0][0].name if lost else "-",
            lost[0][1].evidence if lost else "-",
        )
        self.ledger = record_allowed(record_rerun(self.ledger, choice, now), run.repo)
        self._denied_why.pop(run.repo, None)
        return RERUN

    def _refused(self, choice: Choice, exc: AuthenticationError, now: datetime) -> str:
        """A 403 is a missing permission only when the run is complete and still at the
        decided attempt. A re-run whose 201 was lost (sent again: 403), one someone else
        made, and a run still in progress all answer 403 too."""
        run = choice.run
        try:
            progress: RunProgress | None = self.rerunner.run_progress(run.repo, run.run_id)
        except AutoscalerError as lookup:
            log.warning(
                "re-run of %s run %d: 403, and the run could not be read (%s)",
                run.repo,
                run.run_id,
                lookup.kind,
            )
            progress = None
        if progress is not None and progress.attempt > run.attempt:
            log.info(
                "re-run of %s run %d: the run is at attempt %d already (re-run before)",
                run.repo,
                run.run_id,
                progress.attempt,
            )
            self.ledger = record_rerun(self.ledger, choice, now)
            return ALREADY
        self.ledger = forget_rerun(self.ledger, choice)
        if progress is not None and progress.status != "completed":
            log.info(
                "re-run of %s run %d: the run is %s; asked again once it completes",
                run.repo,
                run.run_id,
                progress.status,
            )
            return DEFERRED
        if run.repo not in self.ledger.denied:  # said once per incident
            log.error(
                "job re-runs in %s are not permitted: %s. The token or GitHub App needs "
                "Actions: read and write on the repository; no re-run is tried there for "
                "the next hours",
                run.repo,
                exc,
            )
        self.ledger = record_denied(self.ledger, run.repo, now)
        self._denied_why[run.repo] = str(exc)
        return DENIED

    def _say_once(self, choice: Choice, result: str) -> None:
        """A dry run (a follower's tick, ``once --dry-run``) asks nothing, so it counts
        nothing: the counters are what was done. It logs each run attempt's decision once,
        so an operator can see on a follower what the leader will do."""
        run = choice.run
        key = (run.repo, run.run_id, run.attempt, result)
        if key in self._said:
            return
        self._said.add(key)
        log.info(
            "job retry decided %s run %d attempt %d: verdict %s, result %s (%s); a dry run "
            "or a follower: nothing asked",
            run.repo,
            run.run_id,
            run.attempt,
            choice.verdict.verdict,
            result,
            choice.why,
        )

    def _count(self, choice: Choice, result: str) -> None:
        self.metrics.job_retry_runs.labels(choice.verdict.verdict, result).inc()
        for job, verdict in choice.verdict.jobs:
            matched = match_job(job.labels, self.types)
            runner_type = matched.name if matched is not None else "unmatched"
            self.metrics.job_retries.labels(runner_type, verdict.reason, result).inc()

    # --- the ledger's persistence
    def _reload(self) -> None:
        if self.store is None:
            self._loaded = True
            return
        try:
            stored = self.store.load_job_retries()
        except StateError as exc:
            log.warning("job retry ledger not read (%s); using the one in memory", exc.kind)
            return
        # What this process recorded but could not save yet stays; what another controller
        # recorded is learned.
        unsaved_put, _ = diff(self._stored, self.ledger)
        self._stored = dict(stored)
        self.ledger = decode({**stored, **unsaved_put})
        self._loaded = True

    def _save(self) -> bool:
        """Store what changed; False when the store refused (the next tick retries)."""
        if self.store is None:
            return True
        put, drop = diff(self._stored, self.ledger)
        if not put and not drop:
            return True
        try:
            self.store.save_job_retries(put, drop)
        except StateError as exc:
            log.warning(
                "job retry ledger not saved (%s %s); the next tick retries", exc.kind, exc.code
            )
            return False
        for key in drop:
            self._stored.pop(key, None)
        self._stored.update(put)
        return True

"""Which run attempts lost to infrastructure are re-run now, within bounds (pure).

For each completed run attempt with its :class:`~autoscaler.job_retry.classify.RunVerdict`,
oldest first, the first rule that applies decides:

1. not ``lost`` (a job's own failure, a cancel before the loss, nothing lost): ``skip``;
2. in the ledger: re-run asked and answered before (by this process or another one):
   ``already``; asked but GitHub's answer never recorded: ``rerun`` with ``confirm`` (the
   stage reads the run before it asks again); or exhausted already: ``already``;
3. more than ``max_failed_jobs_per_run`` jobs of the attempt failed: ``outage`` (an
   outage or a real break: for a human);
4. the run's attempt is not below ``max_attempts``: ``exhausted`` when it was itself a
   re-run (attempt 2 or later: on-call hears once), else ``skip``;
5. GitHub refused re-runs in this repository (403) less than ``DENIED_PAUSE`` ago:
   ``denied``;
6. ``max_per_hour`` run re-runs in the last hour already: ``deferred`` (asked again later);
7. otherwise ``rerun``: one ``rerun-failed-jobs`` for the whole attempt, which brings back
   its failed and cancelled jobs (and their dependents) in one new attempt.

The ``result`` of each :class:`Choice` is the ``result`` label of
``ci_autoscaler_job_retry_runs_total`` and, for each of its jobs, of
``ci_autoscaler_job_retries_total``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from autoscaler.domain import CompletedJob, CompletedRun
from autoscaler.job_retry.classify import LOST, RunVerdict, Verdict
from autoscaler.job_retry.ledger import Exhausted, Ledger, Rerun

if TYPE_CHECKING:
    from autoscaler.config.job_retry import JobRetryConfig

RERUN = "rerun"
SKIP = "skip"
ALREADY = "already"
OUTAGE = "outage"
EXHAUSTED = "exhausted"
DENIED = "denied"
DEFERRED = "deferred"
#: What an attempted re-run came to (the stage records them).
FAILED = "failed"
#: Results (bounded: the ``result`` label).
RESULTS = (RERUN, SKIP, ALREADY, OUTAGE, EXHAUSTED, DENIED, DEFERRED, FAILED)
#: What a re-run asks of GitHub (``once --output json``'s ``asked``).
ASK = "rerun-failed-jobs"

HOUR = timedelta(hours=1)


def _job(job: CompletedJob, verdict: Verdict | None = None) -> dict[str, Any]:
    line: dict[str, Any] = {"job_id": job.job_id, "job": job.name, "runner": job.runner_name}
    if verdict is not None:
        line |= {"reason": verdict.reason, "evidence": verdict.evidence}
    return line


@dataclass(frozen=True, slots=True)
class Choice:
    """The decision for one run attempt."""

    run: CompletedRun
    verdict: RunVerdict
    result: str
    why: str
    confirm: bool = False
    """Asked before, GitHub's answer never recorded: read the run before asking again."""

    def as_dict(self) -> dict[str, Any]:
        """One entry of ``once --output json``'s (and ``explain``'s) ``run_retries``."""
        v = self.verdict
        return {
            "repo": self.run.repo,
            "run_id": self.run.run_id,
            "run_attempt": self.run.attempt,
            "verdict": v.verdict,
            "result": self.result,
            "why": self.why,
            "asked": ASK if self.result == RERUN else None,
            "lost": [_job(j, jv) for j, jv in v.lost],
            "cancelled_by_loss": [_job(j) for j in v.cancelled_by_loss],
            "failed_on_their_own": [_job(j, jv) for j, jv in v.own],
            "cancelled_not_by_loss": [_job(j) for j in v.cancelled_before],
        }

    def job_lines(self) -> list[dict[str, Any]]:
        """One line per judged job (``once --output json``'s ``job_retries``): the job's
        own reason and evidence, its run's result and why."""
        return [
            {
                "repo": j.repo,
                "run_id": j.run_id,
                "job_id": j.job_id,
                "job": j.name,
                "run_attempt": j.run_attempt,
                "runner": j.runner_name,
                "reason": jv.reason,
                "evidence": jv.evidence,
                "result": self.result,
                "why": self.why,
            }
            for j, jv in self.verdict.jobs
        ]


@dataclass(frozen=True)
class RetryReport:
    """What the alert stage (and ``once``, ``explain``) need from this tick's retry stage."""

    exhausted: tuple[Exhausted, ...] = ()
    """Runs whose retries ran out recently (the "Job retries exhausted" alert)."""
    denied: Mapping[str, str] = field(default_factory=dict)
    """Repository -> GitHub's refusal (403) of a re-run there."""
    choices: tuple[Choice, ...] = ()


def _oldest(judged: tuple[CompletedRun, RunVerdict], now: datetime) -> datetime:
    times = [j.completed_at for j, _ in judged[1].jobs if j.completed_at is not None]
    return min(times, default=now)


def decide(
    judged: Sequence[tuple[CompletedRun, RunVerdict]],
    ledger: Ledger,
    config: JobRetryConfig,
    now: datetime,
) -> list[Choice]:
    """One choice per judged run attempt, in the order they are to be acted on."""
    budget = config.max_per_hour - ledger.reruns_since(now - HOUR)
    ordered = sorted(judged, key=lambda rv: (_oldest(rv, now), rv[0].repo, rv[0].run_id))
    out: list[Choice] = []
    for run, verdict in ordered:
        known = ledger.reruns.get(run.key)
        failed = sum(1 for j in run.jobs if j.failed)
        if verdict.verdict != LOST:
            out.append(Choice(run, verdict, SKIP, verdict.why))
        elif known is not None and known.asked:
            why = f"re-run already asked for this run attempt at {known.at:%H:%M:%S} UTC"
            out.append(Choice(run, verdict, ALREADY, why))
        elif known is not None:
            why = f"asked at {known.at:%H:%M:%S} UTC, GitHub's answer never recorded"
            out.append(Choice(run, verdict, RERUN, why, confirm=True))
        elif run.key in ledger.exhausted:
            out.append(Choice(run, verdict, ALREADY, "retries exhausted already (alerted)"))
        elif failed > config.max_failed_jobs_per_run:
            why = (
                f"{failed} jobs of the run failed (more than "
                f"job_retry.max_failed_jobs_per_run={config.max_failed_jobs_per_run})"
            )
            out.append(Choice(run, verdict, OUTAGE, why))
        elif run.attempt >= config.max_attempts:
            why = f"attempt {run.attempt} of job_retry.max_attempts={config.max_attempts}"
            out.append(Choice(run, verdict, EXHAUSTED if run.attempt > 1 else SKIP, why))
        elif ledger.is_denied(run.repo, now):
            out.append(Choice(run, verdict, DENIED, "GitHub refused re-runs here (403)"))
        elif budget <= 0:
            why = f"job_retry.max_per_hour={config.max_per_hour} run re-runs this hour"
            out.append(Choice(run, verdict, DEFERRED, why))
        else:
            budget -= 1
            out.append(Choice(run, verdict, RERUN, verdict.why))
    return out


def record_rerun(ledger: Ledger, choice: Choice, now: datetime, *, asked: bool = True) -> Ledger:
    """The re-run is being asked (``asked`` false: before the request), or was answered:
    accepted, or GitHub says it already was. An answer keeps the time of the asking."""
    run, verdict = choice.run, choice.verdict
    known = ledger.reruns.get(run.key)
    lost = verdict.lost
    rerun = Rerun(
        run.repo,
        run.run_id,
        run.attempt,
        known.at if known is not None else now,
        lost[0][1].reason if lost else "",
        tuple(j.job_id for j, _ in lost) + tuple(j.job_id for j in verdict.cancelled_by_loss),
        asked,
    )
    return replace(ledger, reruns={**ledger.reruns, run.key: rerun})


def forget_rerun(ledger: Ledger, choice: Choice) -> Ledger:
    """An asking that certainly did not reach GitHub (or that GitHub certainly refused
    without a re-run): the run attempt may be asked again."""
    key = choice.run.key
    if key not in ledger.reruns:
        return ledger
    return replace(ledger, reruns={k: r for k, r in ledger.reruns.items() if k != key})


def record_exhausted(ledger: Ledger, choice: Choice, now: datetime) -> Ledger:
    run, lost = choice.run, choice.verdict.lost
    job, verdict = lost[0]
    e = Exhausted(
        run.repo,
        run.run_id,
        job.job_id,
        job.name,
        job.runner_name or "",
        run.attempt,
        verdict.reason,
        verdict.evidence,
        now,
        len(lost),
    )
    return replace(ledger, exhausted={**ledger.exhausted, run.key: e})


def record_denied(ledger: Ledger, repo: str, now: datetime) -> Ledger:
    return replace(ledger, denied={**ledger.denied, repo: now})


def record_allowed(ledger: Ledger, repo: str) -> Ledger:
    """A re-run in ``repo`` went through: any earlier 403 is over."""
    if repo not in ledger.denied:
        return ledger
    return replace(ledger, denied={k: v for k, v in ledger.denied.items() if k != repo})

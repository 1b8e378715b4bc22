"""Which jobs lost to infrastructure are re-run now, within bounds (pure).

For each completed job with its :class:`~autoscaler.job_retry.classify.Verdict`, oldest
completion first, the first rule that applies decides:

1. not an infrastructure failure (the user's, cancelled, not failed): ``skip``;
2. already in the ledger (asked before, by this process or an earlier one): ``already``;
3. more than ``max_failed_jobs_per_run`` jobs of its run attempt failed: ``outage``
   (an outage or a real break: for a human);
4. the run's attempt is not below ``max_attempts``: ``exhausted`` when it was itself a
   re-run (attempt 2 or later: on-call hears once), else ``skip``;
5. GitHub refused re-runs in this repository (403) less than ``DENIED_PAUSE`` ago:
   ``denied``;
6. ``max_per_hour`` re-runs in the last hour already: ``deferred`` (asked again later);
7. otherwise ``rerun``.

The ``result`` of each :class:`Choice` is the ``result`` label of
``ci_autoscaler_job_retries_total``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from autoscaler.domain import CompletedJob
from autoscaler.job_retry.classify import Verdict
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

HOUR = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class Choice:
    job: CompletedJob
    verdict: Verdict
    result: str
    why: str

    def as_dict(self) -> dict[str, object]:
        """One line of ``once --output json``'s ``job_retries``."""
        j = self.job
        return {
            "repo": j.repo,
            "run_id": j.run_id,
            "job_id": j.job_id,
            "job": j.name,
            "run_attempt": j.run_attempt,
            "runner": j.runner_name,
            "reason": self.verdict.reason,
            "evidence": self.verdict.evidence,
            "result": self.result,
            "why": self.why,
        }


@dataclass(frozen=True)
class RetryReport:
    """What the alert stage needs from this tick's retry stage."""

    exhausted: tuple[Exhausted, ...] = ()
    """Jobs whose retries ran out recently (the "Job retries exhausted" alert)."""
    denied: Mapping[str, str] = field(default_factory=dict)
    """Repository -> GitHub's refusal (403) of a re-run there."""
    choices: tuple[Choice, ...] = ()


def _key(job: CompletedJob) -> tuple[str, int, int]:
    return (job.repo, job.run_id, job.run_attempt)


def decide(
    judged: Sequence[tuple[CompletedJob, Verdict]],
    ledger: Ledger,
    config: JobRetryConfig,
    now: datetime,
    *,
    failed_in_run: Counter[tuple[str, int, int]] | None = None,
) -> list[Choice]:
    """One choice per judged job, in the order they are to be acted on.

    ``failed_in_run``: (repo, run id, attempt) -> failed jobs in it; by default counted
    from ``judged`` (the poll hands every job of the runs it saw complete).
    """
    failed = (
        failed_in_run
        if failed_in_run is not None
        else Counter(_key(j) for j, _ in judged if j.failed)
    )
    budget = config.max_per_hour - ledger.reruns_since(now - HOUR)
    ordered = sorted(judged, key=lambda jv: (jv[0].completed_at or now, jv[0].repo, jv[0].job_id))
    out: list[Choice] = []
    for job, verdict in ordered:
        if not verdict.infrastructure:
            out.append(Choice(job, verdict, SKIP, verdict.reason))
        elif job.key in ledger.reruns or job.key in ledger.exhausted:
            out.append(Choice(job, verdict, ALREADY, "re-run already asked for this job"))
        elif failed[_key(job)] > config.max_failed_jobs_per_run:
            why = (
                f"{failed[_key(job)]} jobs of the run failed (more than "
                f"job_retry.max_failed_jobs_per_run={config.max_failed_jobs_per_run})"
            )
            out.append(Choice(job, verdict, OUTAGE, why))
        elif job.run_attempt >= config.max_attempts:
            why = f"attempt {job.run_attempt} of job_retry.max_attempts={config.max_attempts}"
            out.append(Choice(job, verdict, EXHAUSTED if job.run_attempt > 1 else SKIP, why))
        elif ledger.is_denied(job.repo, now):
            out.append(Choice(job, verdict, DENIED, "GitHub refused re-runs here (403)"))
        elif budget <= 0:
            why = f"job_retry.max_per_hour={config.max_per_hour} re-runs this hour"
            out.append(Choice(job, verdict, DEFERRED, why))
        else:
            budget -= 1
            out.append(Choice(job, verdict, RERUN, verdict.evidence))
    return out


def record_rerun(ledger: Ledger, choice: Choice, now: datetime) -> Ledger:
    """The re-run was accepted (or GitHub says it already was: 422)."""
    j = choice.job
    rerun = Rerun(j.repo, j.run_id, j.job_id, j.run_attempt, now, choice.verdict.reason)
    return replace(ledger, reruns={**ledger.reruns, j.key: rerun})


def record_exhausted(ledger: Ledger, choice: Choice, now: datetime) -> Ledger:
    j = choice.job
    e = Exhausted(
        j.repo,
        j.run_id,
        j.job_id,
        j.name,
        j.runner_name or "",
        j.run_attempt,
        choice.verdict.reason,
        choice.verdict.evidence,
        now,
    )
    return replace(ledger, exhausted={**ledger.exhausted, j.key: e})


def record_denied(ledger: Ledger, repo: str, now: datetime) -> Ledger:
    return replace(ledger, denied={**ledger.denied, repo: now})


def record_allowed(ledger: Ledger, repo: str) -> Ledger:
    """A re-run in ``repo`` went through: any earlier 403 is over."""
    if repo not in ledger.denied:
        return ledger
    return replace(ledger, denied={k: v for k, v in ledger.denied.items() if k != repo})

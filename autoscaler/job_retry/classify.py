"""Was a failed job lost to infrastructure, or is it the user's failure? (pure)

Decide by what happened to the machine; an exit code is only a hint the user may opt into
(the Kubernetes pod failure policy's answer to the "which exit codes are retryable"
debate). Evidence, strongest first; the first that holds is the verdict's reason:

==========================  =================================================================
reason                      evidence
==========================  =================================================================
``spot_interruption``       the runner's instance got a Spot interruption warning, a
                            rebalance recommendation, or was terminated with
                            ``Server.SpotInstanceTermination``, while the job ran
``instance_terminated``     this controller or the Auto Scaling group terminated the
                            runner's instance (health check, rebalancing) while the job ran
``runner_lost``             an annotation says the runner lost communication with the server
``runner_shutdown``         an annotation says the runner received a shutdown signal
``no_runner``               the job failed with no runner name and no failed step
``exit_code``               an annotation "Process completed with exit code N." with N in
                            ``job_retry.retry_exit_codes`` (empty by default)
``user``                    none of the above: the user's failure (permanent)
==========================  =================================================================

A cancelled job is ``cancelled`` on its own; jobs that did not fail get ``not_failed``.

**Per run attempt** (:func:`judge_run`), once every job of it completed: GitHub's default
``strategy.fail-fast`` cancels a matrix's other legs when one fails, so a Spot reclaim of
one leg ends its siblings ``cancelled``. A cancelled job that completed at or after the
run's first lost job is ``cancelled_by_loss``. The run's verdict, the first that holds:

=========================  ==================================================================
verdict                    when
=========================  ==================================================================
``own_failure``            a failed job has no evidence of an infrastructure failure
``nothing_lost``           no job failed (cancelled ones only)
``cancelled_before_loss``  a job was cancelled before the first loss (a person, a newer
                           push, another cause), or when it cannot be told
``lost``                   every failed job was lost to infrastructure and every cancelled
                           one was cancelled by the loss: the run is worth a re-run
=========================  ==================================================================

The annotation texts are GitHub's own, fixed phrasing (there is no structured field for
them); they are matched from the start of the message, case-insensitively, and a message
cut short or in another shape simply is no evidence. A runner's instance is read from its
name (:func:`autoscaler.ports.instance_id_of`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from autoscaler.domain import CANCELLED, CompletedJob
from autoscaler.job_retry.model import BY_AWS, TERMINATED, InstanceEvent
from autoscaler.ports import instance_id_of

if TYPE_CHECKING:
    from autoscaler.config.job_retry import JobRetryConfig

SPOT = "spot_interruption"
INSTANCE_TERMINATED = "instance_terminated"
RUNNER_LOST = "runner_lost"
RUNNER_SHUTDOWN = "runner_shutdown"
NO_RUNNER = "no_runner"
EXIT_CODE = "exit_code"
USER = "user"
CANCELLED_REASON = "cancelled"
CANCELLED_BY_LOSS = "cancelled_by_loss"
NOT_FAILED = "not_failed"
#: Every reason (bounded: the ``reason`` label of ``ci_autoscaler_job_retries_total``).
REASONS = (
    SPOT,
    INSTANCE_TERMINATED,
    RUNNER_LOST,
    RUNNER_SHUTDOWN,
    NO_RUNNER,
    EXIT_CODE,
    USER,
    CANCELLED_REASON,
    CANCELLED_BY_LOSS,
    NOT_FAILED,
)

LOST = "lost"
OWN_FAILURE = "own_failure"
NOTHING_LOST = "nothing_lost"
CANCELLED_BEFORE_LOSS = "cancelled_before_loss"
#: Every run verdict (bounded: the ``verdict`` label of ``ci_autoscaler_job_retry_runs_total``).
RUN_VERDICTS = (LOST, OWN_FAILURE, NOTHING_LOST, CANCELLED_BEFORE_LOSS)

#: An instance event this long after the job completed still counts (EventBridge and the
#: poll each lag a little; a Spot warning comes two minutes before the machine goes).
EVENT_GRACE = timedelta(minutes=5)
#: A job with no start time: events this long before its completion count.
UNKNOWN_START = timedelta(hours=6)
#: Only the start of a message is read (an annotation may carry kilobytes).
MESSAGE_PREFIX = 1000

_NEVER = datetime.max.replace(tzinfo=UTC)

_LOST = re.compile(r"the (?:self-hosted |hosted )?runner:? .{0,300}? lost communication", re.I)
_SHUTDOWN = re.compile(r"the runner has received a shutdown signal", re.I)
_EXIT = re.compile(r"process completed with exit code (\d{1,3})\.?\s*$", re.I)


@dataclass(frozen=True, slots=True)
class Verdict:
    """``infrastructure``: worth a re-run; ``reason`` one of :data:`REASONS`; ``evidence``
    one line for people (alerts, logs)."""

    infrastructure: bool
    reason: str
    evidence: str


@dataclass(frozen=True, slots=True)
class RunVerdict:
    """The verdict on one run attempt: ``verdict`` one of :data:`RUN_VERDICTS`; ``jobs``
    each failed or cancelled job with its own verdict (a cancel the loss caused is
    ``cancelled_by_loss``), in completion order; ``why`` one line for people."""

    verdict: str
    jobs: tuple[tuple[CompletedJob, Verdict], ...]
    why: str

    @property
    def lost(self) -> tuple[tuple[CompletedJob, Verdict], ...]:
        """The failed jobs lost to infrastructure."""
        return tuple((j, v) for j, v in self.jobs if j.failed and v.infrastructure)

    @property
    def cancelled_by_loss(self) -> tuple[CompletedJob, ...]:
        return tuple(j for j, v in self.jobs if v.reason == CANCELLED_BY_LOSS)

    @property
    def own(self) -> tuple[tuple[CompletedJob, Verdict], ...]:
        """The failed jobs with no evidence of an infrastructure failure."""
        return tuple((j, v) for j, v in self.jobs if j.failed and not v.infrastructure)

    @property
    def cancelled_before(self) -> tuple[CompletedJob, ...]:
        """The cancelled jobs no loss caused: before the first loss, when it cannot be
        told, or in a run with no loss at all."""
        return tuple(j for j, v in self.jobs if v.reason == CANCELLED_REASON)


def exit_codes(job: CompletedJob) -> tuple[int, ...]:
    """The exit codes the job's annotations report, in order."""
    codes = []
    for a in job.annotations or ():
        match = _EXIT.match(a.message[:MESSAGE_PREFIX].strip())
        if match:
            codes.append(int(match.group(1)))
    return tuple(codes)


def _during(job: CompletedJob, event: InstanceEvent) -> bool:
    end = job.completed_at
    start = job.started_at
    if start is None:
        start = end - UNKNOWN_START if end is not None else None
    if start is not None and event.at < start:
        return False
    return end is None or event.at <= end + EVENT_GRACE


def _instance_verdict(
    job: CompletedJob, events: Mapping[str, Sequence[InstanceEvent]]
) -> Verdict | None:
    instance = instance_id_of(job.runner_name or "")
    if instance is None:
        return None
    seen = [e for e in events.get(instance, ()) if _during(job, e)]
    aws = next((e for e in seen if e.kind in BY_AWS), None)
    if aws is not None:
        return Verdict(True, SPOT, f"instance {instance}: {aws.kind} at {aws.at:%H:%M:%S} UTC")
    ours = next((e for e in seen if e.kind == TERMINATED), None)
    if ours is not None:
        why = f" ({ours.detail})" if ours.detail else ""
        return Verdict(
            True,
            INSTANCE_TERMINATED,
            f"instance {instance} terminated at {ours.at:%H:%M:%S} UTC while the job ran{why}",
        )
    return None


def _annotation_verdict(job: CompletedJob) -> Verdict | None:
    for a in job.annotations or ():
        text = a.message[:MESSAGE_PREFIX].strip()
        if _LOST.match(text):
            return Verdict(True, RUNNER_LOST, "annotation: the runner lost communication")
    for a in job.annotations or ():
        if _SHUTDOWN.match(a.message[:MESSAGE_PREFIX].strip()):
            return Verdict(True, RUNNER_SHUTDOWN, "annotation: the runner got a shutdown signal")
    return None


def classify(
    job: CompletedJob,
    events: Mapping[str, Sequence[InstanceEvent]],
    config: JobRetryConfig,
) -> Verdict:
    """The verdict on one completed job; ``events``: instance id -> what happened to it."""
    if job.conclusion == CANCELLED:
        return Verdict(False, CANCELLED_REASON, "cancelled (judged with its run)")
    if not job.failed:
        return Verdict(False, NOT_FAILED, f"conclusion {job.conclusion or 'unknown'}")
    found = _instance_verdict(job, events) or _annotation_verdict(job)
    if found is not None:
        return found
    if not job.runner_name and not job.failed_step:
        return Verdict(True, NO_RUNNER, "failed with no runner and no failed step")
    listed = [c for c in exit_codes(job) if c in config.retry_exit_codes]
    if listed:
        return Verdict(True, EXIT_CODE, f"exit code {listed[0]} (job_retry.retry_exit_codes)")
    codes = exit_codes(job)
    shown = f" (exit code {codes[0]})" if codes else ""
    return Verdict(False, USER, f"no evidence of an infrastructure failure{shown}")


def settled(job: CompletedJob, now: datetime, wait: timedelta) -> bool:
    """True once ``wait`` has passed since the job completed (unknown: settled): an
    interruption's event may reach us a little after GitHub reports the failure."""
    return job.completed_at is None or now - job.completed_at >= wait


def _completion_order(job: CompletedJob) -> tuple[bool, datetime, int]:
    """Oldest completion first; a job with no completion time last."""
    return (job.completed_at is None, job.completed_at or _NEVER, job.job_id)


def _named(job: CompletedJob) -> str:
    return f"{job.name or 'job'} (job {job.job_id})"


def _more(count: int) -> str:
    return f" and {count} more" if count else ""


def judge_run(judged: Sequence[tuple[CompletedJob, Verdict]]) -> RunVerdict:
    """The verdict on a run attempt from its jobs' own verdicts (:func:`classify` of each
    failed or cancelled job; others are ignored)."""
    mine = sorted(
        ((j, v) for j, v in judged if j.failed or j.conclusion == CANCELLED),
        key=lambda jv: _completion_order(jv[0]),
    )
    lost = [j for j, v in mine if j.failed and v.infrastructure]
    own = [(j, v) for j, v in mine if j.failed and not v.infrastructure]
    first = None
    if lost and all(j.completed_at is not None for j in lost):
        first = min(lost, key=_completion_order)
    out = tuple(
        (job, _cancel_verdict(job, first, bool(lost)) if job.conclusion == CANCELLED else verdict)
        for job, verdict in mine
    )
    early = [j for j, v in out if v.reason == CANCELLED_REASON]
    if own:
        job, verdict = own[0]
        why = f"{_named(job)}{_more(len(own) - 1)} failed on its own: {verdict.evidence}"
        return RunVerdict(OWN_FAILURE, out, why)
    if not lost:
        return RunVerdict(NOTHING_LOST, out, "no job of the run failed: cancelled only")
    if early:
        why = f"{_named(early[0])}{_more(len(early) - 1)} was cancelled before the first loss"
        if first is not None and early[0].completed_at is not None:
            why += (
                f" ({early[0].completed_at:%H:%M:%S} UTC, the loss at "
                f"{first.completed_at:%H:%M:%S} UTC)"
            )
        return RunVerdict(CANCELLED_BEFORE_LOSS, out, why + ": a person or another cause")
    cancels = sum(1 for j, v in out if v.reason == CANCELLED_BY_LOSS)
    why = f"{len(lost)} lost to infrastructure ({_named(lost[0])}{_more(len(lost) - 1)})"
    if cancels:
        why += f", {cancels} cancelled by the loss"
    return RunVerdict(LOST, out, why)


def _cancel_verdict(job: CompletedJob, first: CompletedJob | None, any_lost: bool) -> Verdict:
    """A cancelled job is the loss's doing when it completed at or after the first lost
    job did (GitHub cancels fail-fast siblings right after the failure)."""
    if first is None or first.completed_at is None:
        why = "a job was lost, but when is unknown" if any_lost else "cancelled, nothing lost"
        return Verdict(False, CANCELLED_REASON, why)
    if job.completed_at is None:
        return Verdict(False, CANCELLED_REASON, "cancelled at an unknown time")
    if job.completed_at < first.completed_at:
        return Verdict(
            False,
            CANCELLED_REASON,
            f"cancelled at {job.completed_at:%H:%M:%S} UTC, before {_named(first)} was lost "
            f"at {first.completed_at:%H:%M:%S} UTC",
        )
    return Verdict(
        True,
        CANCELLED_BY_LOSS,
        f"cancelled at {job.completed_at:%H:%M:%S} UTC, after {_named(first)} was lost",
    )

"""The classifier's table: evidence strongest first, everything else the user's failure."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from autoscaler.config.job_retry import JobRetryConfig
from autoscaler.domain import Annotation, CompletedJob
from autoscaler.job_retry.classify import (
    CANCELLED_BEFORE_LOSS,
    CANCELLED_BY_LOSS,
    CANCELLED_REASON,
    EXIT_CODE,
    INSTANCE_TERMINATED,
    NO_RUNNER,
    NOT_FAILED,
    NOTHING_LOST,
    OWN_FAILURE,
    RUNNER_LOST,
    RUNNER_SHUTDOWN,
    SPOT,
    USER,
    Verdict,
    classify,
    exit_codes,
    judge_run,
    settled,
)
from autoscaler.job_retry.classify import (
    LOST as RUN_LOST,
)
from autoscaler.job_retry.model import (
    REBALANCE,
    SPOT_INTERRUPTION,
    SPOT_TERMINATED,
    TERMINATED,
    InstanceEvent,
)

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
INSTANCE = "i-0abc123def4567890"
RUNNER = f"ci-gpu-spot-{INSTANCE}"
LOST = (
    f"The self-hosted runner: {RUNNER} lost communication with the server. Verify the "
    "machine is running and has a healthy network connection. Anything in your workflow "
    "that terminates the runner process, starves it for CPU/Memory, or blocks its network "
    "access can cause this error."
)
SHUTDOWN = (
    "The runner has received a shutdown signal. This can happen when the runner service is "
    "stopped, or a manually started runner is canceled."
)


def job(**kw: object) -> CompletedJob:
    base = CompletedJob(
        repo="pytorch",
        run_id=7,
        job_id=70,
        name="test (gpu, 1)",
        conclusion="failure",
        run_attempt=1,
        runner_name=RUNNER,
        started_at=T0,
        completed_at=T0 + timedelta(minutes=30),
        failed_step=True,
        annotations=(),
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def ann(message: str, level: str = "failure") -> Annotation:
    return Annotation(level, message)


def ev(kind: str, minutes: float, instance: str = INSTANCE) -> InstanceEvent:
    return InstanceEvent(instance, kind, T0 + timedelta(minutes=minutes))


NONE: dict[str, list[InstanceEvent]] = {}
CODES = JobRetryConfig(retry_exit_codes=frozenset({137, 143}))
DEFAULT = JobRetryConfig()

CASES = [
    # (job, events, config, infrastructure, reason)
    pytest.param(
        job(), {INSTANCE: [ev(SPOT_INTERRUPTION, 28)]}, DEFAULT, True, SPOT, id="spot-warning"
    ),
    pytest.param(
        job(), {INSTANCE: [ev(REBALANCE, 10)]}, DEFAULT, True, SPOT, id="rebalance-recommendation"
    ),
    pytest.param(
        job(), {INSTANCE: [ev(SPOT_TERMINATED, 31)]}, DEFAULT, True, SPOT, id="spot-terminated"
    ),
    pytest.param(
        job(),
        {INSTANCE: [ev(TERMINATED, 20), ev(SPOT_INTERRUPTION, 18)]},
        DEFAULT,
        True,
        SPOT,
        id="aws-interruption-beats-termination",
    ),
    pytest.param(
        job(),
        {INSTANCE: [ev(TERMINATED, 20)]},
        DEFAULT,
        True,
        INSTANCE_TERMINATED,
        id="terminated-by-us-or-asg-while-running",
    ),
    pytest.param(
        job(annotations=(ann(LOST),)),
        {INSTANCE: [ev(TERMINATED, 20)]},
        DEFAULT,
        True,
        INSTANCE_TERMINATED,
        id="instance-evidence-beats-annotation",
    ),
    pytest.param(
        job(),
        {INSTANCE: [ev(SPOT_INTERRUPTION, -60)]},
        DEFAULT,
        False,
        USER,
        id="interruption-before-the-job-started-is-no-evidence",
    ),
    pytest.param(
        job(),
        {INSTANCE: [ev(SPOT_INTERRUPTION, 60)]},
        DEFAULT,
        False,
        USER,
        id="interruption-long-after-the-job-is-no-evidence",
    ),
    pytest.param(
        job(),
        {"i-0fffffffffffffff0": [ev(SPOT_INTERRUPTION, 10, "i-0fffffffffffffff0")]},
        DEFAULT,
        False,
        USER,
        id="another-instance-interrupted",
    ),
    pytest.param(
        job(runner_name="gpu-runner-7"),
        {INSTANCE: [ev(SPOT_INTERRUPTION, 10)]},
        DEFAULT,
        False,
        USER,
        id="runner-name-without-instance-id",
    ),
    pytest.param(
        job(started_at=None),
        {INSTANCE: [ev(SPOT_INTERRUPTION, 10)]},
        DEFAULT,
        True,
        SPOT,
        id="no-start-time-recent-event-counts",
    ),
    pytest.param(job(annotations=(ann(LOST),)), NONE, DEFAULT, True, RUNNER_LOST, id="lost"),
    pytest.param(
        job(
            annotations=(
                ann("The hosted runner: GitHub Actions 12 lost communication with the server."),
            )
        ),
        NONE,
        DEFAULT,
        True,
        RUNNER_LOST,
        id="lost-hosted-wording",
    ),
    pytest.param(
        job(annotations=(ann(SHUTDOWN),)), NONE, DEFAULT, True, RUNNER_SHUTDOWN, id="shutdown"
    ),
    pytest.param(
        job(annotations=(ann(SHUTDOWN), ann(LOST))),
        NONE,
        DEFAULT,
        True,
        RUNNER_LOST,
        id="lost-beats-shutdown",
    ),
    pytest.param(
        job(annotations=(ann("Process completed with exit code 1."), ann(SHUTDOWN))),
        NONE,
        DEFAULT,
        True,
        RUNNER_SHUTDOWN,
        id="shutdown-among-other-annotations",
    ),
    pytest.param(
        job(runner_name=None, failed_step=None),
        NONE,
        DEFAULT,
        True,
        NO_RUNNER,
        id="no-runner-no-steps",
    ),
    pytest.param(
        job(runner_name="", failed_step=False),
        NONE,
        DEFAULT,
        True,
        NO_RUNNER,
        id="empty-runner-no-failed-step",
    ),
    pytest.param(
        job(runner_name=None, failed_step=True),
        NONE,
        DEFAULT,
        False,
        USER,
        id="no-runner-but-a-failed-step-is-the-users",
    ),
    pytest.param(
        job(annotations=(ann("Process completed with exit code 137."),)),
        NONE,
        DEFAULT,
        False,
        USER,
        id="exit-137-alone-is-never-enough-by-default",
    ),
    pytest.param(
        job(annotations=(ann("Process completed with exit code 137."),)),
        NONE,
        CODES,
        True,
        EXIT_CODE,
        id="exit-137-listed",
    ),
    pytest.param(
        job(annotations=(ann("Process completed with exit code 1."),)),
        NONE,
        CODES,
        False,
        USER,
        id="exit-1-not-listed",
    ),
    pytest.param(job(), NONE, DEFAULT, False, USER, id="plain-failure"),
    pytest.param(
        job(conclusion="timed_out"), NONE, DEFAULT, False, USER, id="timed-out-is-the-users"
    ),
    pytest.param(
        job(conclusion="cancelled", annotations=(ann(LOST),)),
        {INSTANCE: [ev(SPOT_INTERRUPTION, 10)]},
        DEFAULT,
        False,
        CANCELLED_REASON,
        id="a-cancel-alone-is-no-loss-its-run-judges-it",
    ),
    pytest.param(job(conclusion="success"), NONE, DEFAULT, False, NOT_FAILED, id="success"),
    pytest.param(job(conclusion=""), NONE, DEFAULT, False, NOT_FAILED, id="no-conclusion"),
    # bad input: missing, truncated, odd-shaped annotations
    pytest.param(job(annotations=None), NONE, CODES, False, USER, id="annotations-unread"),
    pytest.param(
        job(annotations=(ann("The self-hosted runner: ci-gpu-spot-i-0abc lost commun"),)),
        NONE,
        DEFAULT,
        False,
        USER,
        id="truncated-lost-message-is-no-evidence",
    ),
    pytest.param(
        job(annotations=(ann("Process completed with exit code"),)),
        NONE,
        CODES,
        False,
        USER,
        id="truncated-exit-code",
    ),
    pytest.param(
        job(annotations=(ann("Process completed with exit code 1370."),)),
        NONE,
        CODES,
        False,
        USER,
        id="exit-code-out-of-range",
    ),
    pytest.param(
        job(annotations=(ann("echo 'The runner has received a shutdown signal' > log"),)),
        NONE,
        DEFAULT,
        False,
        USER,
        id="phrase-quoted-inside-user-output-is-no-evidence",
    ),
    pytest.param(
        job(annotations=(ann(""), ann("x" * 100_000))),
        NONE,
        CODES,
        False,
        USER,
        id="empty-and-huge-messages",
    ),
    pytest.param(
        job(annotations=(ann(LOST.upper(), level="warning"),)),
        NONE,
        DEFAULT,
        True,
        RUNNER_LOST,
        id="case-and-level-do-not-matter",
    ),
]


@pytest.mark.parametrize(("the_job", "events", "config", "infrastructure", "reason"), CASES)
def test_classify(
    the_job: CompletedJob,
    events: dict[str, list[InstanceEvent]],
    config: JobRetryConfig,
    infrastructure: bool,
    reason: str,
) -> None:
    verdict = classify(the_job, events, config)
    assert (verdict.infrastructure, verdict.reason) == (infrastructure, reason)
    assert verdict.evidence


def test_the_evidence_names_the_instance_and_when() -> None:
    verdict = classify(job(), {INSTANCE: [ev(SPOT_INTERRUPTION, 28)]}, DEFAULT)
    assert INSTANCE in verdict.evidence
    assert "12:28:00" in verdict.evidence


def test_a_users_exit_code_is_named_in_the_evidence() -> None:
    verdict = classify(
        job(annotations=(ann("Process completed with exit code 2."),)), NONE, DEFAULT
    )
    assert "exit code 2" in verdict.evidence


def test_exit_codes_reads_every_annotation_in_order() -> None:
    anns = (
        ann("Process completed with exit code 143."),
        ann("noise"),
        ann("Process completed with exit code 1"),
    )
    assert exit_codes(job(annotations=anns)) == (143, 1)


@pytest.mark.parametrize(
    ("completed", "wait", "expected"),
    [
        pytest.param(T0, 60, False, id="just-completed"),
        pytest.param(T0 - timedelta(seconds=61), 60, True, id="after-the-wait"),
        pytest.param(None, 60, True, id="unknown-completion"),
    ],
)
def test_settled(completed: datetime | None, wait: float, expected: bool) -> None:
    assert settled(job(completed_at=completed), T0, timedelta(seconds=wait)) is expected


# --- per run attempt: the loss and the cancels it caused
INFRA = Verdict(True, SPOT, "instance i-0abc: spot_interruption")


def lost(job_id: int, minute: float) -> tuple[CompletedJob, Verdict]:
    return (job(job_id=job_id, completed_at=T0 + timedelta(minutes=minute)), INFRA)


def own(job_id: int, minute: float) -> tuple[CompletedJob, Verdict]:
    failed = job(job_id=job_id, completed_at=T0 + timedelta(minutes=minute))
    return (failed, classify(failed, NONE, DEFAULT))


def cancel(job_id: int, minute: float | None) -> tuple[CompletedJob, Verdict]:
    at = None if minute is None else T0 + timedelta(minutes=minute)
    cancelled = job(job_id=job_id, conclusion="cancelled", completed_at=at, failed_step=None)
    return (cancelled, classify(cancelled, NONE, DEFAULT))


def passed(job_id: int) -> tuple[CompletedJob, Verdict]:
    ok = job(job_id=job_id, conclusion="success")
    return (ok, classify(ok, NONE, DEFAULT))


RUNS = [
    # (the run's jobs, verdict, lost ids, cancelled-by-the-loss ids)
    pytest.param(
        [lost(1, 30), cancel(2, 30), cancel(3, 30.1), cancel(4, 31)],
        RUN_LOST,
        [1],
        [2, 3, 4],
        id="fail-fast-matrix-one-leg-lost",
    ),
    pytest.param(
        [lost(1, 30), lost(2, 30), lost(3, 31), passed(4)],
        RUN_LOST,
        [1, 2, 3],
        [],
        id="three-lost-one-run",
    ),
    pytest.param(
        [cancel(2, 31), lost(1, 30), lost(3, 32), cancel(4, 33)],
        RUN_LOST,
        [1, 3],
        [2, 4],
        id="after-the-first-loss-counts",
    ),
    pytest.param([lost(1, 30), own(2, 31)], OWN_FAILURE, [1], [], id="a-leg-failed-exit-1"),
    pytest.param(
        [own(2, 29), lost(1, 30), cancel(3, 30)],
        OWN_FAILURE,
        [1],
        [3],
        id="own-failure-wins-over-everything",
    ),
    pytest.param(
        [cancel(2, 29), lost(1, 30)],
        CANCELLED_BEFORE_LOSS,
        [1],
        [],
        id="a-human-cancel-before-the-loss",
    ),
    pytest.param(
        [lost(1, 30), cancel(2, None)],
        CANCELLED_BEFORE_LOSS,
        [1],
        [],
        id="a-cancel-at-an-unknown-time-is-not-the-losss",
    ),
    pytest.param([cancel(1, 30), cancel(2, 30)], NOTHING_LOST, [], [], id="cancelled-only"),
    pytest.param([passed(1)], NOTHING_LOST, [], [], id="nothing-failed"),
]


@pytest.mark.parametrize(("jobs", "verdict", "lost_ids", "by_loss"), RUNS)
def test_judge_run(
    jobs: list[tuple[CompletedJob, Verdict]], verdict: str, lost_ids: list[int], by_loss: list[int]
) -> None:
    judged = judge_run(jobs)
    assert judged.verdict == verdict, judged.why
    assert [j.job_id for j, _ in judged.lost] == lost_ids
    assert [j.job_id for j in judged.cancelled_by_loss] == by_loss
    assert all(v.reason == CANCELLED_BY_LOSS for j, v in judged.jobs if j.job_id in by_loss)
    failed_or_cancelled = [j.job_id for j, _ in jobs if j.conclusion != "success"]
    assert sorted(j.job_id for j, _ in judged.jobs) == sorted(failed_or_cancelled)


def test_the_run_verdict_says_why() -> None:
    """For ``once --output json`` and ``explain``: the job, and what disqualifies the run."""
    exit_1 = (ann("Process completed with exit code 1."),)
    failed = job(job_id=2, name="test (2)", annotations=exit_1)
    mine = judge_run([lost(1, 30), (failed, classify(failed, NONE, DEFAULT))])
    assert mine.why.startswith("test (2) (job 2) failed on its own")
    assert "exit code 1" in mine.why
    early = judge_run([cancel(2, 29), lost(1, 30)])
    assert "cancelled before the first loss (12:29:00 UTC, the loss at 12:30:00 UTC)" in early.why
    matrix = judge_run([lost(1, 30), cancel(2, 30), cancel(3, 30)])
    assert matrix.why == "1 lost to infrastructure (test (gpu, 1) (job 1)), 2 cancelled by the loss"

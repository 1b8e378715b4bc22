"""Which runs' jobs a webhook reconcile lists again (reconcile_plan.jobs_reason)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from autoscaler.domain import Job, JobStatus
from autoscaler.observe.github.reconcile_plan import (
    MAX_AGE_SECONDS,
    Reason,
    RunFacts,
    jobs_reason,
    trusted_reason,
    unexplained_busy,
)

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
NOW = T0 + timedelta(minutes=5)
LABELS = frozenset({"self-hosted", "linux.4xlarge"})
Q, W, R, C = JobStatus.QUEUED, JobStatus.WAITING, JobStatus.IN_PROGRESS, JobStatus.COMPLETED


def job(job_id: int, status: JobStatus, runner: str | None = None) -> Job:
    if status is R and runner is None:
        runner = f"r-{job_id}"
    return Job(job_id, 10, "app", f"job {job_id}", LABELS, status, T0, runner_name=runner)


CASES = [
    # (id, listed jobs, listed_at (s before NOW, None: never), status moved, index live,
    #  completed ids, last event (s before NOW), runners busy, busy unexplained, reason)
    ("never-listed-new", (), None, False, (), (), None, {}, False, Reason.NEW),
    (
        "listed-an-hour-ago-stale",
        (job(1, R),),
        3600,
        False,
        (),
        (),
        None,
        {"r-1": True},
        False,
        Reason.STALE,
    ),
    (
        "moved-to-another-status-listing",
        (job(1, R),),
        300,
        True,
        (),
        (),
        None,
        {"r-1": True},
        False,
        Reason.STATUS,
    ),
    (
        "event-since-listing",
        (job(1, R),),
        300,
        False,
        (job(1, R),),
        (),
        10,
        {"r-1": True},
        False,
        Reason.EVENT,
    ),
    (
        "event-before-listing-is-not-one",
        (job(1, R),),
        300,
        False,
        (job(1, R),),
        (),
        400,
        {"r-1": True},
        False,
        Reason.SETTLED,
    ),
    (
        "event-in-the-listing-tick-is-not-one",
        (job(1, R),),
        300,
        False,
        (job(1, R),),
        (),
        300,
        {"r-1": True},
        False,
        Reason.SETTLED,
    ),
    (
        "waiting-job-in-the-index",
        (job(1, R),),
        300,
        False,
        (job(1, R), job(2, W)),
        (),
        None,
        {"r-1": True},
        False,
        Reason.WAITING,
    ),
    (
        "waiting-job-in-the-listing",
        (job(2, W),),
        300,
        False,
        (),
        (),
        None,
        {},
        False,
        Reason.WAITING,
    ),
    (
        "queued-and-a-busy-runner-unexplained",
        (job(1, Q),),
        300,
        False,
        (job(1, Q),),
        (),
        None,
        {},
        True,
        Reason.QUEUED,
    ),
    (
        "queued-every-busy-runner-explained",
        (job(1, Q),),
        300,
        False,
        (job(1, Q),),
        (),
        None,
        {},
        False,
        Reason.SETTLED,
    ),
    (
        "running-on-an-idle-runner",
        (job(1, R),),
        300,
        False,
        (job(1, R),),
        (),
        None,
        {"r-1": False},
        False,
        Reason.RUNNER,
    ),
    (
        "running-on-an-unlisted-runner",
        (job(1, R),),
        300,
        False,
        (job(1, R),),
        (),
        None,
        {},
        False,
        Reason.RUNNER,
    ),
    (
        "running-without-a-runner-name",
        (job(1, R, ""),),
        300,
        False,
        (),
        (),
        None,
        {},
        False,
        Reason.RUNNER,
    ),
    (
        "all-running-on-busy-runners-settled",
        (job(1, R), job(2, R)),
        300,
        False,
        (job(1, R), job(2, R)),
        (),
        None,
        {"r-1": True, "r-2": True},
        False,
        Reason.SETTLED,
    ),
    (
        "listed-running-since-completed-settled",
        (job(1, R), job(2, R)),
        300,
        False,
        (job(2, R),),
        (1,),
        None,
        {"r-2": True},
        False,
        Reason.SETTLED,
    ),
    (
        "listed-completed-is-ignored",
        (job(1, C, "r-1"),),
        300,
        False,
        (),
        (),
        None,
        {},
        False,
        Reason.SETTLED,
    ),
    (
        "index-newer-than-listing-wins",
        (job(1, Q),),
        300,
        False,
        (job(1, R),),
        (),
        None,
        {"r-1": True},
        True,
        Reason.SETTLED,
    ),
]


@pytest.mark.parametrize(
    ("listed", "ago", "moved", "live", "done", "event", "busy", "unexplained", "want"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_jobs_reason(
    listed: tuple[Job, ...],
    ago: float | None,
    moved: bool,
    live: tuple[Job, ...],
    done: tuple[int, ...],
    event: float | None,
    busy: dict[str, bool],
    unexplained: bool,
    want: Reason,
) -> None:
    wall = NOW.timestamp()
    facts = RunFacts(10, listed, None if ago is None else wall - ago, moved)
    got = jobs_reason(
        facts,
        live,
        set(done),
        last_event_at=None if event is None else NOW - timedelta(seconds=event),
        runners_busy=busy,
        busy_unexplained=unexplained,
        now=wall,
    )
    assert got is want


def test_stale_bound_is_the_max_age() -> None:
    wall = NOW.timestamp()
    facts = RunFacts(10, (job(1, R),), wall - MAX_AGE_SECONDS + 1, False)
    kwargs = {"last_event_at": None, "runners_busy": {"r-1": True}, "busy_unexplained": False}
    assert jobs_reason(facts, (), set(), now=wall, **kwargs) is Reason.SETTLED  # type: ignore[arg-type]
    assert jobs_reason(facts, (), set(), now=wall + 1, **kwargs) is Reason.STALE  # type: ignore[arg-type]


UNEXPLAINED = [
    ("no-runners", {}, set(), False),
    ("idle-runner", {"a": False}, set(), False),
    ("busy-runner-with-its-job", {"a": True}, {"a"}, False),
    ("busy-runner-no-job-known", {"a": True, "b": True}, {"a"}, True),
    ("known-job-on-an-idle-runner-is-not-unexplained", {"a": False}, {"a"}, False),
]


@pytest.mark.parametrize(
    ("busy", "running_on", "want"), [c[1:] for c in UNEXPLAINED], ids=[c[0] for c in UNEXPLAINED]
)
def test_unexplained_busy(busy: dict[str, bool], running_on: set[str], want: bool) -> None:
    assert unexplained_busy(busy, running_on) is want


TRUSTED = [
    # (id, listed jobs, listed_at (s before NOW, None: never), created (s before NOW, None:
    #  unknown), listed live now, status moved, index live, completed ids, reason)
    ("unknown-run-listed-live-is-new", (), None, 60, True, False, (), (), Reason.NEW),
    (
        "young-run-known-by-events-waits",
        (),
        None,
        60,
        True,
        False,
        (job(1, Q),),
        (),
        Reason.SETTLED,
    ),
    (
        "run-an-hour-old-never-listed-is-stale",
        (),
        None,
        3600,
        True,
        False,
        (job(1, Q),),
        (),
        Reason.STALE,
    ),
    ("no-creation-time-is-stale", (), None, None, True, False, (job(1, Q),), (), Reason.STALE),
    (
        "listed-an-hour-ago-is-stale",
        (job(1, R),),
        3600,
        7200,
        False,
        False,
        (job(1, R),),
        (),
        Reason.STALE,
    ),
    (
        "listed-recently-settled",
        (job(1, R),),
        600,
        7200,
        True,
        False,
        (job(1, R),),
        (),
        Reason.SETTLED,
    ),
    (
        "moved-listing-is-status",
        (job(1, R),),
        600,
        700,
        True,
        True,
        (job(1, R),),
        (),
        Reason.STATUS,
    ),
    (
        "listed-live-nothing-live-known-is-hidden",
        (job(1, R),),
        600,
        700,
        True,
        False,
        (),
        (1,),
        Reason.HIDDEN,
    ),
    (
        "not-listed-now-nothing-live-known-is-settled",
        (job(1, R),),
        3600,
        7200,
        False,
        False,
        (),
        (1,),
        Reason.SETTLED,
    ),
    (
        "listing-says-completed-index-agrees",
        (job(1, C),),
        600,
        700,
        True,
        False,
        (),
        (),
        Reason.HIDDEN,
    ),
]


@pytest.mark.parametrize(
    ("listed", "listed_ago", "created_ago", "listed_live", "moved", "live", "completed", "want"),
    [pytest.param(*case[1:], id=case[0]) for case in TRUSTED],
)
def test_trusted_reason(
    listed: tuple[Job, ...],
    listed_ago: float | None,
    created_ago: float | None,
    listed_live: bool,
    moved: bool,
    live: tuple[Job, ...],
    completed: tuple[int, ...],
    want: Reason,
) -> None:
    """With the delivery log vouching for the window, only what a delivery GitHub never
    attempted can hide is a reason: a run GitHub lists live that nothing live is known of,
    a moved run, and the per-run age bound (from the last listing, else the creation)."""
    now = NOW.timestamp()
    run = RunFacts(
        10,
        listed,
        None if listed_ago is None else now - listed_ago,
        moved,
        created_at=None if created_ago is None else now - created_ago,
        listed_live=listed_live,
    )
    assert trusted_reason(run, live, set(completed), now=now, max_age=MAX_AGE_SECONDS) is want

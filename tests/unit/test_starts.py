"""Job starts counted once per job across ticks, with bounded memory; objective windows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from autoscaler.config import Config
from autoscaler.domain import Job, JobStatus, normalize_labels
from autoscaler.observe.starts import StartTracker
from tests.factories import load_config

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
CPU = ["self-hosted", "linux.4xlarge"]
GPU = ["self-hosted", "gpu"]


def cfg() -> Config:
    return load_config(
        runner_types={
            "linux.4xlarge": {"labels": CPU},
            "gpu": {"labels": GPU, "slo": {"queue_time": "5m", "objective": 0.95}},
        },
    )


def job(
    n: int,
    labels: list[str],
    *,
    waited: float,
    started: datetime,
    status: JobStatus = JobStatus.IN_PROGRESS,
) -> Job:
    created = started - timedelta(seconds=waited)
    return Job(n, n, "app", "j", normalize_labels(labels), status, created, started_at=started)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_each_job_is_counted_once_while_it_runs_and_after_it_completes() -> None:
    tracker = StartTracker(cfg())
    running = job(1, GPU, waited=90, started=at(10))
    assert tracker.observe([], at(0)) == []  # the first poll only learns
    [start] = tracker.observe([running], at(30))
    assert (start.runner_type, start.queue_seconds, start.within_objective) == ("gpu", 90.0, True)
    assert tracker.observe([running], at(60)) == []
    done = job(1, GPU, waited=90, started=at(10), status=JobStatus.COMPLETED)
    assert tracker.observe([done], at(90)) == []


def test_jobs_running_at_the_first_poll_are_not_counted() -> None:
    """They started before the controller watched: a restarted controller would count
    them a second time."""
    tracker = StartTracker(cfg())
    old = job(1, CPU, waited=30, started=at(-5))
    assert tracker.observe([old], at(0)) == []
    assert tracker.observe([old], at(30)) == []


@pytest.mark.parametrize(
    ("status", "labels", "counted"),
    [
        pytest.param(JobStatus.QUEUED, CPU, False, id="queued: not started"),
        pytest.param(JobStatus.IN_PROGRESS, ["self-hosted", "arm"], False, id="unmatched"),
        pytest.param(JobStatus.IN_PROGRESS, CPU, True, id="in progress"),
        pytest.param(JobStatus.COMPLETED, CPU, True, id="completed between polls"),
    ],
)
def test_which_jobs_count(status: JobStatus, labels: list[str], counted: bool) -> None:
    tracker = StartTracker(cfg())
    tracker.observe([], at(0))
    j = job(1, labels, waited=5, started=at(10), status=status)
    if status is JobStatus.QUEUED:
        j = Job(1, 1, "app", "j", normalize_labels(labels), status, at(0))
    assert bool(tracker.observe([j], at(30))) is counted


def test_memory_is_bounded_by_the_horizon() -> None:
    """Regression: remembering every job id ever counted grows without end in a busy org.
    Ids are forgotten once their start is older than the horizon; a job seen first after
    that is not counted (never twice)."""
    tracker = StartTracker(cfg(), horizon=6 * 3600)
    tracker.observe([], at(0))
    for hour in range(12):
        jobs = [
            job(hour * 1000 + i, CPU, waited=1, started=at(hour * 3600 + 1)) for i in range(100)
        ]
        assert len(tracker.observe(jobs, at(hour * 3600 + 10))) == 100
    assert len(tracker) <= 700
    late = job(1, CPU, waited=1, started=at(1))  # started 11h ago, its id long forgotten
    assert tracker.observe([late], at(12 * 3600)) == []


def test_objective_windows_and_burn() -> None:
    """Ten GPU jobs in the last 5 minutes, four of them late (over 5m): 60% good, a 5%
    budget burnt 8x; the 6h window also holds an hour-old good batch."""
    tracker = StartTracker(cfg())
    tracker.observe([], at(0))
    early = [job(i, GPU, waited=10, started=at(60)) for i in range(1, 11)]
    tracker.observe(early, at(120))
    now = at(2 * 3600)
    recent = [
        job(100 + i, GPU, waited=600 if i < 4 else 30, started=now - timedelta(seconds=30))
        for i in range(10)
    ]
    starts = tracker.observe(recent, now)
    assert [s.within_objective for s in starts].count(False) == 4
    status = tracker.status(now)["gpu"]
    assert status.counts[300.0] == (6, 10)
    assert status.counts[21600.0] == (16, 20)
    assert status.share(300.0) == pytest.approx(0.6)
    assert status.burn(300.0) == pytest.approx(8.0)
    assert status.burn(3600.0) == pytest.approx(8.0)
    assert not status.burning  # 8 < 14.4 (fast); 30m at 8 and 6h at 4 < 6 (slow)
    assert "linux.4xlarge" not in tracker.status(now)  # no slo, no objective


def test_no_jobs_means_no_burn() -> None:
    tracker = StartTracker(cfg())
    status = tracker.status(T0)["gpu"]
    assert status.share(3600.0) is None and status.burn(3600.0) == 0.0 and not status.burning

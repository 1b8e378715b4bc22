"""Where a job's wait went: the five stages add up to its queue time, whatever order the
moments were seen in, and a job first seen queued keeps when it was first seen."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.domain import STAGES, Job, JobStart, JobStatus, JobWait, Runner
from autoscaler.observe.starts import StartTracker
from autoscaler.observe.waits import RecentWaits, quantile, wait_stages
from autoscaler.scale.scaler import Scaler
from autoscaler.telemetry import Metrics
from tests.factories import load_config
from tests.unit.handover_fakes import handover_ports
from tests.unit.scaling_fakes import (
    GPU,
    FakePool,
    FakeSource,
    config,
    iid,
    inst,
    observation,
    pool,
    rtype,
    runner,
    snapshot,
)

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def at(seconds: float | None) -> datetime | None:
    return None if seconds is None else T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("seen", "asked", "running", "online", "started", "expected"),
    [
        pytest.param(5, 6, 30, 120, 125, (5, 1, 24, 90, 5), id="cold-launch"),
        pytest.param(5, 6, 10, 25, 27, (5, 1, 4, 15, 2), id="warm-instance-started"),
        pytest.param(
            12, -60, -50, -1, 14, (12, 0, 0, 0, 2), id="runner-online-before-the-job-was-seen"
        ),
        pytest.param(None, 6, 30, 120, 125, (0, 6, 24, 90, 5), id="never-seen-queued"),
        pytest.param(5, 6, None, 120, 125, (5, 1, 0, 114, 5), id="launch-time-unknown"),
        pytest.param(5, 6, 30, 200, 125, (5, 1, 24, 95, 0), id="online-seen-after-start"),
        pytest.param(130, 6, 30, 120, 125, (125, 0, 0, 0, 0), id="seen-after-start"),
    ],
)
def test_stages_add_up_to_the_queue_time(
    seen: float | None,
    asked: float | None,
    running: float | None,
    online: float | None,
    started: float,
    expected: tuple[float, ...],
) -> None:
    stages = wait_stages(
        T0, at(seen), at(asked), at(running), at(online), T0 + timedelta(seconds=started)
    )
    assert stages == expected
    assert sum(stages) == started
    assert all(s >= 0 for s in stages)


def test_recent_waits_give_each_stage_its_median_and_p95() -> None:
    waits = RecentWaits(keep=100)
    waits.add([JobWait("cpu", (1, 2, 3, 60 + i, 4)) for i in range(20)])
    [summary] = waits.summary().values()
    assert summary.jobs == 20
    assert set(summary.p50) == set(STAGES)
    assert summary.p50["boot"] == 69 and summary.p95["boot"] == 78
    assert summary.queue_p95 == 88


def test_quantile_nearest_rank() -> None:
    assert quantile([], 0.5) == 0.0
    assert quantile([3.0], 0.95) == 3.0
    assert quantile([float(i) for i in range(1, 101)], 0.95) == 95.0


def job(status: JobStatus, *, started: float | None = None, runner: str | None = None) -> Job:
    return Job(
        id=7,
        run_id=1,
        repo="app",
        name="build",
        labels=frozenset({"self-hosted", "linux.4xlarge"}),
        status=status,
        created_at=T0,
        started_at=at(started),
        runner_name=runner,
    )


def test_a_start_carries_when_the_job_was_first_seen_queued() -> None:
    tracker = StartTracker(load_config())
    assert tracker.observe([], T0) == []  # the first observation only learns
    tracker.observe([job(JobStatus.QUEUED)], at(5))  # type: ignore[arg-type]
    tracker.observe([job(JobStatus.QUEUED)], at(35))  # type: ignore[arg-type]
    [start] = tracker.observe(
        [job(JobStatus.IN_PROGRESS, started=60, runner="ci-cpu-i-0123456789abcdef0")],
        at(65),  # type: ignore[arg-type]
    )
    assert (start.first_seen, start.created_at, start.started_at) == (at(5), T0, at(60))
    assert start.runner_name == "ci-cpu-i-0123456789abcdef0"


def test_each_wait_is_exported_stage_by_stage() -> None:
    metrics = Metrics(CollectorRegistry())
    metrics.job_waits([JobWait("cpu", (1.0, 2.0, 3.0, 40.0, 5.0))])
    value = metrics.registry.get_sample_value
    for stage, seconds in zip(STAGES, (1.0, 2.0, 3.0, 40.0, 5.0), strict=True):
        labels = {"runner_type": "cpu", "stage": stage}
        assert value("ci_autoscaler_job_wait_stage_seconds_count", labels) == 1
        assert value("ci_autoscaler_job_wait_stage_seconds_sum", labels) == seconds


def test_the_scaler_splits_the_wait_of_a_job_on_a_runner_it_asked_for() -> None:
    """Seen queued at T0+5, asked at T0+5, launched at T0+20, online at T0+95, started at
    T0+100: the stages come from the scale-up the runner answered and the pool's launch
    time. A job on a runner nobody asked for (one already there) is not split."""
    cfg = config(rtype(pools=("gpu-od",)))
    fake = FakePool({"gpu-od": pool("gpu-od", [inst(1, "gpu-od")])})
    source = FakeSource()
    s = Scaler(fake, source, cfg, Metrics(CollectorRegistry()), **handover_ports(source))
    old = runner(1, "gpu-od", busy=True)
    seen = T0 + timedelta(seconds=5)
    s.step(snapshot({GPU: 1}, at=seen), observation([old], seen), seen, observation_fresh=True)
    [new] = [i for i in fake.pools["gpu-od"].instances if i.id != iid(1)]
    launched = T0 + timedelta(seconds=20)
    fake.pools["gpu-od"] = replace(
        fake.pools["gpu-od"],
        instances=tuple(
            replace(i, launched_at=launched) if i.id == new.id else i
            for i in fake.pools["gpu-od"].instances
        ),
    )
    online_at = T0 + timedelta(seconds=95)
    fresh = Runner(2, f"gpu-od-{new.id}", frozenset(), online=True, busy=False)
    seen_online = observation([old, fresh], online_at)
    s.step(snapshot({GPU: 1}, at=online_at), seen_online, online_at, observation_fresh=True)

    def start(name: str) -> JobStart:
        return JobStart(
            GPU,
            100.0,
            created_at=T0,
            started_at=T0 + timedelta(seconds=100),
            first_seen=seen,
            runner_name=name,
        )

    [wait] = s.job_waits([start(fresh.name), start(old.name)], seen_online)
    assert wait.by_stage() == {
        "github_lag": 5.0,
        "decision": 0.0,
        "launch": 15.0,
        "boot": 75.0,
        "assignment": 5.0,
    }

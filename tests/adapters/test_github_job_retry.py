"""The job-retry side of GitHubSource against the fake GitHub over real HTTP: the runs the
poll saw complete, their jobs' conclusions and annotations, and the re-run endpoint with
its 201, 403 and 422 answers as typed errors."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.config import GitHubConfig
from autoscaler.domain import CompletedJob, RunProgress
from autoscaler.errors import AuthenticationError, NotFoundError, RejectedError
from autoscaler.fakes.github import FakeGitHub
from autoscaler.fakes.github_reruns import EXIT, LOST, annotation, fail_job, refuse_reruns
from autoscaler.job_retry.decide import ALREADY
from autoscaler.job_retry.stage import RetryStage
from autoscaler.observe.github import failures
from autoscaler.observe.github.source import GitHubSource
from autoscaler.secrets import Secret
from autoscaler.telemetry import Metrics
from tests.factories import load_config

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
GPU = ["self-hosted", "linux.g5.4xlarge.nvidia.gpu"]
RUNNER = "ci-gpu-spot-i-0abc123def4567890"


@dataclass
class World:
    fake: FakeGitHub
    source: GitHubSource
    metrics: Metrics
    now: datetime = T0

    def tick(self, minutes: float = 1.0) -> None:
        self.now += timedelta(minutes=minutes)
        self.source.observe(self.now)

    def skipped(self, kind: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "ci_autoscaler_github_skipped_items_total", {"kind": kind}
        )
        return value or 0.0


@pytest.fixture
def world() -> Iterator[World]:
    holder: list[World] = []
    with FakeGitHub(clock=lambda: holder[0].now) as fake:
        metrics = Metrics(CollectorRegistry())
        cfg = GitHubConfig(owner="demo-org", api_url=fake.url, token=Secret("fake-token"))
        source = GitHubSource(cfg, metrics, sleep=lambda _: None, wall_clock=lambda: wall(holder))
        holder.append(World(fake, source, metrics))
        try:
            yield holder[0]
        finally:
            source.close()


def wall(holder: list[World]) -> float:
    return holder[0].now.timestamp()


def running_job(w: World, name: str = "test", run_id: int | None = None) -> int:
    runner = w.fake.register_runner(f"{RUNNER}-{name}", GPU)
    job = w.fake.queue_job("pytorch", GPU, name=name, run_id=run_id)
    w.fake.assign_job(job, runner)
    return job


def test_a_run_seen_running_then_complete_hands_its_jobs_once(world: World) -> None:
    lost = running_job(world)
    run = world.fake.job(lost).run_id
    ok = running_job(world, "lint", run_id=run)
    world.tick()
    assert world.source.completed_jobs(world.now) == []  # still running
    world.fake.complete_job(ok)
    fail_job(
        world.fake, lost, annotations=[annotation(LOST.format(runner=RUNNER))], failed_step=False
    )
    world.tick()
    jobs = {j.job_id: j for j in world.source.completed_jobs(world.now)}
    assert set(jobs) == {lost, ok}
    failed = jobs[lost]
    assert (failed.conclusion, failed.run_attempt, failed.run_id) == ("failure", 1, run)
    assert failed.runner_name == f"{RUNNER}-test"
    assert failed.failed_step is False
    assert failed.annotations is not None
    assert "lost communication" in failed.annotations[0].message
    assert jobs[ok].annotations is None  # a successful job's annotations are not asked for
    assert world.source.completed_jobs(world.now) == []  # handed once
    asked = world.fake.count(200, r"/check-runs/\d+/annotations")
    assert asked == 1


def test_a_failed_step_and_an_exit_code_are_read(world: World) -> None:
    job = running_job(world)
    world.tick()
    fail_job(world.fake, job, annotations=[annotation(EXIT.format(code=137))])
    world.tick()
    (done,) = world.source.completed_jobs(world.now)
    assert done.failed_step is True
    assert done.annotations is not None
    assert done.annotations[0].message == "Process completed with exit code 137."


def test_rerun_makes_a_new_attempt_as_github_does(world: World) -> None:
    job = running_job(world)
    run = world.fake.job(job).run_id
    world.tick()
    fail_job(world.fake, job)
    world.tick()
    world.source.rerun_job("pytorch", job)
    assert world.fake.reruns == [("pytorch", job)]
    latest = [j for j in world.fake.jobs() if j.run_id == run and j.id != job]
    assert [(j.status, j.run_attempt, j.name) for j in latest] == [("queued", 2, "test")]
    with pytest.raises(AuthenticationError):  # the old attempt's job cannot be re-run again
        world.source.rerun_job("pytorch", job)


@pytest.mark.parametrize(
    ("status", "error"),
    [
        pytest.param(403, AuthenticationError, id="403-no-permission"),
        pytest.param(422, RejectedError, id="422-already-rerun"),
    ],
)
def test_refused_reruns_are_typed_errors(world: World, status: int, error: type[Exception]) -> None:
    job = running_job(world)
    fail_job(world.fake, job)
    refuse_reruns(world.fake, status)
    with pytest.raises(error) as raised:
        world.source.rerun_job("pytorch", job)
    assert "fake-token" not in str(raised.value)
    assert world.fake.reruns == []


def test_rerun_of_an_unknown_job_is_not_found(world: World) -> None:
    world.fake.add_repo("pytorch")
    with pytest.raises(NotFoundError):
        world.source.rerun_job("pytorch", 999_999)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(b"[]", (), id="none"),
        pytest.param(b'{"message": "x"}', None, id="an-object-not-a-list"),
        pytest.param(
            b'[1, "x", null, {"message": null}, {"message": 5}, {"message": "ok"}]',
            ("ok",),
            id="odd-items-skipped",
        ),
        pytest.param(b'[{"message": "cut', None, id="truncated-json"),
        pytest.param(b"<html>bad gateway</html>", None, id="html"),
    ],
)
def test_odd_annotations_never_fail_the_read(
    world: World, body: bytes, expected: tuple[str, ...] | None
) -> None:
    job = running_job(world)
    world.tick()
    fail_job(world.fake, job)
    world.fake.inject_body(r"/annotations", body)
    world.tick()
    (done,) = world.source.completed_jobs(world.now)
    got = None if done.annotations is None else tuple(a.message for a in done.annotations)
    assert got == expected


def test_a_malformed_job_is_skipped_and_counted(world: World) -> None:
    bad = running_job(world)
    run = world.fake.job(bad).run_id
    good = running_job(world, "lint", run_id=run)
    world.tick()
    fail_job(world.fake, bad)
    fail_job(world.fake, good)
    world.fake.override_job(bad, run_attempt="two")
    world.tick()
    assert [j.job_id for j in world.source.completed_jobs(world.now)] == [good]
    assert world.skipped("completed_job") == 1


def test_bounded_per_call_and_waits_while_the_rate_limit_is_low(world: World) -> None:
    ids = [running_job(world, f"j{i}") for i in range(failures.RUNS_PER_TICK + 3)]
    world.tick()
    for job in ids:
        world.fake.complete_job(job)
    world.tick()
    first = world.source.completed_jobs(world.now)
    assert len(first) == failures.RUNS_PER_TICK
    world.fake.RATE_LIMIT = world.fake._rate_used + 10  # nearly spent: under the reserve
    world.tick()
    assert world.source.completed_jobs(world.now) == []
    world.fake.RATE_LIMIT = 5000
    world.tick()
    assert len(world.source.completed_jobs(world.now)) == 3


class Handed:
    """The completed jobs the poll handed over before the (lost) re-run, handed once."""

    def __init__(self, jobs: Sequence[CompletedJob]) -> None:
        self.jobs = list(jobs)

    def completed_jobs(self, now: datetime) -> Sequence[CompletedJob]:
        jobs, self.jobs = self.jobs, []
        return jobs


def test_the_run_is_read_as_github_reports_it(world: World) -> None:
    job = running_job(world)
    run = world.fake.job(job).run_id
    world.tick()
    fail_job(world.fake, job)
    assert world.source.run_progress("pytorch", run) == RunProgress("completed", 1)
    world.source.rerun_job("pytorch", job)
    progress = world.source.run_progress("pytorch", run)
    assert (progress.status != "completed", progress.attempt) == (True, 2)
    with pytest.raises(NotFoundError):
        world.source.run_progress("pytorch", 999_999)


def test_a_rerun_whose_201_was_lost_is_not_taken_for_a_missing_permission(world: World) -> None:
    """The story: the controller re-ran a job, GitHub made attempt 2, and the 201 never
    arrived (a timeout), so the next tick sent the re-run again. GitHub answers that 403
    ("not the latest attempt"), which used to pause re-runs in the whole repository for
    hours and page "Job re-runs not permitted". Now the run is read: attempt 2 exists, so
    the job counts as re-run and the repository is not paused."""
    config = load_config(runner_types={"gpu": {"labels": GPU}}, job_retry={"enabled": True})
    job = running_job(world)
    world.tick()
    fail_job(world.fake, job, annotations=[annotation(LOST.format(runner=RUNNER))])
    world.tick()  # the poll sees the run complete, its job failed
    failed = world.source.completed_jobs(world.now)
    stage = RetryStage(config, Handed(failed), world.source, world.metrics)
    world.source.rerun_job("pytorch", job)  # went through; its answer was "lost"
    report = stage.step(world.now)
    assert [c.result for c in report.choices] == [ALREADY]
    assert report.denied == {}
    assert world.fake.reruns == [("pytorch", job)]  # the second POST changed nothing

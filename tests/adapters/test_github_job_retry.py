"""The job-retry side of GitHubSource against the fake GitHub over real HTTP: the runs the
poll saw complete, their jobs' conclusions and annotations, a run read whole on demand,
and ``rerun-failed-jobs`` with its 201, 403, 404 and 422 answers as typed errors."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.config import GitHubConfig
from autoscaler.domain import CompletedRun, RunProgress
from autoscaler.errors import AuthenticationError, DeferredError, NotFoundError, RejectedError
from autoscaler.fakes.github import FakeGitHub
from autoscaler.fakes.github_reruns import (
    EXIT,
    LOST,
    annotation,
    fail_job,
    refuse_reruns,
    rerun_failed,
)
from autoscaler.job_retry.decide import ALREADY, FAILED, RERUN
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


def jobs_of(runs: Sequence[CompletedRun]) -> list[int]:
    return [j.job_id for run in runs for j in run.jobs]


def test_a_run_seen_running_then_complete_hands_its_jobs_once(world: World) -> None:
    lost = running_job(world)
    run = world.fake.job(lost).run_id
    ok = running_job(world, "lint", run_id=run)
    world.tick()
    assert world.source.completed_runs(world.now) == []  # still running
    world.fake.complete_job(ok)
    fail_job(
        world.fake, lost, annotations=[annotation(LOST.format(runner=RUNNER))], failed_step=False
    )
    world.tick()
    (handed,) = world.source.completed_runs(world.now)
    assert (handed.repo, handed.run_id, handed.attempt) == ("pytorch", run, 1)
    jobs = {j.job_id: j for j in handed.jobs}
    assert set(jobs) == {lost, ok}
    failed = jobs[lost]
    assert (failed.conclusion, failed.run_attempt, failed.run_id) == ("failure", 1, run)
    assert failed.runner_name == f"{RUNNER}-test"
    assert failed.failed_step is False
    assert failed.annotations is not None
    assert "lost communication" in failed.annotations[0].message
    assert jobs[ok].annotations is None  # a successful job's annotations are not asked for
    assert world.source.completed_runs(world.now) == []  # handed once
    asked = world.fake.count(200, r"/check-runs/\d+/annotations")
    assert asked == 1


def test_a_run_that_succeeded_is_read_but_not_handed_on(world: World) -> None:
    job = running_job(world)
    world.tick()
    world.fake.complete_job(job)
    world.tick()
    assert world.source.completed_runs(world.now) == []
    assert world.fake.count(200, r"/actions/runs/\d+/jobs") >= 1


def test_a_failed_step_and_an_exit_code_are_read(world: World) -> None:
    job = running_job(world)
    world.tick()
    fail_job(world.fake, job, annotations=[annotation(EXIT.format(code=137))])
    world.tick()
    ((done,),) = [run.jobs for run in world.source.completed_runs(world.now)]
    assert done.failed_step is True
    assert done.annotations is not None
    assert done.annotations[0].message == "Process completed with exit code 137."


def matrix(w: World) -> tuple[int, list[int]]:
    """A fail-fast matrix of four legs: leg 1 lost, legs 2-4 cancelled after it, a lint
    job that passed."""
    legs = [running_job(w, "test (1)")]
    run = w.fake.job(legs[0]).run_id
    legs += [running_job(w, f"test ({i})", run_id=run) for i in (2, 3, 4)]
    lint = running_job(w, "lint", run_id=run)
    w.fake.complete_job(lint)
    fail_job(w.fake, legs[0], annotations=[annotation(LOST.format(runner=RUNNER))])
    for leg in legs[1:]:
        fail_job(w.fake, leg, conclusion="cancelled", failed_step=False)
    return run, legs


def test_rerun_failed_jobs_brings_the_failed_and_cancelled_back_in_one_attempt(
    world: World,
) -> None:
    """As GitHub documents it: one new attempt, each failed and cancelled job queued again
    in it, the others (lint) keep their result and stay the latest of their name."""
    run, legs = matrix(world)
    world.source.rerun_failed_jobs("pytorch", run)
    assert world.fake.run_reruns == [("pytorch", run)]
    again = [j for j in world.fake.jobs() if j.run_id == run and j.run_attempt == 2]
    assert sorted((j.name, j.status) for j in again) == [
        (f"test ({i})", "queued") for i in (1, 2, 3, 4)
    ]
    assert sorted(j.rerun_of or 0 for j in again) == sorted(legs)
    of_run = [j for j in world.fake.jobs() if j.run_id == run]
    listed = [j for j in of_run if j.id not in {k.rerun_of for k in of_run}]  # filter=latest
    assert sorted((j.name, j.run_attempt) for j in listed) == [
        ("lint", 1),
        *[(f"test ({i})", 2) for i in (1, 2, 3, 4)],
    ]
    progress = world.source.run_progress("pytorch", run)
    assert (progress.status != "completed", progress.attempt) == (True, 2)
    with pytest.raises(AuthenticationError):  # in progress: GitHub refuses a second one
        world.source.rerun_failed_jobs("pytorch", run)
    assert world.fake.run_reruns == [("pytorch", run)]


@pytest.mark.parametrize(
    ("status", "error"),
    [
        pytest.param(403, AuthenticationError, id="403-no-permission"),
        pytest.param(422, RejectedError, id="422-refused"),
    ],
)
def test_refused_reruns_are_typed_errors(world: World, status: int, error: type[Exception]) -> None:
    job = running_job(world)
    fail_job(world.fake, job)
    refuse_reruns(world.fake, status)
    with pytest.raises(error) as raised:
        world.source.rerun_failed_jobs("pytorch", world.fake.job(job).run_id)
    assert "fake-token" not in str(raised.value)
    assert world.fake.run_reruns == []


def test_rerun_of_an_unknown_run_is_not_found(world: World) -> None:
    world.fake.add_repo("pytorch")
    with pytest.raises(NotFoundError):
        world.source.rerun_failed_jobs("pytorch", 999_999)


def test_a_run_re_run_before_it_was_read_is_not_handed_as_complete(world: World) -> None:
    """The run completed; before its jobs were read, someone re-ran it. The listing then
    shows the new attempt's jobs queued: the run is not complete (the poll lists it again
    and finds it once the new attempt ends; a webhook's read says where it is)."""
    job = running_job(world, "test (1)")
    run = world.fake.job(job).run_id
    world.tick()
    fail_job(world.fake, job, annotations=[annotation(LOST.format(runner=RUNNER))])
    world.tick()  # the run left the listings
    world.source.rerun_failed_jobs("pytorch", run)  # someone else's re-run
    assert world.source.completed_runs(world.now) == []

    second = running_job(world, "test (2)")
    other = world.fake.job(second).run_id
    fail_job(world.fake, second, annotations=[annotation(LOST.format(runner=RUNNER))])
    racing = {"done": False}

    def rerun_right_after_the_run_is_read(method: str, path: str, status: int) -> bool:
        if method == "GET" and path.endswith(f"/actions/runs/{other}") and not racing["done"]:
            racing["done"] = True
            with world.fake.lock:
                rerun_failed(world.fake, "demo-org", "pytorch", other, world.now)
        return False

    world.fake.before_reply = rerun_right_after_the_run_is_read
    assert world.source.read_run("pytorch", other) == RunProgress("queued", 2)
    assert racing["done"]


def test_a_run_is_read_whole_once_it_has_completed(world: World) -> None:
    """What a webhook's failed job makes the source read: the run, then (completed) its
    jobs with the failed one's annotations."""
    job = running_job(world, "test (1)")
    run = world.fake.job(job).run_id
    other = running_job(world, "test (2)", run_id=run)
    fail_job(world.fake, job, annotations=[annotation(LOST.format(runner=RUNNER))])
    assert world.source.read_run("pytorch", run) == RunProgress("in_progress", 1)
    fail_job(world.fake, other, conclusion="cancelled", failed_step=False)
    read = world.source.read_run("pytorch", run)
    assert isinstance(read, CompletedRun)
    assert (read.run_id, read.attempt) == (run, 1)
    assert [(j.job_id, j.conclusion) for j in read.jobs] == [(job, "failure"), (other, "cancelled")]
    assert read.jobs[0].annotations is not None
    world.fake._rate_used = world.fake.RATE_LIMIT - 100  # nearly spent: under the reserve
    world.tick(0)
    with pytest.raises(DeferredError):
        world.source.read_run("pytorch", run)


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
    ((done,),) = [run.jobs for run in world.source.completed_runs(world.now)]
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
    assert jobs_of(world.source.completed_runs(world.now)) == [good]
    assert world.skipped("completed_job") == 1


def test_bounded_per_call_and_waits_while_the_rate_limit_is_low(world: World) -> None:
    ids = [running_job(world, f"j{i}") for i in range(failures.RUNS_PER_TICK + 3)]
    world.tick()
    for job in ids:
        fail_job(world.fake, job)
    world.tick()
    first = world.source.completed_runs(world.now)
    assert len(first) == failures.RUNS_PER_TICK
    world.fake.RATE_LIMIT = world.fake._rate_used + 10  # nearly spent: under the reserve
    world.tick()
    assert world.source.completed_runs(world.now) == []
    world.fake.RATE_LIMIT = 5000
    world.tick()
    assert len(world.source.completed_runs(world.now)) == 3


class Handed:
    """The completed runs the poll handed over before the (lost) re-run, handed once."""

    def __init__(self, runs: Sequence[CompletedRun]) -> None:
        self.runs = list(runs)

    def completed_runs(self, now: datetime) -> Sequence[CompletedRun]:
        runs, self.runs = self.runs, []
        return runs


def test_the_run_is_read_as_github_reports_it(world: World) -> None:
    job = running_job(world)
    run = world.fake.job(job).run_id
    world.tick()
    fail_job(world.fake, job)
    assert world.source.run_progress("pytorch", run) == RunProgress("completed", 1)
    world.source.rerun_failed_jobs("pytorch", run)
    progress = world.source.run_progress("pytorch", run)
    assert (progress.status != "completed", progress.attempt) == (True, 2)
    with pytest.raises(NotFoundError):
        world.source.run_progress("pytorch", 999_999)


def test_a_rerun_whose_201_was_lost_is_not_taken_for_a_missing_permission(world: World) -> None:
    """The story: the controller re-ran a run, GitHub made attempt 2, and the 201 never
    arrived (the answer lost, and with it the ledger's record of it), so the run was asked
    again. GitHub answers that 403 ("already running"), which used to pause re-runs in the
    whole repository for hours and page "Job re-runs not permitted". Now the run is read:
    attempt 2 exists, so the run counts as re-run and the repository is not paused."""
    config = load_config(runner_types={"gpu": {"labels": GPU}}, job_retry={"enabled": True})
    job = running_job(world)
    world.tick()
    fail_job(world.fake, job, annotations=[annotation(LOST.format(runner=RUNNER))])
    world.tick()  # the poll sees the run complete, its job failed
    failed = world.source.completed_runs(world.now)
    stage = RetryStage(config, Handed(failed), world.source, world.metrics)
    world.source.rerun_failed_jobs("pytorch", failed[0].run_id)  # went through; answer lost
    report = stage.step(world.now)
    assert [c.result for c in report.choices] == [ALREADY]
    assert report.denied == {}
    assert world.fake.run_reruns == [("pytorch", failed[0].run_id)]  # the second changed nothing


def test_three_lost_jobs_of_one_run_make_one_request_to_github(world: World) -> None:
    """A Spot reclaim of three instances at once: one job re-run per lost job asked GitHub
    for three attempts of the same run, and it refused the second while the first ran.
    The stage over the real source: one rerun-failed-jobs, one new attempt, three legs."""
    config = load_config(runner_types={"gpu": {"labels": GPU}}, job_retry={"enabled": True})
    legs = [running_job(world, "test (1)")]
    run = world.fake.job(legs[0]).run_id
    legs += [running_job(world, f"test ({i})", run_id=run) for i in (2, 3)]
    world.tick()
    for i, leg in enumerate(legs):
        lost = annotation(LOST.format(runner=f"{RUNNER}-test ({i + 1})"))
        fail_job(world.fake, leg, annotations=[lost], failed_step=False)
    world.tick()
    stage = RetryStage(config, world.source, world.source, world.metrics)
    (choice,) = stage.step(world.now).choices
    assert (choice.result, len(choice.verdict.lost)) == (RERUN, 3)
    assert world.fake.run_reruns == [("pytorch", run)]
    assert world.fake.reruns == []
    assert world.fake.count(None, r"/rerun") == 1
    again = [j for j in world.fake.jobs() if j.run_id == run and j.run_attempt == 2]
    assert sorted(j.name for j in again) == [f"test ({i})" for i in (1, 2, 3)]


def test_a_rerun_whose_answer_never_came_is_sent_once_and_confirmed_by_reading_the_run(
    world: World,
) -> None:
    """The story: GitHub made the new attempt, then the connection dropped before its 201.
    The client used to retry the POST inside the call, which asked GitHub for a second
    attempt of a run already re-running (a 403 at best). Now the POST goes out once; the
    stage keeps its unanswered record, and its next step reads the run (attempt 2) instead
    of asking again."""
    config = load_config(runner_types={"gpu": {"labels": GPU}}, job_retry={"enabled": True})
    job = running_job(world)
    run = world.fake.job(job).run_id
    world.tick()
    fail_job(world.fake, job, annotations=[annotation(LOST.format(runner=RUNNER))])
    world.tick()

    def lose_the_reruns_answer(method: str, path: str, status: int) -> bool:
        return method == "POST" and path.endswith("/rerun-failed-jobs")

    world.fake.before_reply = lose_the_reruns_answer
    failed = world.source.completed_runs(world.now)
    stage = RetryStage(config, Handed(failed), world.source, world.metrics)
    assert [c.result for c in stage.step(world.now).choices] == [FAILED]
    assert world.fake.count(None, r"/rerun-failed-jobs$") == 1

    world.fake.before_reply = None
    assert [c.result for c in stage.step(world.now).choices] == [ALREADY]
    assert world.fake.count(None, r"/rerun-failed-jobs$") == 1
    assert world.fake.run_reruns == [("pytorch", run)]

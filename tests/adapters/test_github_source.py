"""GitHubSource against the fake GitHub over real HTTP: shapes, pagination, ETags, errors."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from autoscaler.config import GitHubConfig
from autoscaler.domain import JobStatus
from autoscaler.errors import (
    AuthenticationError,
    NotFoundError,
    RateLimitedError,
    RejectedError,
    TransientError,
)
from autoscaler.fakes.github import FakeGitHub
from autoscaler.observe.github.source import GitHubSource
from autoscaler.secrets import Secret
from autoscaler.telemetry import Metrics

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
CPU = ["self-hosted", "Linux.4xlarge"]


@dataclass
class World:
    fake: FakeGitHub
    metrics: Metrics
    sleeps: list[float] = field(default_factory=list)
    now: datetime = T0

    def source(self, token: str = "fake-token", **config: object) -> GitHubSource:
        cfg = GitHubConfig(
            owner="demo-org",
            api_url=self.fake.url,
            token=Secret(token),
            **config,
        )
        return GitHubSource(
            cfg,
            self.metrics,
            sleep=self.sleeps.append,
            wall_clock=lambda: self.now.timestamp(),  # noqa: PLW0108
        )

    def sample(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


@pytest.fixture
def world() -> Iterator[World]:
    holder: list[World] = []
    with FakeGitHub(clock=lambda: holder[0].now) as fake:
        holder.append(World(fake, Metrics()))
        yield holder[0]


@pytest.fixture
def source(world: World) -> Iterator[GitHubSource]:
    src = world.source()
    yield src
    src.close()


def test_pagination_past_100_runners_and_jobs(world: World, source: GitHubSource) -> None:
    for i in range(250):
        world.fake.register_runner(f"cpu-{i}", CPU)
    first = world.fake.queue_job("app", CPU)
    run_id = world.fake.jobs()[0].run_id
    for _ in range(129):
        world.fake.queue_job("app", CPU, run_id=run_id)
    observation = source.observe(T0)
    assert len(observation.runners) == 250
    assert len({r.id for r in observation.runners}) == 250
    assert len(observation.jobs) == 130
    assert observation.jobs[0].id == first
    assert observation.jobs[0].labels == frozenset({"self-hosted", "linux.4xlarge"})
    assert world.fake.count(path_regex=r"/runners\?per_page=100&page=3") == 1
    assert world.fake.count(path_regex=r"/jobs\?filter=latest&per_page=100&page=2") == 1


def test_second_observe_reuses_bodies_on_304(world: World, source: GitHubSource) -> None:
    for repo in ("app", "infra"):
        world.fake.queue_job(repo, CPU)
    world.fake.register_runner("cpu-1", CPU)
    first = source.observe(T0)
    sent = len(world.fake.requests)
    assert world.fake.count(path_regex="^/rate_limit$") == 1  # the first tick learns the limit
    second = source.observe(T0 + timedelta(seconds=30))
    answered = world.fake.requests[sent:]
    # runners, repos, each repository's runs without a status (the listing ends: it stands
    # for the five by status), one run's jobs (the runs are still queued with every job
    # queued: they take turns within the staleness limit); GET /rate_limit only once; the
    # first tick listed both runs' jobs
    assert len(answered) == 5
    assert sent == 1 + 2 + 2 + 2
    assert all(r.status == 304 for r in answered)
    assert second.jobs == first.jobs
    assert second.runners == first.runners
    assert second.observed_at == T0 + timedelta(seconds=30)
    assert world.sample("ci_autoscaler_github_requests_total", endpoint="jobs", status="304") == 1


def test_jobs_map_status_steps_runner_and_ghosts(world: World, source: GitHubSource) -> None:
    running = world.fake.queue_job("app", CPU, created_at=T0 - timedelta(minutes=5))
    runner = world.fake.register_runner("cpu-i-0abc12345678", CPU)
    world.fake.assign_job(running, runner)
    queued = world.fake.queue_job(
        "app", ["self-hosted", "GPU"], created_at=T0 - timedelta(minutes=9)
    )
    ghost = world.fake.queue_job("app", CPU, run_id=world.fake.job(running).run_id)
    world.fake.override_job(ghost, steps=[{"name": "Set up job", "status": "completed"}])
    observation = source.observe(T0)
    jobs = {job.id: job for job in observation.jobs}
    assert jobs[running].status is JobStatus.IN_PROGRESS
    assert jobs[running].started_at == T0
    assert jobs[running].has_steps
    assert jobs[running].runner_name == "cpu-i-0abc12345678"
    assert jobs[queued].status is JobStatus.QUEUED
    assert jobs[queued].started_at is None
    assert jobs[queued].created_at == T0 - timedelta(minutes=9)
    assert jobs[queued].labels == frozenset({"self-hosted", "gpu"})
    assert not jobs[queued].has_steps
    assert not jobs[queued].run_completed
    assert jobs[ghost].status is JobStatus.QUEUED
    assert jobs[ghost].has_steps
    (seen,) = observation.runners
    assert (seen.online, seen.busy, seen.name) == (True, True, "cpu-i-0abc12345678")


def test_a_queued_job_of_a_run_github_reports_completed_is_not_listed(
    world: World, source: GitHubSource
) -> None:
    """The fake once listed a run it reported `completed` under `?status=queued`, so the
    client saw its queued job as a ghost. GitHub filters on the status it reports: such a
    job is in no listing the controller reads, so it is neither demand nor counted."""
    kept = world.fake.queue_job("app", CPU)
    ghost = world.fake.queue_job("app", CPU)
    world.fake.set_run_status(world.fake.job(ghost).run_id, "completed")
    observation = source.observe(T0)
    assert [job.id for job in observation.jobs] == [kept]
    assert world.fake.count(path_regex=rf"/runs/{world.fake.job(ghost).run_id}/jobs") == 0


def test_malformed_items_are_skipped_counted_and_the_rest_goes_on(
    world: World, source: GitHubSource, caplog: pytest.LogCaptureFixture
) -> None:
    good = world.fake.queue_job("app", CPU)
    for _ in range(2):
        bad = world.fake.queue_job("app", CPU)
        world.fake.override_job(bad, created_at=None)
    wrong = world.fake.queue_job("app", CPU)
    world.fake.override_job(wrong, labels="self-hosted")
    fine = world.fake.register_runner("ok", CPU)
    broken = world.fake.register_runner("broken", CPU)
    world.fake.override_runner(broken, busy="yes")
    observation = source.observe(T0)
    assert [job.id for job in observation.jobs] == [good]
    assert [r.id for r in observation.runners] == [fine]
    assert (observation.skipped_items, observation.skipped_runners) == (4, 1)
    assert world.sample("ci_autoscaler_github_skipped_items_total", kind="job") == 3
    assert world.sample("ci_autoscaler_github_skipped_items_total", kind="runner") == 1
    assert sum("malformed GitHub job" in r.message for r in caplog.records) == 1


def test_malformed_jobs_page_skips_that_run_only(world: World, source: GitHubSource) -> None:
    world.fake.queue_job("app", CPU)
    kept = world.fake.queue_job("infra", CPU)
    world.fake.inject_malformed(r"/repos/demo-org/app/actions/runs/\d+/jobs")
    observation = source.observe(T0)
    assert [job.id for job in observation.jobs] == [kept]
    assert world.sample("ci_autoscaler_github_skipped_items_total", kind="jobs_page") == 1
    assert len(source.observe(T0).jobs) == 2  # a malformed body is never cached


def test_malformed_runner_list_fails_the_poll(world: World, source: GitHubSource) -> None:
    world.fake.inject_malformed(r"/actions/runners")
    with pytest.raises(TransientError, match="/orgs/demo-org/actions/runners"):
        source.observe(T0)


@pytest.mark.parametrize(
    ("status", "retry_after", "reset", "expected_sleep"),
    [
        pytest.param(429, 7, None, 7.0, id="429-retry-after"),
        pytest.param(403, 3, None, 3.0, id="403-secondary-retry-after"),
        pytest.param(429, None, 12, 12.0, id="429-remaining-0-reset"),
        pytest.param(403, None, 20, 20.0, id="403-remaining-0-reset"),
    ],
)
def test_a_rate_limit_that_ends_within_the_deadline_is_waited_out(
    world: World,
    source: GitHubSource,
    status: int,
    retry_after: float | None,
    reset: float | None,
    expected_sleep: float,
) -> None:
    world.fake.add_repo("app")
    world.fake.inject_fault(
        r"/orgs/demo-org/repos", status, retry_after=retry_after, ratelimit_reset=reset
    )
    observation = source.observe(T0)
    assert observation.jobs == ()
    assert world.sleeps == [expected_sleep]  # one pause, shared by every worker
    requests = world.sample(
        "ci_autoscaler_github_requests_total", endpoint="repos", status=str(status)
    )
    assert requests == 1
    kind = "primary" if reset is not None else "secondary"
    assert world.sample("ci_autoscaler_github_rate_limit_pauses_total", kind=kind) == 1


@pytest.mark.parametrize(
    ("status", "retry_after", "reset", "expected_wait"),
    [
        pytest.param(403, None, 900, 900.0, id="primary-past-the-deadline"),
        pytest.param(403, 5, 100, 100.0, id="primary-reset-wins-over-a-shorter-retry-after"),
        pytest.param(429, 60, None, 60.0, id="secondary-retry-after-past-the-deadline"),
    ],
)
def test_a_rate_limit_past_the_deadline_ends_the_poll_without_sleeping(
    world: World,
    request: pytest.FixtureRequest,
    status: int,
    retry_after: float | None,
    reset: float | None,
    expected_wait: float,
) -> None:
    """No sleep inside a tick is longer than the tick's deadline (24 s of a 30 s
    interval): the poll ends at once with RateLimitedError, and after a primary limit
    (x-ratelimit-remaining: 0) no request goes out before x-ratelimit-reset, however
    short a Retry-After."""
    world.fake.inject_fault(
        r"/orgs/demo-org/repos", status, retry_after=retry_after, ratelimit_reset=reset
    )
    # one request in flight at a time: none of this tick's is still on its way below
    source = world.source(max_concurrency=1)
    request.addfinalizer(source.close)
    with pytest.raises(RateLimitedError) as caught:
        source.observe(T0)
    assert caught.value.retry_after == pytest.approx(expected_wait)
    assert world.sleeps == []
    sent = len(world.fake.requests)
    world.now = T0 + timedelta(seconds=30)  # the next tick: still more than 24 s to wait
    with pytest.raises(RateLimitedError):
        source.observe(world.now)
    assert len(world.fake.requests) == sent  # not one request before the pause ends
    world.now = T0 + timedelta(seconds=expected_wait)
    assert source.observe(world.now).jobs == ()


def test_rate_limit_headers_are_exported(world: World) -> None:
    world.fake.add_repo("app")
    source = world.source(max_concurrency=1)  # the gauge shows the last answer's headers
    try:
        source.observe(T0)
    finally:
        source.close()
    # /rate_limit is free; runners, repos and the newest runs (they end: no listing by
    # status follows) spent 3
    remaining = world.sample("ci_autoscaler_github_rate_limit_remaining", resource="core")
    assert remaining == 5000 - 3
    assert world.sample("ci_autoscaler_github_rate_limit_limit", resource="core") == 5000
    reset = world.sample("ci_autoscaler_github_rate_limit_reset_timestamp_seconds", resource="core")
    assert reset == T0.timestamp() + 3600


def test_5xx_is_retried_with_backoff(world: World, source: GitHubSource) -> None:
    world.fake.queue_job("app", CPU)
    world.fake.inject_fault(r"/actions/runs\?per_page=", 502, times=2)
    observation = source.observe(T0)
    assert len(observation.jobs) == 1
    assert len(world.sleeps) == 2
    first, second = world.sleeps  # full jitter: uniform(0, 0.5), then uniform(0, 1.0)
    assert 0 <= first <= 0.5
    assert 0 <= second <= 1.0


def test_persistent_5xx_becomes_transient_error(world: World, source: GitHubSource) -> None:
    world.fake.inject_fault(r"/actions/runners", 503, times=10)
    with pytest.raises(TransientError) as caught:
        source.observe(T0)
    assert type(caught.value) is TransientError
    assert caught.value.code == "503"
    assert world.fake.count(503) == 3


@pytest.mark.parametrize(
    ("token", "repos", "error", "path"),
    [
        pytest.param("ghp_s3cr3t", None, AuthenticationError, "/orgs/demo-org", id="401"),
        pytest.param(
            "fake-token", ("missing",), NotFoundError, "/repos/demo-org/missing", id="404"
        ),
    ],
)
def test_permanent_errors_name_the_path_never_the_token(
    world: World, token: str, repos: tuple[str, ...] | None, error: type[Exception], path: str
) -> None:
    src = world.source(token=token, repos=repos)
    try:
        with pytest.raises(error) as caught:
            src.observe(T0)
    finally:
        src.close()
    message = str(caught.value)
    assert path in message
    assert token not in message
    assert token not in repr(src)
    assert world.sleeps == []


def test_repos_from_config_are_not_listed(world: World) -> None:
    world.fake.queue_job("app", CPU)
    world.fake.queue_job("other", CPU)
    src = world.source(repos=("app",))
    try:
        observation = src.observe(T0)
    finally:
        src.close()
    assert {job.repo for job in observation.jobs} == {"app"}
    assert world.fake.count(path_regex="/orgs/demo-org/repos") == 0


@pytest.mark.parametrize(
    ("state", "error"),
    [
        pytest.param("idle", None, id="204"),
        pytest.param("busy", RejectedError, id="422-busy"),
        pytest.param("gone", NotFoundError, id="404-unknown"),
    ],
)
def test_remove_runner(
    world: World, source: GitHubSource, state: str, error: type[Exception] | None
) -> None:
    runner_id = world.fake.register_runner("cpu-1", CPU)
    if state == "busy":
        world.fake.assign_job(world.fake.queue_job("app", CPU), runner_id)
    if state == "gone":
        world.fake.remove_runner(runner_id)
    if error is None:
        source.remove_runner(runner_id)
        assert world.fake.runners() == []
    else:
        with pytest.raises(error, match=f"/actions/runners/{runner_id}"):
            source.remove_runner(runner_id)
    status = {"idle": "204", "busy": "422", "gone": "404"}[state]
    assert (
        world.sample("ci_autoscaler_github_requests_total", endpoint="runner_delete", status=status)
        == 1
    )


def test_an_exhausted_rate_limit_raises_until_the_reset(world: World) -> None:
    world.fake.RATE_LIMIT = 1  # one request per hour
    src = world.source(max_concurrency=1)  # nothing still in flight when observe raises
    try:
        with pytest.raises(RateLimitedError) as caught:
            src.observe(T0)
        sent = len(world.fake.requests)
        with pytest.raises(RateLimitedError):
            src.observe(T0 + timedelta(seconds=30))
    finally:
        src.close()
    assert caught.value.retry_after == pytest.approx(3600, abs=1)
    # the runner list takes the last request, the repository list gets the 403
    assert world.fake.count(200, "^/(orgs/demo-org/actions/runners|rate_limit)") == 2
    assert world.fake.count(403) == 1
    assert len(world.fake.requests) == sent  # nothing is sent before the reset
    assert world.sleeps == []

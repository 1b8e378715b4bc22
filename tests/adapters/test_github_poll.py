"""The poll engine against the fake GitHub: every queued job, capped listings, churn,
the rate limit as a budget, and a restart that is not a cold start."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from autoscaler.config import GitHubConfig
from autoscaler.domain import JobStatus
from autoscaler.errors import RateLimitedError, StateUnusableError
from autoscaler.fakes.github import FakeGitHub
from autoscaler.observe.github.budget import BUSY_MAX_INTERVAL
from autoscaler.observe.github.cache import PollCacheStore
from autoscaler.observe.github.source import RUN_STATUSES, GitHubSource
from autoscaler.secrets import Secret
from autoscaler.state.sqlite import SqliteStore
from autoscaler.telemetry import Metrics

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
CPU = ["self-hosted", "linux.4xlarge"]


@dataclass
class World:
    fake: FakeGitHub
    metrics: Metrics = field(default_factory=Metrics)
    sleeps: list[float] = field(default_factory=list)
    now: datetime = T0

    def source(self, store: PollCacheStore | None = None, **config: object) -> GitHubSource:
        cfg = GitHubConfig(
            owner="demo-org",
            api_url=self.fake.url,
            token=Secret("fake-token"),
            **config,
        )
        return GitHubSource(
            cfg,
            self.metrics,
            sleep=self.sleeps.append,
            wall_clock=lambda: self.now.timestamp(),  # noqa: PLW0108
            cache_store=store,
        )

    def sample(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    def tick(self, source: GitHubSource, seconds: float = 30) -> list[int]:
        """Advance the clock and observe; the ids of the queued jobs seen."""
        self.now += timedelta(seconds=seconds)
        observation = source.observe(self.now)
        return [j.id for j in observation.jobs if j.status is JobStatus.QUEUED]


def history(fake: FakeGitHub, repo: str, runs: int = 40) -> None:
    """Completed runs of ``repo`` before T0: more than a page of its newest runs, so
    that listing does not end and a first poll lists the repository whole."""
    for i in range(runs):
        fake.complete_job(fake.queue_job(repo, CPU, created_at=T0 - timedelta(hours=2, minutes=i)))


@pytest.fixture
def world() -> Iterator[World]:
    holder: list[World] = []
    with FakeGitHub(clock=lambda: holder[0].now) as fake:
        holder.append(World(fake))
        yield holder[0]


def test_run_statuses_are_githubs_enum_minus_conclusions() -> None:
    assert RUN_STATUSES == ("queued", "in_progress", "waiting", "requested", "pending")


@pytest.mark.parametrize("status", ["waiting", "requested", "pending", "in_progress"])
def test_queued_jobs_of_runs_in_every_status_are_seen(world: World, status: str) -> None:
    """The client listed only queued and in_progress runs: a run waiting for an
    environment approval (or requested, or pending a concurrency group) can hold queued
    jobs, which were never seen, scaled for or alerted on. (Its history is longer than a
    page of newest runs: the listings by status are what finds it.)"""
    history(world.fake, "app")
    gate = world.fake.queue_job("app", CPU, status="waiting", name="deploy")
    run_id = world.fake.job(gate).run_id
    queued = world.fake.queue_job("app", CPU, run_id=run_id, name="test")
    world.fake.set_run_status(run_id, status)
    source = world.source()
    try:
        observation = source.observe(T0)
    finally:
        source.close()
    jobs = {j.id: j.status for j in observation.jobs}
    assert jobs == {gate: JobStatus.WAITING, queued: JobStatus.QUEUED}
    assert world.fake.count(200, rf"/actions/runs\?status={status}&") == 1


def test_a_capped_listing_is_narrowed_by_created_and_counted(world: World) -> None:
    """GitHub returns at most 1,000 runs for a status listing while total_count counts
    them all: the oldest queued jobs were never seen. (The fake's cap is lowered to 40
    here; the client relies on total_count, not on the number.)"""
    world.fake.RUN_LISTING_CAP = 40
    jobs = [
        world.fake.queue_job("app", CPU, created_at=T0 - timedelta(minutes=100 - i))
        for i in range(100)
    ]
    source = world.source()
    try:
        observation = source.observe(T0)
    finally:
        source.close()
    assert sorted(j.id for j in observation.jobs) == jobs
    assert world.sample("ci_autoscaler_github_truncated_listings_total") == 1
    assert world.fake.count(200, r"/actions/runs\?status=queued&per_page=100$") == 1
    assert world.fake.count(200, r"/actions/runs\?status=queued&created=") == 2  # 40+40+20


def test_running_jobs_make_a_steady_tick_cost_requests(world: World) -> None:
    """The fake served the same body for a running job forever, so a steady tick was all
    304s; on GitHub a running job's steps move on and its jobs page changes."""
    running = world.fake.queue_job("app", CPU)
    world.fake.assign_job(running, world.fake.register_runner("r1", CPU))
    world.fake.queue_job("infra", CPU)
    source = world.source()
    try:
        world.tick(source, 0)
        sent = len(world.fake.requests)
        world.tick(source, 30)
    finally:
        source.close()
    answered = world.fake.requests[sent:]
    changed = [r.path for r in answered if r.status == 200]
    assert changed == [
        f"/repos/demo-org/app/actions/runs/{world.fake.job(running).run_id}"
        "/jobs?filter=latest&per_page=100"
    ]
    # runners, repos, each repository's runs in one listing without a status (their
    # history fits a page: it ends, and stands for the five by status), and the jobs of
    # one run of two: neither can have changed unseen (its runner is still busy on it;
    # all queued in a run still queued), so they take turns within the staleness limit
    assert len(answered) == 5


def test_quiet_repos_are_stretched_first_and_busy_ones_stay_every_tick(world: World) -> None:
    """A 600/h token (share 0.8: 480/h, 4 a tick) cannot re-list 5 repositories whose
    running jobs change every tick and one with a queued job: once the costs are learnt,
    the quiet ones are re-listed every few ticks, the busy one every tick, and a new
    queued job in a quiet repository is still seen within the quiet interval."""
    world.fake.RATE_LIMIT = 600
    for repo in ("busy", *(f"quiet{i}" for i in range(5))):
        history(world.fake, repo)  # listed whole by status, not by one short listing
    world.fake.queue_job("busy", CPU)
    for i in range(5):
        job = world.fake.queue_job(f"quiet{i}", CPU)
        world.fake.assign_job(job, world.fake.register_runner(f"r{i}", CPU))
    source = world.source(repos=("busy", *(f"quiet{i}" for i in range(5))))
    try:
        for _ in range(8):  # learn what each re-list costs
            world.tick(source)
        busy_before = world.fake.count(path_regex=r"/busy/actions/runs\?status=queued")
        quiet_before = world.fake.count(path_regex=r"/quiet0/actions/runs\?status=queued")
        for _ in range(4):
            world.tick(source)
        busy_lists = world.fake.count(path_regex=r"/busy/actions/runs\?status=queued")
        quiet_lists = world.fake.count(path_regex=r"/quiet0/actions/runs\?status=queued")
        quiet = world.sample("ci_autoscaler_github_poll_interval_seconds", activity="quiet")
        busy = world.sample("ci_autoscaler_github_poll_interval_seconds", activity="busy")
        late = world.fake.queue_job("quiet3", CPU)
        seen = [late in world.tick(source) for _ in range(int(quiet // 30))]
    finally:
        source.close()
    assert (busy, busy_lists - busy_before) == (30, 4)
    assert quiet > 30
    assert quiet_lists - quiet_before < 4
    assert seen[-1]
    assert world.fake.count(403) == 0  # never hit the limit


def test_a_budget_too_small_stretches_busy_repos_and_says_so(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.fake.RATE_LIMIT = 100  # 80/h: not even the runner list fits every tick
    for i in range(3):
        world.fake.queue_job(f"repo{i}", CPU)
    world.fake.register_runner("r1", CPU)
    source = world.source()
    try:
        observation = source.observe(T0)
        observation = source.observe(T0 + timedelta(seconds=30))
    finally:
        source.close()
    assert observation.budget is not None
    assert observation.budget.too_small
    # the runner list alone (120/h) is over 80/h: busy units go to the 15-minute cap
    assert observation.budget.busy_interval == BUSY_MAX_INTERVAL == 900
    assert world.sample("ci_autoscaler_github_poll_interval_seconds", activity="busy") == 900
    # 120 ticks of: runners, repos, 3 x 5 run listings, and each run's jobs: once per
    # staleness limit of 10 ticks when listed (all queued in a run still queued), every
    # tick while the budget has deferred its first listing (which, the workers' order says)
    assert 120 * 17.3 - 1e-6 <= observation.budget.needed_per_hour <= 120 * 20 + 1e-6
    messages = [r.message for r in caplog.records if "budget too small" in r.message]
    assert len(messages) == 1  # said once, not every tick
    assert "Webhooks" in messages[0]


def test_secondary_limits_pause_every_worker_and_back_off_doubling(world: World) -> None:
    """A secondary limit without Retry-After: wait at least a minute, then exponentially
    longer while it keeps happening (GitHub's docs); no worker sends meanwhile."""
    world.fake.add_repo("app")
    world.fake.inject_secondary_limit(r"^/orgs/demo-org/actions/runners", times=2)
    source = world.source(max_concurrency=1)
    waits = []
    try:
        for seconds in (0, 30, 30, 60, 60):
            sent = len(world.fake.requests)
            try:
                world.tick(source, seconds)
            except RateLimitedError as exc:
                waits.append((round(exc.retry_after or 0), len(world.fake.requests) - sent))
            else:
                waits.append((0, len(world.fake.requests) - sent))
    finally:
        source.close()
    # T0: 60 s pause; T0+30: 30 s left, nothing sent; T0+60: hit again, 120 s;
    # T0+120: 60 s left, nothing sent; T0+180: through.
    assert [w for w, _ in waits] == [60, 30, 120, 60, 0]
    assert [n for _, n in waits[1::2]] == [0, 0]
    assert world.sample("ci_autoscaler_github_rate_limit_pauses_total", kind="secondary") == 2
    assert world.sleeps == []


def test_a_restart_is_not_a_cold_start(world: World, tmp_path: object) -> None:
    """The ETag cache and the compact results survive in the state store: the first tick
    of a new process is all 304s and sees the same jobs."""
    for repo in ("app", "infra"):
        world.fake.queue_job(repo, CPU)
    world.fake.register_runner("r1", CPU)
    path = f"{tmp_path}/state.db"
    store = SqliteStore(path)
    first = world.source(store)
    try:
        before = first.observe(T0)
    finally:
        first.close()
        store.close()
    sent = len(world.fake.requests)
    store = SqliteStore(path)
    second = world.source(store)
    try:
        after = second.observe(T0 + timedelta(seconds=30))
    finally:
        second.close()
        store.close()
    answered = [r for r in world.fake.requests[sent:] if r.path != "/rate_limit"]
    # a new process lists the runners, the repositories, each one's newest runs (they
    # end: that listing stands for a whole one) and the jobs of its run: from the cache
    assert [r.status for r in answered] == [304] * 6
    assert after.jobs == before.jobs
    assert after.runners == before.runners


def test_a_broken_cache_entry_is_dropped_not_fatal(world: World, tmp_path: object) -> None:
    world.fake.queue_job("app", CPU)
    path = f"{tmp_path}/state.db"
    store = SqliteStore(path)
    store.save_poll_cache({"http://127.0.0.1:1/x": "{not json"}, ())
    source = world.source(store)
    try:
        assert len(source.observe(T0).jobs) == 1
    finally:
        source.close()
    assert "http://127.0.0.1:1/x" not in store.load_poll_cache()
    store.close()


class ReadOnlyCache:
    """A poll-cache store on a state file the controller may only read."""

    def load_poll_cache(self) -> dict[str, str]:
        return {}

    def save_poll_cache(self, put: Mapping[str, str], drop: Collection[str]) -> None:
        raise StateUnusableError(
            "state file /var/lib/x.db is read-only: make it writable",
            path="/var/lib/x.db",
            code="read_only",
            operation="save_poll_cache",
        )


def test_a_state_file_that_cannot_take_the_cache_is_said_once_by_the_alert_stage(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression (the GitHub budget merged with the state store's errors): a read-only state file
    was said twice a tick, once as the alert stage's ERROR (the file and what to do) and
    once more, at WARNING, with the same words by the poll's cache flush. The poll keeps its
    picture and names only the kind of the problem."""
    world.fake.queue_job("app", CPU)
    source = world.source(ReadOnlyCache())
    try:
        with caplog.at_level("WARNING", logger="autoscaler.observe.github"):
            assert len(source.observe(T0).jobs) == 1
    finally:
        source.close()
    [line] = [r.getMessage() for r in caplog.records if "cache not saved" in r.getMessage()]
    assert line == (
        "GitHub cache not saved to the state store (state_unusable read_only);"
        " the next flush retries"
    )


def test_a_cold_poll_out_of_allowance_says_so_without_a_made_up_need(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """At a cold start nothing has been re-listed, so the plan's estimate of the need is
    the runner list alone: the warning once read 'needs ~240 requests/h, the budget is
    3996/h' for an org that needed 30,000, because the listings deferred for want of
    allowance, not the plan, made the budget too small. It now says what happened."""
    world.fake.RATE_LIMIT = 100
    for i in range(30):
        world.fake.queue_job(f"repo{i}", CPU)
    source = world.source()
    try:
        observation = source.observe(T0)
    finally:
        source.close()
    assert observation.budget is not None and observation.budget.too_small
    [message] = [r.message for r in caplog.records if "budget too small" in r.message]
    assert "allowance" in message and "ran out before" in message
    assert "needs ~" not in message


def _quiet_org(world: World, repos: int, running: int) -> None:
    """``repos`` repositories whose runs have all completed, and ``live`` with ``running``
    runs, a job of each running on a runner of its own (a live repository, listed whole
    every tick; the runs' jobs re-read on a signal, or in turn within the staleness
    limit)."""
    runners = [world.fake.register_runner(f"r{i}", CPU) for i in range(running)]
    for i in range(repos):
        done = world.fake.queue_job(f"quiet{i}", CPU, created_at=T0 - timedelta(hours=1))
        world.fake.assign_job(done, runners[0])
        world.fake.complete_job(done)
    for runner in runners:
        world.fake.assign_job(world.fake.queue_job("live", CPU), runner)


def _new_run_in_a_quiet_repository(world: World) -> int:
    return world.fake.queue_job("quiet3", CPU)


def _new_run_in_a_live_repository(world: World) -> int:
    return world.fake.queue_job("live", CPU)


def _a_dependent_queued_when_a_job_ends(world: World) -> int:
    """A running job ends and its run queues the next stage: no runs listing changes (the
    run stays in progress); the runner list shows its runner idle."""
    running = [j for j in world.fake.jobs() if j.status == "in_progress"][-1]
    world.fake.complete_job(running.id)
    return world.fake.queue_job("live", CPU, run_id=running.run_id, name="test")


@pytest.mark.parametrize("phase", [0, 1], ids=["queued-after-tick-0", "queued-after-tick-1"])
@pytest.mark.parametrize(
    "queue",
    [
        pytest.param(_new_run_in_a_quiet_repository, id="new-run-in-a-quiet-repository"),
        pytest.param(_new_run_in_a_live_repository, id="new-run-in-a-live-repository"),
        pytest.param(_a_dependent_queued_when_a_job_ends, id="dependent-queued-as-a-job-ends"),
    ],
)
def test_polling_alone_sees_every_queued_job_within_two_intervals(
    world: World, queue: Callable[[World], int], phase: int
) -> None:
    """The poll stopped re-reading everything every tick (a steady tick at 1,000
    repositories took longer than its 30 s interval): quiet repositories are read by their
    newest runs every other tick, a run's jobs when a signal says they changed. The rule
    that pays for it: a job queued anywhere is seen within two poll intervals, whichever
    tick of the cadence it lands after."""
    _quiet_org(world, 20, running=30)
    source = world.source()
    try:
        for _ in range(3 + phase):  # the first picture, then the cadence's steady state
            world.tick(source)
        sent = len(world.fake.requests)
        job = queue(world)
        seen = [job in world.tick(source) for _ in range(2)]
    finally:
        source.close()
    assert any(seen)
    whole = [r for r in world.fake.requests[sent:] if "/quiet" in r.path and "status=" in r.path]
    assert len(whole) < 2 * 20 * len(RUN_STATUSES) / 2  # not every quiet repository whole


def test_a_repository_whose_runs_fit_a_few_pages_is_listed_whole_by_one_listing(
    world: World,
) -> None:
    """Every live repository was listed once per status (five listings) every tick, even
    one with a handful of runs, where the listing without a status ends on its first page
    and already shows every run in every status. Such a listing now stands for the five;
    a repository that outgrows a few pages goes back to the listings by status."""
    gate = world.fake.queue_job("app", CPU, status="waiting", name="deploy")
    run_id = world.fake.job(gate).run_id
    queued = world.fake.queue_job("app", CPU, run_id=run_id, name="test")
    running = world.fake.queue_job("app", CPU, name="build")
    world.fake.assign_job(running, world.fake.register_runner("r1", CPU))
    source = world.source()
    try:
        seen = [world.tick(source) for _ in range(3)]
        by_status = world.fake.count(path_regex=r"/app/actions/runs\?status=")
        world.fake.complete_job(running)
        after_end = world.tick(source)
        live = world.sample("ci_autoscaler_github_repos", activity="live")
        history(world.fake, "app", runs=100)  # more than three pages of newest runs
        sent = len(world.fake.requests)
        grown = world.tick(source)
    finally:
        source.close()
    assert seen == [[queued]] * 3 and after_end == [queued] and grown == [queued]
    assert by_status == 0
    assert live == 1  # the waiting run is still live; the finished one is gone
    asked = [r.path for r in world.fake.requests[sent:]]
    assert sum("/app/actions/runs?status=" in p for p in asked) == len(RUN_STATUSES)


def test_a_poll_asks_for_runs_listings_before_jobs_listings(world: World) -> None:
    """A poll re-reads the repository list every tick; the runs listings waited for it,
    and so queued behind every jobs listing already asked for. A poll cut by its deadline
    (a cold 1,000-repository tick) then listed no repository at all, and the same ones
    went unlisted tick after tick. The runs listings now start from the repositories
    known, before the jobs; on a cold tick the newest runs of every repository go first."""
    for repo in ("a", "b", "c"):
        history(world.fake, repo)
        run_id = world.fake.job(world.fake.queue_job(repo, CPU)).run_id
        job = world.fake.queue_job(repo, CPU, run_id=run_id, name="test")
        world.fake.assign_job(job, world.fake.register_runner(f"r-{repo}", CPU))
    source = world.source(max_concurrency=1)  # one request at a time: in priority order
    try:
        world.tick(source, 0)
        cold = [r.path for r in world.fake.requests]
        world.tick(source)
        steady = [r.path for r in world.fake.requests[len(cold) :]]
    finally:
        source.close()

    def last_runs_before_first_jobs(paths: list[str]) -> bool:
        runs = [i for i, p in enumerate(paths) if p.split("?")[0].endswith("/actions/runs")]
        jobs = [i for i, p in enumerate(paths) if "/jobs?" in p]
        return bool(runs) and bool(jobs) and max(runs) < min(jobs)

    newest = [p for p in cold if p.endswith("/actions/runs?per_page=30") or "/jobs?" in p]
    assert all("/jobs?" not in p for p in newest[:3])  # every repository's newest runs first
    assert last_runs_before_first_jobs(steady)


def test_a_poll_cut_by_its_deadline_is_counted(world: World) -> None:
    """A poll that ran out of its share of the interval returned what it had and logged
    it, with nothing on /metrics to alert or graph on: now it is counted by cause."""
    for repo in ("a", "b", "c", "d"):
        world.fake.queue_job(repo, CPU)
    world.fake.latency = 0.2
    cfg = GitHubConfig(
        owner="demo-org", api_url=world.fake.url, token=Secret("fake-token"), max_concurrency=1
    )
    source = GitHubSource(
        cfg,
        world.metrics,
        sleep=world.sleeps.append,
        wall_clock=lambda: world.now.timestamp(),  # noqa: PLW0108
        poll_interval=1.0,  # a 0.8 s deadline: the skeleton fits, not every listing
    )
    try:
        source.observe(T0)
    finally:
        source.close()
    assert world.sample("ci_autoscaler_github_polls_cut_total", cause="deadline") == 1
    assert world.sample("ci_autoscaler_github_unlisted_repos") > 0

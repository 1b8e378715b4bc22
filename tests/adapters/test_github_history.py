"""``record``: completed jobs read from the fake GitHub over real HTTP become a trace."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from autoscaler.app.cli import main
from autoscaler.config import parse_config
from autoscaler.fakes.github import FakeGitHub
from autoscaler.fakes.github_listing import parse_created
from autoscaler.observe.github.history import JobHistory, RecordSummary, parse_since
from autoscaler.sim.trace import parse_trace, trace_line
from autoscaler.telemetry import Metrics

DAY0 = datetime(2026, 11, 23, tzinfo=UTC)
NOW = DAY0 + timedelta(days=7, hours=12)
CPU = ["self-hosted", "linux.4xlarge"]
GPU = ["self-hosted", "linux.g5.4xlarge.nvidia.gpu"]


@dataclass
class World:
    fake: FakeGitHub
    now: datetime = DAY0
    lines: list[str] = field(default_factory=list)

    def ran(self, repo: str, labels: list[str], created: datetime, wait: float, run: float) -> int:
        """A job created at ``created`` that waited ``wait`` s and ran ``run`` s."""
        self.now = created
        job = self.fake.queue_job(repo, labels)
        runner = self.fake.register_runner(f"r-{job}", labels)
        self.now = created + timedelta(seconds=wait)
        self.fake.assign_job(job, runner)
        self.now += timedelta(seconds=run)
        self.fake.complete_job(job)
        return job

    def history(self, budget: int = 1000, listing_cap: int = 1000) -> JobHistory:
        config = parse_config(
            {
                "github": {"owner": "demo-org", "token": "fake-token", "api_url": self.fake.url},
                "runner_types": {
                    "cpu": {"labels": CPU, "pools": ["ci-cpu"]},
                    "gpu": {"labels": GPU, "pools": ["ci-gpu"]},
                },
            },
            env={},
        )
        return JobHistory(config, Metrics(), max_requests=budget, listing_cap=listing_cap)

    def record(self, history: JobHistory, since: datetime = DAY0) -> RecordSummary:
        def sink(created: datetime, labels: list[str], duration: float, queued: float) -> None:
            self.lines.append(trace_line(created, labels, duration, queue_seconds=queued))

        try:
            return history.record(since, NOW, sink)
        finally:
            history.close()


@pytest.fixture
def world() -> Iterator[World]:
    holder: list[World] = []
    with FakeGitHub(clock=lambda: holder[0].now) as fake:
        holder.append(World(fake))
        yield holder[0]


def test_completed_jobs_become_trace_lines_with_duration_and_queue_time(world: World) -> None:
    world.ran("app", CPU, DAY0 + timedelta(days=1, hours=3), wait=40, run=600)
    world.ran("app", GPU, DAY0 + timedelta(days=2), wait=5, run=3600)
    world.ran("infra", CPU, DAY0 + timedelta(days=3), wait=0, run=90)
    summary = world.record(world.history())
    trace = parse_trace(world.lines)
    assert [(j.created_at, j.duration) for j in trace.jobs] == [
        (3 * 3600, 600),
        (86400, 3600),
        (2 * 86400, 90),
    ]
    assert trace.start == DAY0 + timedelta(days=1)  # midnight of the first job's day
    assert [j.labels for j in trace.jobs][1] == frozenset(GPU)
    assert '"queue_seconds": 40.0' in world.lines[0]
    assert summary.complete and summary.jobs_written == 3 and summary.repos == 2


def test_jobs_before_the_window_hosted_jobs_and_jobs_that_never_ran_are_left_out(
    world: World,
) -> None:
    world.ran("app", CPU, DAY0 - timedelta(days=2), wait=1, run=60)  # before --since
    world.ran("app", ["ubuntu-latest"], DAY0 + timedelta(hours=5), wait=1, run=60)  # hosted
    world.now = DAY0 + timedelta(hours=6)
    skipped = world.fake.queue_job("app", CPU)
    world.fake.complete_job(skipped)  # cancelled while queued: no runner ever took it
    world.ran("app", CPU, DAY0 + timedelta(hours=7), wait=1, run=60)
    summary = world.record(world.history())
    assert len(world.lines) == 1 and '"2026-11-23T07:00:00Z"' in world.lines[0]
    assert summary.jobs_other_runners == 1 and summary.jobs_not_run == 1


def test_the_run_listing_asks_github_for_completed_runs_created_since_the_day(
    world: World,
) -> None:
    world.ran("app", CPU, DAY0 + timedelta(hours=1), wait=1, run=60)
    world.record(world.history())
    runs = [r.path for r in world.fake.requests if "/actions/runs?" in r.path]
    assert runs == [
        "/repos/demo-org/app/actions/runs?status=completed&created=%3E%3D2026-11-23&per_page=100"
    ]


def test_a_spent_budget_stops_early_and_says_how_far_the_trace_is_complete(
    world: World,
) -> None:
    """Runs are read oldest first, so the trace is whole up to where the budget ran out."""
    for day in range(5):
        world.ran("app", CPU, DAY0 + timedelta(days=day), wait=1, run=60)
    # 1 (repos) + 1 (runs) + 3 jobs pages
    summary = world.record(world.history(budget=5))
    assert not summary.complete
    assert summary.requests == 5 and summary.runs == 5 and summary.runs_read == 3
    assert summary.covered_until == DAY0 + timedelta(days=2)
    assert len(world.lines) == 3
    assert "the budget ran out" in summary.describe(DAY0, 5)
    assert world.fake.count(path_regex="/jobs") == 3


def test_a_listing_over_githubs_cap_is_read_again_one_day_at_a_time(world: World) -> None:
    """GitHub returns at most 1,000 runs for a filtered listing (cap lowered to 2 here)."""
    for day in range(3):
        world.ran("app", CPU, DAY0 + timedelta(days=day, hours=1), wait=1, run=60)
    summary = world.record(world.history(listing_cap=2), since=DAY0)
    days = [r.path for r in world.fake.requests if "created=2026" in r.path]
    assert len(days) == 8  # 23rd..30th: one listing per day of the window
    assert summary.runs == 3 and len(world.lines) == 3


@pytest.mark.parametrize(
    ("spec", "inside"),
    [
        (">=2026-11-23", True),
        (">2026-11-23", False),
        ("<=2026-11-23", True),
        ("<2026-11-23", False),
        ("2026-11-23", True),
        ("2026-11-24", False),
        ("2026-11-20..2026-11-23", True),
        (">=2026-11-23T12:00:00Z", False),
        (None, True),
    ],
    ids=["ge", "gt-same-day", "le", "lt", "day", "other-day", "range", "time", "absent"],
)
def test_fake_created_filter_follows_githubs_date_search_syntax(
    spec: str | None, inside: bool
) -> None:
    created = DAY0 + timedelta(hours=9)
    if spec is None:
        assert inside
        return
    start, end = parse_created(spec)
    assert (start <= created < end) is inside


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7d", NOW - timedelta(days=7)),
        ("36h", NOW - timedelta(hours=36)),
        ("2026-11-23", DAY0),
        ("2026-11-23T06:00:00Z", DAY0 + timedelta(hours=6)),
    ],
    ids=["days", "hours", "date", "time"],
)
def test_since_reads_a_duration_back_or_a_utc_time(text: str, expected: datetime) -> None:
    assert parse_since(text, NOW) == expected


def test_record_command_writes_a_trace_simulate_can_replay(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recent = datetime.now(UTC) - timedelta(days=1)
    world.ran("app", CPU, recent, wait=3, run=120)
    config = tmp_path / "c.yaml"
    config.write_text(
        "github: {owner: demo-org, token: fake-token, api_url: '" + world.fake.url + "'}\n"
        "runner_types:\n  cpu: {labels: [self-hosted, linux.4xlarge], pools: [ci-cpu]}\n"
    )
    out = tmp_path / "t.jsonl"
    assert main(["record", "--config", str(config), "--since", "3d", "--out", str(out)]) == 0
    assert "1 jobs from 1 of 1 completed runs" in capsys.readouterr().err
    lines = out.read_text().splitlines()
    assert len(lines) == 1
    assert (
        main(
            [
                "simulate",
                "--config",
                str(config),
                "--trace",
                str(out),
                "--policy",
                "ci-autoscaler",
                "--output",
                "json",
            ]
        )
        == 0
    )
    assert '"name": "ci-autoscaler"' in capsys.readouterr().out


def test_githubs_rate_limit_ends_the_trace_early_like_the_budget(world: World) -> None:
    """GitHub keeps answering rate-limited (after the helper's own waits): the trace keeps
    what was read and says why it stopped."""
    for day in range(3):
        world.ran("app", CPU, DAY0 + timedelta(days=day), wait=1, run=60)
    world.fake.inject_fault(r"/jobs", 403, times=5, ratelimit_reset=3600)
    history = world.history()
    summary = world.record(history)
    assert not summary.complete and summary.runs_read == 0 and world.lines == []
    assert "GitHub's rate limit ran out before any run was read" in summary.describe(DAY0, 1000)


def test_a_user_owner_is_listed_through_its_public_repositories() -> None:
    """/orgs/{owner}/repos is a 404 for a user account; /users/{owner}/repos lists them."""
    holder: list[World] = []
    with FakeGitHub(clock=lambda: holder[0].now, owner_kind="user") as fake:
        holder.append(World(fake))
        world = holder[0]
        world.now = DAY0 + timedelta(hours=2)
        fake.add_repo("site", private=False)  # /users/{u}/repos lists public ones only
        job = fake.queue_job("site", CPU)
        runner = fake.register_runner("r", CPU, repo="site")
        fake.assign_job(job, runner)
        world.now += timedelta(minutes=5)
        fake.complete_job(job)
        summary = world.record(world.history())
    assert summary.repos == 1 and len(world.lines) == 1
    assert fake.count(404, r"^/orgs/demo-org/repos") == 1

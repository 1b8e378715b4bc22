"""GitHubSource for a user owner: repository runners after the org endpoint's 404; Link on 304."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from autoscaler.config import GitHubConfig
from autoscaler.errors import NotFoundError, RejectedError
from autoscaler.fakes.github import FakeGitHub
from autoscaler.observe.github.source import GitHubSource
from autoscaler.secrets import Secret
from autoscaler.telemetry import Metrics

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
CPU = ["self-hosted", "linux.4xlarge"]
ORG_RUNNERS = r"^/orgs/[^/]+/actions/runners"
REPO_RUNNERS = r"^/repos/[^/]+/[^/]+/actions/runners"


@dataclass
class World:
    fake: FakeGitHub
    metrics: Metrics

    def source(self, **config: object) -> GitHubSource:
        cfg = GitHubConfig(
            owner=self.fake.owner,
            api_url=self.fake.url,
            token=Secret("fake-token"),
            **config,
        )
        return GitHubSource(cfg, self.metrics, sleep=lambda _: None)

    def deletes(self, status: str) -> float:
        labels = {"endpoint": "runner_delete", "status": status}
        value = self.metrics.registry.get_sample_value(
            "ci_autoscaler_github_requests_total", labels
        )
        return value or 0.0


def _world(owner: str, kind: str) -> Iterator[World]:
    with FakeGitHub(owner, clock=lambda: T0, owner_kind=kind) as fake:
        if kind == "user":  # /users/{u}/repos lists public repositories only
            for name in ("app", "infra"):
                fake.add_repo(name, private=False)
        yield World(fake, Metrics())


@pytest.fixture
def user() -> Iterator[World]:
    yield from _world("demo-user", "user")


@pytest.fixture
def org() -> Iterator[World]:
    yield from _world("demo-org", "org")


@pytest.mark.parametrize(
    "repos",
    [pytest.param(None, id="listed-repos"), pytest.param(("app", "infra"), id="config-repos")],
)
def test_user_owner_lists_runners_per_repo_once_each(
    user: World, repos: tuple[str, ...] | None
) -> None:
    app = user.fake.register_runner("app-1", CPU, repo="app")
    shared = user.fake.register_runner("shared-1", CPU, repo=["app", "infra"])
    infra = user.fake.register_runner("infra-1", CPU, repo="infra")
    queued = user.fake.queue_job("infra", CPU)
    src = user.source(repos=repos)
    try:
        first = src.observe(T0)
        sent = len(user.fake.requests)
        second = src.observe(T0 + timedelta(seconds=30))
    finally:
        src.close()
    assert sorted(r.id for r in first.runners) == sorted([app, shared, infra])
    assert [job.id for job in first.jobs] == [queued]
    assert user.fake.count(path_regex=ORG_RUNNERS) == 1  # one probe per source, not per tick
    assert user.fake.count(404, ORG_RUNNERS) == 1
    assert user.fake.count(200, REPO_RUNNERS) == 2
    assert all(r.status == 304 for r in user.fake.requests[sent:])
    # 2 runner lists, 1 runs listing x 2 repos (without a status: it ends, and stands for
    # the five by status), 1 jobs listing (+ the repo list if listed)
    assert len(user.fake.requests) - sent == user.fake.count(304) == (5 if repos else 6)
    assert second.runners == first.runners
    assert second.jobs == first.jobs


def test_repo_runner_listing_paginates_past_100(user: World) -> None:
    for i in range(150):
        user.fake.register_runner(f"cpu-{i}", CPU, repo="app")
    src = user.source()
    try:
        observation = src.observe(T0)
    finally:
        src.close()
    assert len({r.id for r in observation.runners}) == len(observation.runners) == 150
    assert user.fake.count(path_regex=r"/repos/demo-user/app/actions/runners\?.*page=2") == 1


@pytest.mark.parametrize(
    ("state", "error", "status"),
    [
        pytest.param("idle", None, "204", id="204"),
        pytest.param("busy", RejectedError, "422", id="422-busy"),
        pytest.param("gone", NotFoundError, "404", id="404-gone"),
    ],
)
def test_remove_runner_deletes_at_the_repo_that_listed_it(
    user: World, state: str, error: type[Exception] | None, status: str
) -> None:
    user.fake.add_repo("app")
    runner_id = user.fake.register_runner("cpu-1", CPU, repo="infra")
    if state == "busy":
        user.fake.assign_job(user.fake.queue_job("infra", CPU), runner_id)
    src = user.source()
    try:
        src.observe(T0)
        if state == "gone":
            user.fake.remove_runner(runner_id)
        if error is None:
            src.remove_runner(runner_id)
            assert user.fake.runners() == []
        else:
            with pytest.raises(error, match=f"/repos/demo-user/infra/actions/runners/{runner_id}"):
                src.remove_runner(runner_id)
    finally:
        src.close()
    assert user.fake.requests[-1].method == "DELETE"
    assert user.fake.count(path_regex=rf"^/repos/demo-user/infra/actions/runners/{runner_id}$") == 1
    assert user.deletes(status) == 1


def test_remove_runner_no_watched_repo_listed_is_not_found_without_a_call(user: World) -> None:
    user.fake.add_repo("app")
    src = user.source()
    try:
        src.observe(T0)
        later = user.fake.register_runner("late", CPU, repo="app")
        with pytest.raises(NotFoundError, match=f"runner {later}"):
            src.remove_runner(later)
    finally:
        src.close()
    assert user.fake.count(path_regex="/actions/runners/") == 0


def test_org_owner_uses_only_the_org_endpoint(org: World) -> None:
    runner_id = org.fake.register_runner("cpu-1", CPU)
    org.fake.register_runner("repo-only", CPU, repo="app")  # not one of the org's runners
    src = org.source()
    try:
        for tick in range(2):
            observation = src.observe(T0 + timedelta(seconds=30 * tick))
            assert [r.id for r in observation.runners] == [runner_id]
        src.remove_runner(runner_id)
    finally:
        src.close()
    assert org.fake.count(path_regex=ORG_RUNNERS) == 3  # two ticks and the DELETE
    assert org.fake.count(path_regex=REPO_RUNNERS) == 0
    assert org.fake.runners()[0].name == "repo-only"


def test_a_page_added_after_an_exactly_full_304_page_is_seen(org: World) -> None:
    for i in range(100):
        org.fake.add_repo(f"repo{i:03}")
    src = org.source()
    try:
        assert src.observe(T0).jobs == ()
        added = org.fake.queue_job("repo100", CPU)  # the 101st repository: a page 2
        observation = src.observe(T0 + timedelta(seconds=30))
    finally:
        src.close()
    first_page = r"^/orgs/demo-org/repos\?per_page=100$"
    assert org.fake.count(304, first_page) == 1  # page 1's body did not change
    assert [job.id for job in observation.jobs] == [added]


def test_a_users_private_repositories_are_not_listed_and_the_log_says_so(
    user: World, caplog: pytest.LogCaptureFixture
) -> None:
    """/users/{u}/repos lists public repositories only: a token cannot see a user's
    private ones that way (github.repos, or a GitHub App, can)."""
    seen = user.fake.queue_job("app", CPU)
    user.fake.queue_job("private", CPU)
    src = user.source()
    try:
        observation = src.observe(T0)
        src.observe(T0 + timedelta(seconds=30))
    finally:
        src.close()
    assert [job.id for job in observation.jobs] == [seen]
    warnings = [r.message for r in caplog.records if "public repositories only" in r.message]
    assert len(warnings) == 1

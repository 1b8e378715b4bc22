"""The adapters' part in runner safety, over real HTTP and moto: GitHub asked for one runner
by name (``?name=``, as documented) before an orphan goes, and each peer's clock read from
the ``Date`` header of its answers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from moto import mock_aws
from prometheus_client import CollectorRegistry

from autoscaler.config import AwsConfig, GitHubConfig
from autoscaler.errors import TransientError
from autoscaler.fakes.github import FakeGitHub
from autoscaler.observe.github.source import GitHubSource
from autoscaler.scale.aws.asg import AwsAsgPool
from autoscaler.secrets import Secret
from autoscaler.sim.fleet import PoolSpec, aws_clients, create_pools, moto_session
from autoscaler.telemetry import Metrics

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
CPU = ["self-hosted", "linux.4xlarge"]
NAME = "ci-cpu-i-0abc123def4567890"


def source_for(fake: FakeGitHub, metrics: Metrics, wall_clock: float | None = None) -> GitHubSource:
    cfg = GitHubConfig(owner=fake.owner, api_url=fake.url, token=Secret("fake-token"))
    clock = (lambda: wall_clock) if wall_clock is not None else time.time
    return GitHubSource(cfg, metrics, sleep=lambda _: None, wall_clock=clock)


@pytest.fixture
def org() -> Iterator[FakeGitHub]:
    with FakeGitHub(clock=lambda: T0) as fake:
        yield fake


# --- the fake GitHub, as GitHub documents it


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("/orgs/demo-org/actions/runners", id="org-runners"),
        pytest.param("/repos/demo-org/app/actions/runners", id="repo-runners"),
    ],
)
def test_fake_runner_listings_filter_on_name(path: str) -> None:
    """ "List self-hosted runners for an organization" (and "... for a repository") take a
    ``name`` query parameter, "The name of a self-hosted runner"."""
    with FakeGitHub(clock=lambda: T0) as fake:
        repo = "app" if path.startswith("/repos/") else None
        fake.register_runner(NAME, CPU, repo=repo)
        fake.register_runner(NAME + "-other", CPU, repo=repo)
        headers = {"Authorization": f"Bearer {fake.token}"}
        with httpx.Client(base_url=fake.url, headers=headers) as client:
            named = client.get(path, params={"name": NAME}).json()
            nobody = client.get(path, params={"name": "ci-cpu-i-00000000"}).json()
            everyone = client.get(path).json()
    assert [r["name"] for r in named["runners"]] == [NAME]
    assert named["total_count"] == 1
    assert (nobody["total_count"], nobody["runners"]) == (0, [])
    assert everyone["total_count"] == 2


def test_fake_date_header_is_the_fakes_clock() -> None:
    with FakeGitHub(clock=lambda: T0 + timedelta(seconds=90)) as fake:
        response = httpx.get(fake.url + "/orgs/demo-org/actions/runners")
    assert response.headers["date"] == "Mon, 30 Nov 2026 03:01:30 GMT"


# --- GitHubSource.find_runner


def test_find_runner_asks_github_by_name_and_matches_exactly(org: FakeGitHub) -> None:
    rid = org.register_runner(NAME, CPU)
    org.register_runner(NAME + "0", CPU)  # a longer name that starts the same: not it
    metrics = Metrics()
    src = source_for(org, metrics)
    try:
        src.observe(T0)
        found = src.find_runner(NAME)
        missing = src.find_runner("ci-cpu-i-00000000000000000")
    finally:
        src.close()
    assert found is not None and (found.id, found.name) == (rid, NAME)
    assert missing is None
    assert org.count(200, rf"/orgs/demo-org/actions/runners\?name={NAME}&per_page=100") == 1


def test_find_runner_on_a_malformed_answer_cannot_tell(org: FakeGitHub) -> None:
    """A runner item GitHub sent but we could not read may be the one we ask about: the
    lookup fails (the orphan is kept) instead of answering "not there"."""
    rid = org.register_runner(NAME, CPU)
    src = source_for(org, Metrics())
    try:
        src.observe(T0)
        org.override_runner(rid, busy="yes")
        with pytest.raises(TransientError, match="malformed runner"):
            src.find_runner(NAME)
    finally:
        src.close()


def test_find_runner_for_a_user_owner_looks_in_each_repository_and_can_remove_it() -> None:
    with FakeGitHub("demo-user", clock=lambda: T0, owner_kind="user") as fake:
        fake.add_repo("app", private=False)  # a user's repositories are listed if public
        src = source_for(fake, Metrics())
        try:
            src.observe(T0)  # the org endpoint 404s: runners are listed per repository
            fake.add_repo("infra", private=False)  # a new repository
            rid = fake.register_runner(NAME, CPU, repo="infra")
            src.observe(T0 + timedelta(seconds=30))
            fake.remove_runner(rid)
            late = fake.register_runner(NAME, CPU, repo="infra")
            found = src.find_runner(NAME)
            assert found is not None and found.id == late
            src.remove_runner(late)  # at the repository that listed it
        finally:
            src.close()
        assert fake.runners() == []


# --- clocks


def test_observation_carries_githubs_clock_skew(org: FakeGitHub) -> None:
    """GitHub's Date says 03:00:00; our clock says 03:01:15: GitHub is 75 s behind."""
    metrics = Metrics()
    src = source_for(org, metrics, wall_clock=(T0 + timedelta(seconds=75)).timestamp())
    try:
        observation = src.observe(T0)
    finally:
        src.close()
    assert observation.clock_skew_seconds == -75.0
    skew = metrics.registry.get_sample_value("ci_autoscaler_clock_skew_seconds", {"peer": "github"})
    assert skew == -75.0


def test_no_date_header_means_no_measurement() -> None:
    def no_date(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"total_count": 0, "runners": []})

    cfg = GitHubConfig(owner="demo-org", api_url="http://127.0.0.1:9", repos=(), token=Secret("t"))
    src = GitHubSource(cfg, Metrics(), transport=httpx.MockTransport(no_date))
    try:
        assert src.observe(T0).clock_skew_seconds is None
    finally:
        src.close()


def test_aws_clock_skew_read_from_the_date_of_every_answer() -> None:
    """AWS's answers carry ``Date`` (botocore: ResponseMetadata.HTTPHeaders.date); with our
    clock 90 s behind AWS's, the pool reports AWS 90 s ahead (within the header's second)."""
    with mock_aws():
        asg, ec2 = aws_clients(None)
        create_pools(asg, ec2, [PoolSpec("ci-cpu", "cpu", ("cpu",))])
        metrics = Metrics(CollectorRegistry())
        session = moto_session()
        pool = AwsAsgPool(
            AwsConfig(), metrics, session=session, wall_clock=lambda: time.time() - 90.0
        )
        assert pool.clock_skew() is None
        pool.describe(["ci-cpu"])
        skew = pool.clock_skew()
    assert skew is not None and 88.0 <= skew <= 91.0
    gauge = metrics.registry.get_sample_value("ci_autoscaler_clock_skew_seconds", {"peer": "aws"})
    assert gauge == skew

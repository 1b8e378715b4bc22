"""GitHub App auth: JWT RS256 exchanged for an installation token, cached, refreshed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from autoscaler.config import GitHubAppConfig, GitHubConfig
from autoscaler.errors import AuthenticationError
from autoscaler.fakes.github import FakeGitHub
from autoscaler.observe.github.auth import AppAuth
from autoscaler.observe.github.source import GitHubSource
from autoscaler.secrets import Secret
from autoscaler.telemetry import Metrics

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


def _pem(key: rsa.RSAPrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


@pytest.fixture(scope="module")
def app_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass
class AppWorld:
    fake: FakeGitHub
    source: GitHubSource
    metrics: Metrics
    now: list[datetime]

    def token_requests(self) -> int:
        return self.fake.count(201, r"/app/installations/77/access_tokens")


def _world(fake: FakeGitHub, pem: str, now: list[datetime], max_concurrency: int = 16) -> AppWorld:
    app = GitHubAppConfig(app_id=42, installation_id=77, private_key=Secret(pem))
    config = GitHubConfig(
        owner="demo-org", api_url=fake.url, app=app, max_concurrency=max_concurrency
    )
    metrics = Metrics()
    source = GitHubSource(
        config,
        metrics,
        sleep=lambda _: None,
        wall_clock=lambda: now[0].timestamp(),  # noqa: PLW0108
    )
    return AppWorld(fake, source, metrics, now)


@pytest.fixture
def world(app_key: rsa.RSAPrivateKey) -> Iterator[AppWorld]:
    now = [T0]
    public = app_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with FakeGitHub(
        token="not-used", clock=lambda: now[0], app_id=42, app_public_key_pem=public.decode()
    ) as fake:
        w = _world(fake, _pem(app_key), now)
        yield w
        w.source.close()


def test_installation_token_is_obtained_and_cached(world: AppWorld) -> None:
    world.fake.queue_job("app", ["self-hosted"])
    assert len(world.source.observe(T0).jobs) == 1
    world.now[0] = T0 + timedelta(minutes=30)
    world.source.observe(world.now[0])
    assert world.token_requests() == 1
    value = world.metrics.registry.get_sample_value(
        "ci_autoscaler_github_requests_total", {"endpoint": "app_token", "status": "201"}
    )
    assert value == 1


@pytest.mark.parametrize(
    ("minutes_later", "fetches"),
    [
        pytest.param(54, 1, id="6-min-left-kept"),
        pytest.param(55, 2, id="5-min-left-refreshed"),
        pytest.param(61, 2, id="expired-refreshed"),
    ],
)
def test_token_is_refreshed_five_minutes_before_expiry(
    world: AppWorld, minutes_later: int, fetches: int
) -> None:
    world.source.observe(T0)
    world.now[0] = T0 + timedelta(minutes=minutes_later)
    world.source.observe(world.now[0])
    assert world.token_requests() == fetches
    assert world.fake.count(401) == 0


def test_a_revoked_token_is_replaced_after_one_401(
    world: AppWorld, app_key: rsa.RSAPrivateKey
) -> None:
    one = _world(world.fake, _pem(app_key), world.now, max_concurrency=1)  # one in flight
    try:
        one.source.observe(T0)
        world.fake.installation_tokens.clear()  # GitHub revoked it
        one.source.observe(T0 + timedelta(seconds=30))
    finally:
        one.source.close()
    assert one.token_requests() == 2
    assert world.fake.count(401) == 1  # the one request in flight; then a fresh token


def test_a_key_github_does_not_know_is_an_authentication_error(
    world: AppWorld,
) -> None:
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other = _world(world.fake, _pem(stranger), world.now)
    try:
        with pytest.raises(AuthenticationError, match="/app/installations/77/access_tokens"):
            other.source.observe(T0)
    finally:
        other.source.close()


def test_an_unusable_key_says_so_without_showing_it() -> None:
    app = GitHubAppConfig(app_id=42, installation_id=77, private_key=Secret("not a pem"))
    auth = AppAuth(app, lambda _id, _auth: {}, T0.timestamp)
    with pytest.raises(AuthenticationError, match="private key cannot sign") as caught:
        auth.authorization()
    assert "not a pem" not in str(caught.value)
    assert "not a pem" not in repr(auth)


def test_an_app_lists_the_installations_repositories_private_ones_included(
    world: AppWorld,
) -> None:
    """/users/{u}/repos lists public repositories only and /orgs/{o}/repos needs an org;
    a GitHub App's installation token lists what the installation can see."""
    private = world.fake.queue_job("private-app", ["self-hosted"])
    public = world.fake.queue_job("public-app", ["self-hosted"])
    world.fake.add_repo("public-app", private=False)
    observation = world.source.observe(T0)
    assert sorted(j.id for j in observation.jobs) == [private, public]
    assert world.fake.count(200, r"^/installation/repositories\?per_page=100$") == 1
    assert world.fake.count(path_regex=r"^/(orgs|users)/[^/]+/repos") == 0

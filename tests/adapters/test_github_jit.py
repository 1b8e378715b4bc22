"""Runner registration end to end (generate-jitconfig, registration-token): GitHubSource
against the fake GitHub server, which answers as GitHub documents (201 with an offline
runner and a single-use config, or an hour's token; 409 on a taken name; 422 on labels or
a group GitHub refuses; 403 without the permission)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from autoscaler.config import GitHubConfig
from autoscaler.errors import (
    AuthenticationError,
    AutoscalerError,
    ConflictError,
    RateLimitedError,
    RejectedError,
    TransientError,
)
from autoscaler.fakes.github import FakeGitHub
from autoscaler.observe.github.source import GitHubSource
from autoscaler.secrets import Secret
from autoscaler.telemetry import Metrics

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
LABELS = ["self-hosted", "linux.g5.4xlarge.nvidia.gpu"]
NAME = "gpu-spot-i-0123456789abcdef0"


def source(fake: FakeGitHub, metrics: Metrics | None = None) -> GitHubSource:
    cfg = GitHubConfig(owner=fake.owner, api_url=fake.url, token=Secret("fake-token"))
    return GitHubSource(cfg, metrics or Metrics(), sleep=lambda _: None)


@pytest.fixture
def org() -> Iterator[FakeGitHub]:
    with FakeGitHub("demo-org", clock=lambda: T0) as fake:
        yield fake


def test_a_jit_runner_is_offline_until_its_config_connects_once(org: FakeGitHub) -> None:
    s = source(org)
    s.observe(T0)
    jit = s.generate_jit_config(NAME, LABELS, 1, "_work")
    assert jit.encoded_jit_config.reveal() not in repr(jit)  # a secret, never shown
    listed = s.find_runner(NAME)
    assert listed is not None and listed.id == jit.runner_id and not listed.online
    [request] = [r for r in org.requests if r.method == "POST"]
    assert request.path == "/orgs/demo-org/actions/runners/generate-jitconfig"
    assert request.status == 201
    assert org.connect_jit(jit.encoded_jit_config.reveal()) == jit.runner_id
    online = s.find_runner(NAME)
    assert online is not None and online.online
    with pytest.raises(ValueError, match="used already"):
        org.connect_jit(jit.encoded_jit_config.reveal())  # a JIT config is single-use


def test_the_request_carries_name_labels_group_and_work_folder(org: FakeGitHub) -> None:
    org.jit.groups.add(7)
    s = source(org)
    s.observe(T0)
    s.generate_jit_config(NAME, LABELS, 7, "_work")
    [runner] = org.runners()
    assert (runner.name, list(runner.labels), runner.ephemeral) == (NAME, LABELS, True)
    payload = json.loads(base64.b64decode(next(iter(org.jit.unused))))
    assert payload["runner_id"] == runner.id


def test_an_ephemeral_runner_is_removed_when_its_job_ends(org: FakeGitHub) -> None:
    s = source(org)
    s.observe(T0)
    jit = s.generate_jit_config(NAME, LABELS, 1, "_work")
    org.connect_jit(jit.encoded_jit_config.reveal())
    job = org.queue_job("app", LABELS)
    org.assign_job(job, jit.runner_id)
    org.complete_job(job)
    assert s.find_runner(NAME) is None


@pytest.mark.parametrize(
    ("setup", "error", "code"),
    [
        pytest.param(lambda f: f.register_runner(NAME, LABELS), ConflictError, "409", id="409"),
        pytest.param(lambda f: None, RejectedError, "422", id="422-unknown-group"),
        pytest.param(
            lambda f: setattr(f.jit, "forbidden", True),
            AuthenticationError,
            "403",
            id="403-permission",
        ),
    ],
)
def test_refusals_are_typed_errors(
    org: FakeGitHub, setup: object, error: type[AutoscalerError], code: str
) -> None:
    """Translated from the status at the edge, never from the message."""
    s = source(org)
    s.observe(T0)
    setup(org)  # type: ignore[operator]
    group = 99 if code == "422" else 1
    with pytest.raises(error) as info:
        s.generate_jit_config(NAME, LABELS, group, "_work")
    assert info.value.code == code


def test_bad_labels_are_a_422(org: FakeGitHub) -> None:
    s = source(org)
    s.observe(T0)
    with pytest.raises(RejectedError):
        s.generate_jit_config(NAME, ["has,comma"], 1, "_work")


def test_a_rate_limit_is_a_rate_limited_error(org: FakeGitHub) -> None:
    s = source(org)
    s.observe(T0)
    org.inject_fault("generate-jitconfig", 429, times=5, retry_after=3600)
    with pytest.raises(RateLimitedError):
        s.generate_jit_config(NAME, LABELS, 1, "_work")
    assert org.runners() == []


def test_a_5xx_is_transient(org: FakeGitHub) -> None:
    s = source(org)
    s.observe(T0)
    org.inject_fault("generate-jitconfig", 502, times=10)
    with pytest.raises(TransientError):
        s.generate_jit_config(NAME, LABELS, 1, "_work")


def test_a_user_owner_registers_at_its_repository() -> None:
    with FakeGitHub("demo-user", clock=lambda: T0, owner_kind="user") as fake:
        fake.add_repo("app", private=False)
        s = source(fake)
        s.observe(T0)
        jit = s.generate_jit_config(NAME, LABELS, 1, "_work")
        [runner] = fake.runners()
        assert runner.repos == ("app",)
        posts = [r.path for r in fake.requests if r.method == "POST"]
        assert posts == ["/repos/demo-user/app/actions/runners/generate-jitconfig"]
        s.remove_runner(jit.runner_id)  # found at the repository it was registered at
        assert fake.runners() == []


# --- registration tokens (persistent runners)


def test_a_registration_token_registers_one_machine_s_runner_until_it_expires() -> None:
    clock = {"now": T0}
    with FakeGitHub("demo-org", clock=lambda: clock["now"]) as fake:
        s = source(fake)
        s.observe(T0)
        token = s.create_registration_token()
        assert token.token.reveal() not in repr(token)  # a secret, never shown
        assert token.expires_at == T0 + timedelta(hours=1)
        [request] = [r for r in fake.requests if r.method == "POST"]
        assert request.path == "/orgs/demo-org/actions/runners/registration-token"
        assert fake.runners() == []  # a token creates nothing at GitHub
        rid = fake.register_with_token(token.token.reveal(), NAME, LABELS)
        found = s.find_runner(NAME)
        assert found is not None and found.id == rid and found.online
        clock["now"] = T0 + timedelta(hours=1)
        with pytest.raises(ValueError, match="expired"):
            fake.register_with_token(token.token.reveal(), NAME + "-2", LABELS)


def test_a_registration_token_refused_is_a_typed_error(org: FakeGitHub) -> None:
    s = source(org)
    s.observe(T0)
    org.jit.forbidden = True
    with pytest.raises(AuthenticationError) as info:
        s.create_registration_token()
    assert info.value.code == "403"


def test_a_registration_token_answer_without_a_token_is_transient(org: FakeGitHub) -> None:
    s = source(org)
    s.observe(T0)
    org.inject_body("registration-token", b'{"expires_at": "2026-11-30T04:00:00Z"}', status=201)
    with pytest.raises(TransientError):
        s.create_registration_token()


def test_a_user_owner_gets_its_token_at_its_repository() -> None:
    with FakeGitHub("demo-user", clock=lambda: T0, owner_kind="user") as fake:
        fake.add_repo("app", private=False)
        s = source(fake)
        s.observe(T0)
        token = s.create_registration_token()
        fake.register_with_token(token.token.reveal(), NAME, LABELS)
        [runner] = fake.runners()
        assert runner.repos == ("app",)
        posts = [r.path for r in fake.requests if r.method == "POST"]
        assert posts == ["/repos/demo-user/app/actions/runners/registration-token"]

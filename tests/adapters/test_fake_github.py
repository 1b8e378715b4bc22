"""The fake GitHub answers like GitHub's documented REST API (over real HTTP on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from autoscaler.fakes.github import FakeGitHub

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(clock=lambda: T0) as fake:
        yield fake


@pytest.fixture
def client(fake: FakeGitHub) -> Iterator[httpx.Client]:
    headers = {"Authorization": "Bearer fake-token"}
    with httpx.Client(base_url=fake.url, headers=headers) as client:
        yield client


def test_runner_list_is_link_paginated_with_per_page_capped_at_100(
    fake: FakeGitHub, client: httpx.Client
) -> None:
    for i in range(250):
        fake.register_runner(f"r{i}", ["self-hosted", "linux.4xlarge"])
    first = client.get("/orgs/demo-org/actions/runners", params={"per_page": 500})
    body = first.json()
    assert body["total_count"] == 250
    assert len(body["runners"]) == 100
    assert 'rel="next"' in first.headers["link"]
    assert "page=3" in first.headers["link"].split(",")[-1]
    last = client.get("/orgs/demo-org/actions/runners", params={"per_page": 100, "page": 3})
    assert len(last.json()["runners"]) == 50
    assert 'rel="next"' not in last.headers["link"]
    assert 'rel="prev"' in last.headers["link"]
    runner = body["runners"][0]
    assert set(runner) >= {"id", "name", "os", "status", "busy", "labels"}
    assert runner["labels"][0] == {"id": 1, "name": "self-hosted", "type": "read-only"}
    assert runner["labels"][1]["type"] == "custom"


def test_default_page_size_is_30(fake: FakeGitHub, client: httpx.Client) -> None:
    for i in range(31):
        fake.add_repo(f"repo{i}")
    repos = client.get("/orgs/demo-org/repos").json()
    assert isinstance(repos, list)
    assert len(repos) == 30
    assert repos[0]["full_name"] == "demo-org/repo0"


def test_etag_304_does_not_spend_rate_limit(fake: FakeGitHub, client: httpx.Client) -> None:
    fake.queue_job("app", ["self-hosted"])
    first = client.get("/repos/demo-org/app/actions/runs", params={"status": "queued"})
    assert first.headers["x-ratelimit-resource"] == "core"
    second = client.get(
        "/repos/demo-org/app/actions/runs",
        params={"status": "queued"},
        headers={"If-None-Match": first.headers["etag"]},
    )
    assert second.status_code == 304
    assert second.content == b""
    assert second.headers["x-ratelimit-remaining"] == first.headers["x-ratelimit-remaining"]
    fake.queue_job("app", ["self-hosted"])
    third = client.get(
        "/repos/demo-org/app/actions/runs",
        params={"status": "queued"},
        headers={"If-None-Match": first.headers["etag"]},
    )
    assert third.status_code == 200
    assert third.json()["total_count"] == 2
    assert int(third.headers["x-ratelimit-used"]) == 2


def test_runs_filter_by_status_and_jobs_follow_assignment(
    fake: FakeGitHub, client: httpx.Client
) -> None:
    job = fake.queue_job("app", ["self-hosted", "gpu"], name="test")
    runner = fake.register_runner("gpu-1", ["self-hosted", "gpu"])
    run_id = fake.jobs()[0].run_id
    assert client.get("/repos/demo-org/app/actions/runs?status=queued").json()["total_count"] == 1
    fake.assign_job(job, runner)
    queued = client.get("/repos/demo-org/app/actions/runs?status=queued").json()
    running = client.get("/repos/demo-org/app/actions/runs?status=in_progress").json()
    assert queued["total_count"] == 0
    assert running["workflow_runs"][0]["id"] == run_id
    jobs = client.get(f"/repos/demo-org/app/actions/runs/{run_id}/jobs?filter=latest").json()
    listed = jobs["jobs"][0]
    assert listed["status"] == "in_progress"
    assert listed["runner_name"] == "gpu-1"
    assert listed["labels"] == ["self-hosted", "gpu"]
    assert listed["steps"]
    assert fake.runners()[0].busy
    fake.complete_job(job)
    assert not fake.runners()[0].busy
    assert fake.queued_jobs() == []


@pytest.mark.parametrize(
    ("path", "status"),
    [
        pytest.param("/orgs/other-org/actions/runners", 404, id="unknown-org"),
        pytest.param("/repos/demo-org/nope/actions/runs", 404, id="unknown-repo"),
        pytest.param("/repos/demo-org/app/actions/runs/999/jobs", 404, id="unknown-run"),
    ],
)
def test_unknown_resources_are_404_with_githubs_body(
    fake: FakeGitHub, client: httpx.Client, path: str, status: int
) -> None:
    fake.add_repo("app")
    response = client.get(path)
    assert response.status_code == status
    assert response.json()["message"] == "Not Found"
    assert "documentation_url" in response.json()


def test_bad_token_is_401_bad_credentials(fake: FakeGitHub) -> None:
    response = httpx.get(
        f"{fake.url}/orgs/demo-org/repos", headers={"Authorization": "Bearer nope"}
    )
    assert response.status_code == 401
    assert response.json()["message"] == "Bad credentials"
    assert fake.requests[-1].status == 401


def test_delete_runner_204_422_404(fake: FakeGitHub, client: httpx.Client) -> None:
    idle = fake.register_runner("idle", ["self-hosted"])
    busy = fake.register_runner("busy", ["self-hosted"])
    fake.assign_job(fake.queue_job("app", ["self-hosted"]), busy)
    assert client.delete(f"/orgs/demo-org/actions/runners/{idle}").status_code == 204
    rejected = client.delete(f"/orgs/demo-org/actions/runners/{busy}")
    assert rejected.status_code == 422
    assert "still running a job" in rejected.json()["message"]
    assert client.delete(f"/orgs/demo-org/actions/runners/{idle}").status_code == 404
    assert [r.name for r in fake.runners()] == ["busy"]
    with pytest.raises(ValueError, match="still running"):
        fake.remove_runner(busy)


def test_faults_are_injected_then_consumed(fake: FakeGitHub, client: httpx.Client) -> None:
    fake.inject_fault(r"/actions/runners", 429, retry_after=7)
    fake.inject_fault(r"/repos$", 403, ratelimit_reset=30)
    fake.inject_malformed(r"/repos$")
    limited = client.get("/orgs/demo-org/actions/runners")
    assert (limited.status_code, limited.headers["retry-after"]) == (429, "7")
    forbidden = client.get("/orgs/demo-org/repos")
    assert forbidden.status_code == 403
    assert forbidden.headers["x-ratelimit-remaining"] == "0"
    assert forbidden.headers["x-ratelimit-reset"] == str(int(T0.timestamp()) + 30)
    assert "rate limit" in forbidden.json()["message"]
    malformed = client.get("/orgs/demo-org/repos")
    assert malformed.status_code == 200
    with pytest.raises(ValueError):
        malformed.json()
    assert client.get("/orgs/demo-org/repos").json() == []
    assert fake.count(429) == 1


def test_app_installation_token_needs_a_jwt_signed_by_the_app_key() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    now = int(T0.timestamp())
    claims = {"iat": now - 60, "exp": now + 540, "iss": "42"}
    with FakeGitHub(clock=lambda: T0, app_id=42, app_public_key_pem=public.decode()) as fake:
        url = f"{fake.url}/app/installations/7/access_tokens"

        def post(token: str) -> httpx.Response:
            return httpx.post(url, headers={"Authorization": f"Bearer {token}"})

        good = post(jwt.encode(claims, key, algorithm="RS256"))
        assert good.status_code == 201
        token = good.json()["token"]
        assert good.json()["expires_at"] == (T0 + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert post(jwt.encode(claims, other, algorithm="RS256")).status_code == 401
        assert post(jwt.encode({**claims, "iss": "43"}, key, algorithm="RS256")).status_code == 401
        expired = {**claims, "exp": now - 1}
        assert post(jwt.encode(expired, key, algorithm="RS256")).status_code == 401
        listed = httpx.get(
            f"{fake.url}/orgs/demo-org/repos", headers={"Authorization": f"Bearer {token}"}
        )
        assert listed.status_code == 200


@pytest.fixture
def user_fake() -> Iterator[FakeGitHub]:
    with FakeGitHub("demo-user", clock=lambda: T0, owner_kind="user") as fake:
        yield fake


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        pytest.param("GET", "/orgs/demo-user/repos", 404, id="org-repos"),
        pytest.param("GET", "/orgs/demo-user/actions/runners", 404, id="org-runners"),
        pytest.param("DELETE", "/orgs/demo-user/actions/runners/{id}", 404, id="org-delete"),
        pytest.param("GET", "/users/demo-user/repos", 200, id="user-repos"),
        pytest.param("GET", "/repos/demo-user/app/actions/runners", 200, id="repo-runners"),
        pytest.param("GET", "/repos/demo-user/nope/actions/runners", 404, id="unknown-repo"),
        pytest.param("DELETE", "/repos/demo-user/other/actions/runners/{id}", 404, id="other"),
        pytest.param("DELETE", "/repos/demo-user/app/actions/runners/{id}", 204, id="delete"),
    ],
)
def test_user_owner_has_no_org_endpoints_and_repo_runners(
    user_fake: FakeGitHub, method: str, path: str, status: int
) -> None:
    runner = user_fake.register_runner("r1", ["self-hosted"], repo="app")
    user_fake.add_repo("other")
    url = user_fake.url + path.format(id=runner)
    response = httpx.request(method, url, headers={"Authorization": "Bearer fake-token"})
    assert response.status_code == status
    if status == 404:
        assert response.json()["message"] == "Not Found"
    assert [r.id for r in user_fake.runners()] == ([] if status == 204 else [runner])


def test_repo_runners_are_listed_by_their_repos_only(
    fake: FakeGitHub, client: httpx.Client
) -> None:
    org = fake.register_runner("org-1", ["self-hosted"])
    shared = fake.register_runner("shared", ["self-hosted", "gpu"], repo=["app", "infra"])
    mine = fake.register_runner("app-only", ["self-hosted"], repo="app")
    app = client.get("/repos/demo-org/app/actions/runners").json()
    infra = client.get("/repos/demo-org/infra/actions/runners").json()
    listed = client.get("/orgs/demo-org/actions/runners").json()
    assert (app["total_count"], [r["id"] for r in app["runners"]]) == (2, [shared, mine])
    assert [r["id"] for r in infra["runners"]] == [shared]
    assert [r["id"] for r in listed["runners"]] == [org]
    assert app["runners"][0]["labels"][1] == {"id": 2, "name": "gpu", "type": "custom"}
    assert client.delete(f"/orgs/demo-org/actions/runners/{mine}").status_code == 404
    fake.assign_job(fake.queue_job("app", ["self-hosted"]), shared)
    busy = client.delete(f"/repos/demo-org/infra/actions/runners/{shared}")
    assert (busy.status_code, "still running" in busy.json()["message"]) == (422, True)


def test_user_repos_say_user_and_org_runners_need_a_repo(user_fake: FakeGitHub) -> None:
    user_fake.add_repo("app", private=False)
    user_fake.add_repo("secret")  # /users/{u}/repos lists public repositories only
    response = httpx.get(
        f"{user_fake.url}/users/demo-user/repos", headers={"Authorization": "Bearer fake-token"}
    )
    assert [r["name"] for r in response.json()] == ["app"]
    owner = response.json()[0]["owner"]
    assert (owner["login"], owner["id"], owner["type"]) == ("demo-user", 1, "User")
    with pytest.raises(ValueError, match="repo="):
        user_fake.register_runner("r1", ["self-hosted"])

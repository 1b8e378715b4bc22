"""The fake GitHub filters, caps and pages runs the way GitHub documents it.

Each test pins a documented behaviour the fake once got wrong (the OpenAPI description of
"List workflow runs for a repository" in @octokit/openapi, and the REST rate-limit docs).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from autoscaler.fakes.github import FakeGitHub
from autoscaler.fakes.github_server import SECONDARY_MESSAGE

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
RUNS = "/repos/demo-org/app/actions/runs"


@pytest.fixture
def now() -> list[datetime]:
    return [T0]


@pytest.fixture
def fake(now: list[datetime]) -> Iterator[FakeGitHub]:
    with FakeGitHub(clock=lambda: now[0]) as fake:
        yield fake


@pytest.fixture
def client(fake: FakeGitHub) -> Iterator[httpx.Client]:
    headers = {"Authorization": "Bearer fake-token"}
    with httpx.Client(base_url=fake.url, headers=headers) as client:
        yield client


def _ids(client: httpx.Client, **params: Any) -> list[int]:
    body = client.get(RUNS, params={"per_page": 100, **params}).json()
    return [run["id"] for run in body["workflow_runs"]]


def test_status_filter_matches_the_reported_status_or_the_conclusion(
    fake: FakeGitHub, client: httpx.Client
) -> None:
    """The fake used to filter on the status it derived from the jobs and report another:
    a run reported `completed` still showed up under `?status=queued`. GitHub filters on
    what it reports, conclusions included."""
    queued = fake.job(fake.queue_job("app", ["self-hosted"])).run_id
    ghost = fake.job(fake.queue_job("app", ["self-hosted"])).run_id
    fake.set_run_status(ghost, "completed", conclusion="failure")
    assert _ids(client, status="queued") == [queued]
    assert _ids(client, status="completed") == [ghost]
    assert _ids(client, status="failure") == [ghost]
    assert _ids(client, status="success") == []
    listed = client.get(RUNS, params={"status": "failure"}).json()["workflow_runs"][0]
    assert (listed["status"], listed["conclusion"]) == ("completed", "failure")


@pytest.mark.parametrize("status", ["waiting", "requested", "pending"])
def test_waiting_requested_and_pending_runs_are_listed_with_their_queued_jobs(
    fake: FakeGitHub, client: httpx.Client, status: str
) -> None:
    job = fake.queue_job("app", ["self-hosted"])
    run_id = fake.job(job).run_id
    fake.set_run_status(run_id, status)
    assert _ids(client, status=status) == [run_id]
    assert _ids(client, status="queued") == []
    jobs = client.get(f"{RUNS}/{run_id}/jobs").json()["jobs"]
    assert [(j["id"], j["status"]) for j in jobs] == [(job, "queued")]


def test_a_job_waiting_for_an_approval_makes_its_run_waiting(
    fake: FakeGitHub, client: httpx.Client
) -> None:
    gated = fake.queue_job("app", ["self-hosted"], status="waiting", name="deploy")
    run_id = fake.job(gated).run_id
    queued = fake.queue_job("app", ["self-hosted"], run_id=run_id, name="test")
    assert _ids(client, status="waiting") == [run_id]
    jobs = client.get(f"{RUNS}/{run_id}/jobs").json()["jobs"]
    assert [(j["id"], j["status"]) for j in jobs] == [(gated, "waiting"), (queued, "queued")]
    fake.set_job_status(gated, "queued")
    assert _ids(client, status="queued") == [run_id]


def test_a_status_listing_is_capped_at_1000_runs_and_total_count_says_so(
    fake: FakeGitHub, client: httpx.Client
) -> None:
    for i in range(1005):
        fake.queue_job("app", ["self-hosted"], created_at=T0 + timedelta(seconds=i))
    page_10 = client.get(RUNS, params={"status": "queued", "per_page": 100, "page": 10})
    body = page_10.json()
    assert body["total_count"] == 1005
    assert len(body["workflow_runs"]) == 100
    assert 'rel="next"' not in page_10.headers["link"]
    page_11 = client.get(RUNS, params={"status": "queued", "per_page": 100, "page": 11}).json()
    assert (page_11["total_count"], page_11["workflow_runs"]) == (1005, [])
    unfiltered = client.get(RUNS, params={"per_page": 100, "page": 11}).json()
    assert len(unfiltered["workflow_runs"]) == 5  # no filter, no cap
    newest = client.get(RUNS, params={"status": "queued", "per_page": 1}).json()
    assert newest["workflow_runs"][0]["created_at"] == "2026-11-30T03:16:44Z"


@pytest.mark.parametrize(
    ("created", "expected"),
    [
        pytest.param("<=2026-11-30T03:00:01Z", [1, 0], id="lte-datetime"),
        pytest.param("<2026-11-30T03:00:01Z", [0], id="lt-datetime"),
        pytest.param(">=2026-11-30T03:00:02Z", [3, 2], id="gte-datetime"),
        pytest.param(">2026-11-30T03:00:02Z", [3], id="gt-datetime"),
        pytest.param("2026-11-30T03:00:01Z..2026-11-30T03:00:02Z", [2, 1], id="range"),
        pytest.param("*..2026-11-30T03:00:00Z", [0], id="open-start"),
        pytest.param("2026-11-30T03:00:03Z..*", [3], id="open-end"),
        pytest.param("2026-11-30", [3, 2, 1, 0], id="a-day"),
        pytest.param("<2026-11-30", [], id="before-the-day"),
    ],
)
def test_created_narrows_the_listing(
    fake: FakeGitHub, client: httpx.Client, created: str, expected: list[int]
) -> None:
    runs = [
        fake.job(fake.queue_job("app", ["x"], created_at=T0 + timedelta(seconds=i))).run_id
        for i in range(4)
    ]
    assert _ids(client, status="queued", created=created) == [runs[i] for i in expected]


def test_an_unreadable_created_is_422(client: httpx.Client, fake: FakeGitHub) -> None:
    fake.add_repo("app")
    assert client.get(RUNS, params={"created": "yesterday"}).status_code == 422


def test_running_jobs_steps_change_as_they_progress(
    fake: FakeGitHub, client: httpx.Client, now: list[datetime]
) -> None:
    """A steady tick is not all 304s on GitHub: a running job's steps move on."""
    job = fake.queue_job("app", ["self-hosted"])
    fake.assign_job(job, fake.register_runner("r1", ["self-hosted"]))
    url = f"{RUNS}/{fake.job(job).run_id}/jobs"
    first = client.get(url)
    steps = first.json()["jobs"][0]["steps"]
    assert [s["status"] for s in steps] == ["in_progress"] + ["queued"] * 5
    now[0] = T0 + timedelta(seconds=45)
    second = client.get(url, headers={"If-None-Match": first.headers["etag"]})
    assert second.status_code == 200
    steps = second.json()["jobs"][0]["steps"]
    assert [s["status"] for s in steps] == ["completed"] * 2 + ["in_progress"] + ["queued"] * 3
    assert steps[0]["completed_at"] == "2026-11-30T03:00:20Z"
    third = client.get(url, headers={"If-None-Match": second.headers["etag"]})
    assert third.status_code == 304  # same instant, same steps
    fake.complete_job(job)
    done = client.get(url).json()["jobs"][0]["steps"]
    assert [s["conclusion"] for s in done] == ["success"] * 6


@pytest.mark.parametrize(
    ("status", "retry_after"),
    [
        pytest.param(403, None, id="403-no-retry-after"),
        pytest.param(403, 30, id="403-retry-after"),
        pytest.param(429, None, id="429-no-retry-after"),
    ],
)
def test_secondary_limits_come_with_or_without_retry_after(
    fake: FakeGitHub, client: httpx.Client, status: int, retry_after: int | None
) -> None:
    fake.add_repo("app")
    fake.inject_secondary_limit(r"/actions/runs", status=status, retry_after=retry_after)
    limited = client.get(RUNS)
    assert limited.status_code == status
    assert limited.json()["message"] == SECONDARY_MESSAGE
    assert limited.headers["x-ratelimit-remaining"] == "5000"
    assert limited.headers.get("retry-after") == (None if retry_after is None else "30")
    assert client.get(RUNS).status_code == 200


def test_rate_limit_endpoint_is_free_and_answers_when_spent(
    fake: FakeGitHub, client: httpx.Client
) -> None:
    fake.RATE_LIMIT = 2
    fake.add_repo("app")
    assert [client.get(RUNS).status_code for _ in range(3)] == [200, 200, 403]
    for _ in range(2):
        answer = client.get("/rate_limit")
        assert answer.status_code == 200
        core = answer.json()["resources"]["core"]
        assert (core["limit"], core["used"], core["remaining"]) == (2, 2, 0)
        assert core["reset"] == int(T0.timestamp()) + 3600


def test_installation_repositories_need_an_installation_token(
    fake: FakeGitHub, client: httpx.Client
) -> None:
    fake.add_repo("private-app")
    fake.add_repo("public-app", private=False)
    assert client.get("/installation/repositories").status_code == 403  # a PAT
    fake.installation_tokens["ghs_test"] = T0 + timedelta(hours=1)
    body = client.get(
        "/installation/repositories", headers={"Authorization": "Bearer ghs_test"}
    ).json()
    assert body["total_count"] == 2
    assert [r["name"] for r in body["repositories"]] == ["private-app", "public-app"]
    public = client.get("/users/demo-org/repos").json()
    assert [r["name"] for r in public] == ["public-app"]


def test_a_raw_body_is_served_as_is(fake: FakeGitHub, client: httpx.Client) -> None:
    fake.add_repo("app")
    fake.inject_body(RUNS, b"<html>502 Bad Gateway</html>", status=502, content_type="text/html")
    answer = client.get(RUNS)
    assert (answer.status_code, answer.headers["content-type"]) == (502, "text/html")
    assert answer.content == b"<html>502 Bad Gateway</html>"

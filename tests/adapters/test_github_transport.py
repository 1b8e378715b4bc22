"""GitHubSource over httpx.MockTransport: timeouts, the /users fallback, GHES paths, Link origin."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from autoscaler.config import GitHubConfig
from autoscaler.errors import TransientError
from autoscaler.observe.github.reconcile_plan import Reason, RunFacts
from autoscaler.observe.github.source import GitHubSource
from autoscaler.secrets import Secret
from autoscaler.telemetry import Metrics

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
API = "https://ghe.example.internal/api/v3"
EMPTY: dict[str, Any] = {"total_count": 0}


def _source(
    handler: Callable[[httpx.Request], httpx.Response], sleeps: list[float], **config: Any
) -> tuple[GitHubSource, Metrics]:
    metrics = Metrics()
    cfg = GitHubConfig(owner="acme", api_url=API, token=Secret("tok-123"), **config)
    source = GitHubSource(cfg, metrics, transport=httpx.MockTransport(handler), sleep=sleeps.append)
    return source, metrics


def _empty_lists(request: httpx.Request) -> httpx.Response:
    if request.url.path.endswith("/actions/runners"):
        return httpx.Response(200, json={**EMPTY, "runners": []})
    return httpx.Response(200, json={**EMPTY, "workflow_runs": []})


def test_timeouts_are_retried_then_transient() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/actions/runners"):
            raise httpx.ReadTimeout("slow", request=request)
        return _empty_lists(request)

    sleeps: list[float] = []
    source, metrics = _source(handler, sleeps, repos=("app",))
    with pytest.raises(TransientError, match="ReadTimeout after 3 attempts") as caught:
        source.observe(T0)
    source.close()
    assert "tok-123" not in str(caught.value)
    errors = metrics.registry.get_sample_value(
        "ci_autoscaler_github_requests_total", {"endpoint": "runners", "status": "error"}
    )
    assert errors == 3
    first, second = sleeps  # full-jitter backoff between the three attempts
    assert 0 <= first <= 0.5
    assert 0 <= second <= 1.0


def test_user_owner_falls_back_to_users_repos_and_remembers_it() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        assert request.headers["Authorization"] == "Bearer tok-123"
        if request.url.path == "/api/v3/orgs/acme/repos":
            return httpx.Response(404, json={"message": "Not Found"})
        if request.url.path == "/api/v3/users/acme/repos":
            return httpx.Response(200, json=[{"name": "app"}, {"name": "old", "archived": True}])
        return _empty_lists(request)

    source, _ = _source(handler, [])
    source.observe(T0)
    source.observe(T0 + timedelta(seconds=30))
    source.close()
    assert seen.count("/api/v3/orgs/acme/repos") == 1
    assert seen.count("/api/v3/users/acme/repos") == 2
    assert "/api/v3/repos/acme/app/actions/runs" in seen
    assert not any("/old/" in path for path in seen)


def test_a_link_to_another_origin_is_not_followed() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host != "ghe.example.internal":
            raise AssertionError("followed a Link off the API origin")
        if request.url.path.endswith("/actions/runners"):
            body = {"total_count": 2, "runners": []}
            link = '<https://evil.example/next?page=2>; rel="next"'
            return httpx.Response(200, json=body, headers={"link": link})
        return _empty_lists(request)

    source, _ = _source(handler, [], repos=())
    observation = source.observe(T0)
    source.close()
    assert observation.runners == ()


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        pytest.param([{"name": 5}, {"name": "app"}], "repo", id="repo-name-not-a-string"),
        pytest.param([None, {"name": "app"}], "repo", id="repo-not-an-object"),
    ],
)
def test_bad_repo_items_are_skipped(body: list[Any], kind: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/repos"):
            return httpx.Response(200, json=body)
        return _empty_lists(request)

    source, metrics = _source(handler, [])
    observation = source.observe(T0)
    source.close()
    assert observation.skipped_items == 1
    skipped = metrics.registry.get_sample_value(
        "ci_autoscaler_github_skipped_items_total", {"kind": kind}
    )
    assert skipped == 1


def test_the_first_rate_limit_request_goes_beside_the_skeleton_and_the_plan_waits_for_it() -> None:
    """A cold tick sent ``GET /rate_limit`` first and waited for it before the runner and
    repository lists: one more round trip on the critical path of every cold tick (and of
    every tick on a GHES without rate limits). It now goes beside them; only the runs
    listings, which need the budget's plan, wait for its answer."""
    lock = threading.Lock()
    arrived: list[str] = []
    skeleton = threading.Event()
    answered = threading.Event()
    runs_before_plan: list[str] = []
    waited: list[bool] = []

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        with lock:
            arrived.append(path)
            if {"/api/v3/orgs/acme/actions/runners", "/api/v3/orgs/acme/repos"} <= set(arrived):
                skeleton.set()
        if path.endswith("/rate_limit"):
            waited.append(skeleton.wait(timeout=5))  # in series, the skeleton never came
            answered.set()
            limits = {"x-ratelimit-limit": "5000", "x-ratelimit-remaining": "5000"}
            return httpx.Response(200, json={"resources": {}}, headers=limits)
        if path.endswith("/repos"):
            return httpx.Response(200, json=[{"name": "app"}])
        if "/actions/runs" in path and not answered.is_set():
            runs_before_plan.append(path)
        return _empty_lists(request)

    sleeps: list[float] = []
    source, metrics = _source(handler, sleeps)
    source.observe(T0)
    source.close()
    assert waited == [True]  # the runner and repository lists arrived while it was open
    assert arrived.index("/api/v3/rate_limit") < 3  # among the first three, not before them
    assert runs_before_plan == []
    runs = sum("/actions/runs" in p for p in arrived)
    # its newest runs, once the plan is in: the listing ends (no run at all), so it
    # stands for the five listings by status
    assert runs == 1
    limit = metrics.registry.get_sample_value(
        "ci_autoscaler_github_rate_limit_limit", {"resource": "core"}
    )
    assert limit == 5000


def test_a_lean_reconcile_without_rate_limits_lists_only_the_runs_it_names() -> None:
    """On a GHES without rate limits every poll takes the cold path, and the runner list
    can come in before the budget's plan. Merged beside the lean reconcile, that path
    made the lean choice before the plan and then let the plan's cadence list every due
    run anyway: a full poll at every reconcile. The choice now waits for the plan, is
    made once, and a settled run's jobs are not listed."""
    runs = [
        {"id": run_id, "status": "in_progress", "created_at": "2026-11-30T02:59:00Z"}
        for run_id in (7, 8)
    ]

    def job(run_id: int) -> dict[str, Any]:
        return {
            "id": run_id * 10,
            "run_id": run_id,
            "status": "in_progress",
            "labels": ["self-hosted", "linux.4xlarge"],
            "created_at": "2026-11-30T02:59:00Z",
            "started_at": "2026-11-30T02:59:30Z",
            "runner_name": f"r-{run_id}",
            "name": "build",
            "steps": [{"name": "step", "status": "in_progress"}],
        }

    lock = threading.Lock()
    jobs_listed: list[int] = []
    runners_in = threading.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/rate_limit"):
            runners_in.wait(timeout=5)  # the runner list first: before the plan
            return httpx.Response(404, json={"message": "Rate limiting is not enabled."})
        if path.endswith("/repos"):
            return httpx.Response(200, json=[{"name": "app"}])
        if path.endswith("/actions/runners"):
            runners_in.set()
            return httpx.Response(200, json={"total_count": 0, "runners": []})
        for run_id in (7, 8):
            if path.endswith(f"/runs/{run_id}/jobs"):
                with lock:
                    jobs_listed.append(run_id)
                return httpx.Response(200, json={"total_count": 1, "jobs": [job(run_id)]})
        status = request.url.params.get("status")
        if path.endswith("/actions/runs") and status in {"in_progress", None}:
            return httpx.Response(200, json={"total_count": 2, "workflow_runs": runs})
        return _empty_lists(request)

    asked: list[int] = []

    def lean(facts: RunFacts, busy: Mapping[str, bool]) -> Reason:
        asked.append(facts.run_id)
        return Reason.EVENT if facts.run_id == 7 else Reason.SETTLED

    source, _ = _source(handler, [])
    source.observe(T0)
    assert sorted(jobs_listed) == [7, 8]  # the full poll lists both runs' jobs
    jobs_listed.clear()
    runners_in.clear()
    observation = source.reconcile(T0 + timedelta(minutes=5), lean)
    source.close()
    assert sorted(asked) == [7, 8]  # decided once each, with the plan
    assert jobs_listed == [7]  # the settled run is not listed
    assert sorted(j.id for j in observation.jobs) == [70, 80]

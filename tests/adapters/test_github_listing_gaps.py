"""A listing that cannot be completed is never a silent zero, and GitHub's ``Retry-After``
on a 5xx is honoured across ticks, never slept inside one."""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from autoscaler.config import GitHubConfig
from autoscaler.observe.github.source import GitHubSource
from autoscaler.secrets import Secret
from autoscaler.telemetry import Metrics

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
API = "https://ghe.example.internal/api/v3"
GPU = ["self-hosted", "linux.g5.4xlarge.nvidia.gpu"]
RUN = {"id": 7, "status": "queued", "created_at": "2026-11-30T02:00:00Z"}


def job(job_id: int) -> dict[str, Any]:
    return {
        "id": job_id,
        "run_id": 7,
        "status": "queued",
        "labels": GPU,
        "created_at": "2026-11-30T02:00:00Z",
        "started_at": "2026-11-30T02:00:00Z",
        "steps": [],
        "name": "train",
    }


@dataclass
class World:
    """A GitHubSource over a MockTransport, its wall clock and its sleeps in our hands."""

    handler: Callable[[httpx.Request], httpx.Response | None]
    now: float = T0.timestamp()
    sleeps: list[float] = field(default_factory=list)
    seen: list[httpx.Request] = field(default_factory=list)
    metrics: Metrics = field(default_factory=Metrics)

    def source(self, **config: Any) -> GitHubSource:
        def answer(request: httpx.Request) -> httpx.Response:
            self.seen.append(request)
            got = self.handler(request)
            if got is not None:
                return got
            path = request.url.path
            if path.endswith("/actions/runners"):
                return httpx.Response(200, json={"total_count": 0, "runners": []})
            if path.endswith("/jobs"):
                return httpx.Response(200, json={"total_count": 2, "jobs": [job(70), job(71)]})
            if path.endswith("/rate_limit"):
                return httpx.Response(404, json={"message": "Rate limiting is not enabled."})
            if request.url.params.get("status") in {"queued", None}:
                return httpx.Response(200, json={"total_count": 1, "workflow_runs": [RUN]})
            return httpx.Response(200, json={"total_count": 0, "workflow_runs": []})

        cfg = GitHubConfig(owner="acme", api_url=API, token=Secret("tok"), **config)
        return GitHubSource(
            cfg,
            self.metrics,
            transport=httpx.MockTransport(answer),
            sleep=self.sleeps.append,
            wall_clock=lambda: self.now,
        )

    def unlisted_gauge(self) -> float | None:
        return self.metrics.registry.get_sample_value("ci_autoscaler_github_unlisted_repos")


def test_a_self_referencing_link_on_a_cold_start_leaves_the_repository_unlisted() -> None:
    """The story: a runs listing whose ``Link rel="next"`` pointed at itself. The loop was
    caught, but the page read before it was dropped and the poll counted as ok: the GPU
    queue read 0 instead of 2 for as long as the loop lasted, with no alert and no
    scale-up. Now the repository is unlisted, named in the observation (which the
    controller reports as a partial poll), counted in the gauge, never a silent zero.
    (A cold poll reads each repository's newest runs first, one page: the runs that page
    shows count, whatever the whole listing does after it.)"""

    def handler(request: httpx.Request) -> httpx.Response | None:
        runs = request.url.path.endswith("/repos/acme/gpu/actions/runs")
        if runs and request.url.params.get("status") in {"queued", None}:
            link = f'<{request.url}>; rel="next"'  # itself
            body = {"total_count": 1, "workflow_runs": [RUN]}
            return httpx.Response(200, json=body, headers={"link": link})
        return None

    world = World(handler)
    source = world.source(repos=("gpu", "cpu"))
    observation = source.observe(T0)
    source.close()
    assert [repo for repo, _ in observation.unlisted_repos] == ["gpu"]
    assert observation.unlisted_repos[0][1] == "loop"
    assert world.unlisted_gauge() == 1


def test_a_repository_that_fails_keeps_its_last_good_listing() -> None:
    """Listed once, then its pages loop: it keeps the jobs it had, and is not unlisted."""
    looping = {"on": False}

    def handler(request: httpx.Request) -> httpx.Response | None:
        runs = request.url.path.endswith("/actions/runs")
        if looping["on"] and runs and request.url.params.get("status") in {"queued", None}:
            link = f'<{request.url}>; rel="next"'
            body = {"total_count": 1, "workflow_runs": [RUN]}
            return httpx.Response(200, json=body, headers={"link": link})
        return None

    world = World(handler)
    source = world.source(repos=("gpu",))
    first = source.observe(T0)
    looping["on"] = True
    world.now += 30
    second = source.observe(T0 + timedelta(seconds=30))
    source.close()
    assert sorted(j.id for j in first.jobs) == [70, 71]
    assert sorted(j.id for j in second.jobs) == [70, 71]
    assert second.unlisted_repos == ()
    assert world.unlisted_gauge() == 0


def test_a_503_with_retry_after_closes_the_endpoint_across_ticks_without_sleeping() -> None:
    """The story: one 503 with ``Retry-After: 60`` was slept out inside the poll; it spent
    the whole 8 s deadline and failed the poll after a single request. Now the poll goes
    on at once (the repository is unlisted on a cold start), and no request reaches that
    endpoint until the minute has passed, in this tick or the next."""
    failing = {"on": True}

    def handler(request: httpx.Request) -> httpx.Response | None:
        if failing["on"] and request.url.path.endswith("/actions/runs"):
            failing["on"] = False
            return httpx.Response(503, json={"message": "busy"}, headers={"Retry-After": "60"})
        return None

    world = World(handler)
    source = world.source(repos=("gpu",))
    started = time.monotonic()
    first = source.observe(T0)
    took = time.monotonic() - started
    assert max(world.sleeps, default=0.0) < 1.0  # jitter at most, never the minute
    assert took < 5.0
    assert [repo for repo, _ in first.unlisted_repos] == ["gpu"]
    assert first.unlisted_repos[0][1].startswith("transient")
    runs = [r for r in world.seen if r.url.path.endswith("/actions/runs")]

    world.seen.clear()
    world.now += 30  # the next tick, before the minute is up
    second = source.observe(T0 + timedelta(seconds=30))
    assert not [r for r in world.seen if r.url.path.endswith("/actions/runs")]
    assert [repo for repo, _ in second.unlisted_repos] == ["gpu"]

    world.now += 31  # past it: listed again
    third = source.observe(T0 + timedelta(seconds=61))
    source.close()
    assert third.unlisted_repos == ()
    assert sorted(j.id for j in third.jobs) == [70, 71]
    assert len(runs) >= 1


@pytest.mark.parametrize(
    "encoding",
    [pytest.param("gzip, gzip", id="stacked-gzip"), pytest.param("br", id="not-asked-for")],
)
def test_an_encoding_we_did_not_ask_for_is_refused_unread(encoding: str) -> None:
    """Only one layer of gzip is asked for (and inflated within the page limit); a stack
    of them would inflate each layer's output again."""

    def handler(request: httpx.Request) -> httpx.Response | None:
        if request.url.path.endswith("/actions/runs"):
            body = b"{}"
            for _ in encoding.split(","):
                body = gzip.compress(body) if "gzip" in encoding else body
            return httpx.Response(200, content=body, headers={"Content-Encoding": encoding})
        return None

    world = World(handler)
    source = world.source(repos=("gpu",))
    observation = source.observe(T0)
    source.close()
    assert [repo for repo, _ in observation.unlisted_repos] == ["gpu"]
    refused = world.metrics.registry.get_sample_value(
        "ci_autoscaler_github_requests_total", {"endpoint": "runs", "status": "bad_encoding"}
    )
    assert refused is not None and refused >= 1

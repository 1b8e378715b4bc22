"""Bad pages never abort the tick: malformed bodies are skipped and counted, a page over
the size limit is refused unparsed, pagination loops and endless listings stop with the
URL in the log, and whatever escapes the adapter is a classified error."""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from autoscaler.config import GitHubConfig
from autoscaler.errors import NotFoundError, TransientError
from autoscaler.fakes.github import FakeGitHub
from autoscaler.observe.github.http import MAX_PAGE_BYTES
from autoscaler.observe.github.listing import MAX_PAGES
from autoscaler.observe.github.source import GitHubSource
from autoscaler.secrets import Secret
from autoscaler.telemetry import Metrics

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
CPU = ["self-hosted", "linux.4xlarge"]
DEEP = b"[" * 100_000 + b"]" * 100_000
HTML = b"<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>"
API = "https://ghe.example.internal/api/v3"


@dataclass
class World:
    fake: FakeGitHub
    metrics: Metrics = field(default_factory=Metrics)

    def observe(self, **config: Any) -> Any:
        cfg = GitHubConfig(
            owner="demo-org", api_url=self.fake.url, token=Secret("fake-token"), **config
        )
        source = GitHubSource(cfg, self.metrics, sleep=lambda _: None)
        try:
            return source.observe(T0)
        finally:
            source.close()

    def skipped(self, kind: str) -> float:
        labels = {"kind": kind}
        value = self.metrics.registry.get_sample_value(
            "ci_autoscaler_github_skipped_items_total", labels
        )
        return value or 0.0


@pytest.fixture
def world() -> Iterator[World]:
    with FakeGitHub(clock=lambda: T0) as fake:
        yield World(fake)


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        pytest.param(b'{"total_count": 3, "workflow_runs": [{"id": 1, ', None, id="invalid-json"),
        pytest.param(DEEP, None, id="deeply-nested-json"),
        pytest.param(HTML, "text/html", id="html-error-page"),
        pytest.param(b'{"total_count": "1", "workflow_runs": []}', None, id="total-not-a-number"),
        pytest.param(b'{"total_count": 1, "workflow_runs": {}}', None, id="runs-not-a-list"),
        pytest.param(b"[]", None, id="a-list-not-an-object"),
        pytest.param(b"x" * (MAX_PAGE_BYTES + 1), None, id="over-the-size-limit"),
    ],
)
def test_a_bad_runs_page_is_skipped_counted_and_the_tick_goes_on(
    world: World, body: bytes, content_type: str | None
) -> None:
    world.fake.queue_job("app", CPU)
    kept = world.fake.queue_job("infra", CPU)
    # both listings that show app's queued run: its newest runs, and its queued runs
    world.fake.inject_body(
        r"^/repos/demo-org/app/actions/runs\?(status=queued&)?per_page",
        body,
        content_type=content_type or "application/json; charset=utf-8",
        times=2,
    )
    observation = world.observe()
    assert [job.id for job in observation.jobs] == [kept]
    assert world.skipped("runs_page") == 2
    assert observation.skipped_items == 2


def test_a_page_over_the_limit_is_refused_before_it_is_read(world: World) -> None:
    world.fake.queue_job("app", CPU)
    world.fake.inject_body(r"/jobs", b"[" * (MAX_PAGE_BYTES + 1))
    observation = world.observe()
    assert observation.jobs == ()
    assert world.skipped("jobs_page") == 1
    too_large = world.metrics.registry.get_sample_value(
        "ci_autoscaler_github_requests_total", {"endpoint": "jobs", "status": "too_large"}
    )
    assert too_large == 1


@pytest.mark.parametrize(
    ("field_name", "value"),
    [
        pytest.param("created_at", "0001-01-01T00:00:00Z", id="year-1"),
        pytest.param("created_at", "9999-12-31T23:59:59Z", id="year-9999"),
        pytest.param("created_at", 1764471600, id="a-number"),
        pytest.param("labels", [["self-hosted"]], id="nested-labels"),
        pytest.param("id", "1234", id="id-a-string"),
    ],
)
def test_a_job_with_absurd_or_wrong_typed_fields_is_skipped(
    world: World, field_name: str, value: Any
) -> None:
    good = world.fake.queue_job("app", CPU)
    bad = world.fake.queue_job("app", CPU)
    world.fake.override_job(bad, **{field_name: value})
    observation = world.observe()
    assert [job.id for job in observation.jobs] == [good]
    assert world.skipped("job") == 1


def test_deep_json_in_an_error_body_is_still_a_404(world: World) -> None:
    world.fake.inject_body(r"/repos/demo-org/gone/", DEEP, status=404)
    with pytest.raises(NotFoundError, match="/repos/demo-org/gone/actions/runs"):
        world.observe(repos=("gone",))


def test_an_html_502_is_retried_then_transient(world: World) -> None:
    world.fake.add_repo("app")
    world.fake.inject_body(r"/actions/runners", HTML, status=502, content_type="text/html", times=3)
    with pytest.raises(TransientError, match="502 after 3 attempts"):
        world.observe()


# --- over httpx.MockTransport: Link headers GitHub's fake would never send


def _mock(
    handler: Callable[[httpx.Request], httpx.Response | None], **config: Any
) -> tuple[GitHubSource, Metrics, list[str]]:
    seen: list[str] = []

    def wrapped(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        answer = handler(request)
        if answer is not None:
            return answer
        if request.url.path.endswith("/actions/runners"):
            return httpx.Response(200, json={"total_count": 0, "runners": []})
        if request.url.path.endswith("/jobs"):
            return httpx.Response(200, json={"total_count": 0, "jobs": []})
        return httpx.Response(200, json={"total_count": 0, "workflow_runs": []})

    metrics = Metrics()
    cfg = GitHubConfig(owner="acme", api_url=API, token=Secret("tok"), **config)
    source = GitHubSource(
        cfg, metrics, transport=httpx.MockTransport(wrapped), sleep=lambda _: None
    )
    return source, metrics, seen


RUN = {"id": 7, "status": "queued", "created_at": "2026-11-30T02:00:00Z"}
_RUNNER = {
    "id": 1,
    "name": "gpu-1",
    "status": "online",
    "busy": False,
    "labels": [{"name": "self-hosted"}],
}


def test_a_link_back_to_a_page_already_read_stops_the_listing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Link rel=next pointing back to page 1 looped forever: 82,000 requests in 15 s
    and a tick that never ended."""

    def handler(request: httpx.Request) -> httpx.Response | None:
        if request.url.path.endswith("/runs") and request.url.params.get("status") in {
            "queued",
            None,
        }:
            return httpx.Response(200, json={"total_count": 1, "workflow_runs": [RUN]})
        if request.url.path.endswith("/runs/7/jobs"):
            page = request.url.params.get("page", "1")
            back = f"{API}/repos/acme/app/actions/runs/7/jobs?filter=latest&per_page=100&page="
            link = f'<{back}{"2" if page == "1" else "1"}>; rel="next"'
            return httpx.Response(200, json={"total_count": 0, "jobs": []}, headers={"link": link})
        return None

    source, metrics, seen = _mock(handler, repos=("app",))
    with caplog.at_level(logging.ERROR, "autoscaler.observe.github"):
        observation = source.observe(T0)
    source.close()
    assert observation.jobs == ()
    assert observation.unlisted_repos == (("app", "jobs of run 7: loop"),)
    assert sum("/runs/7/jobs" in url for url in seen) == 2  # page 1, page 2, stop
    errors = metrics.registry.get_sample_value(
        "ci_autoscaler_github_pagination_errors_total", {"endpoint": "jobs", "reason": "loop"}
    )
    assert errors == 1
    [record] = [r for r in caplog.records if "pagination" in r.message]
    assert f"{API}/repos/acme/app/actions/runs/7/jobs?filter=latest&per_page=100" in record.message


def test_an_endless_runner_listing_stops_at_the_page_cap_and_fails_the_poll() -> None:
    def handler(request: httpx.Request) -> httpx.Response | None:
        if request.url.path.endswith("/orgs/acme/actions/runners"):
            page = int(request.url.params.get("page", "1"))
            link = f'<{API}/orgs/acme/actions/runners?per_page=100&page={page + 1}>; rel="next"'
            return httpx.Response(
                200, json={"total_count": 10**9, "runners": []}, headers={"link": link}
            )
        return None

    source, metrics, seen = _mock(handler, repos=())
    with pytest.raises(TransientError, match=f"more than {MAX_PAGES} pages") as caught:
        source.observe(T0)
    source.close()
    assert f"{API}/orgs/acme/actions/runners?per_page=100&page={MAX_PAGES + 1}" in str(caught.value)
    assert sum("/actions/runners" in url for url in seen) == MAX_PAGES
    errors = metrics.registry.get_sample_value(
        "ci_autoscaler_github_pagination_errors_total", {"endpoint": "list", "reason": "page_cap"}
    )
    assert errors == 1


def _chunked_over_the_limit() -> httpx.Response:
    def chunks() -> Iterator[bytes]:
        for _ in range(MAX_PAGE_BYTES // 65536 + 2):
            yield b" " * 65536

    return httpx.Response(200, content=chunks())  # no Content-Length


def _gzip_bomb() -> httpx.Response:
    bomb = gzip.compress(b" " * (MAX_PAGE_BYTES + 1))
    assert len(bomb) < MAX_PAGE_BYTES // 100
    return httpx.Response(200, content=bomb, headers={"Content-Encoding": "gzip"})


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(_chunked_over_the_limit, id="chunked-body-refused-while-reading"),
        # A few KB that inflate past the limit are refused like a page that size: the
        # limit applies to what would be parsed, not to what came over the wire.
        pytest.param(_gzip_bomb, id="gzip-bomb-refused-while-inflating"),
    ],
)
def test_a_page_over_the_limit_is_refused_before_it_is_parsed(
    answer: Callable[[], httpx.Response],
) -> None:
    def handler(request: httpx.Request) -> httpx.Response | None:
        if request.url.path.endswith("/orgs/acme/actions/runners"):
            return answer()
        return None

    source, metrics, _ = _mock(handler, repos=())
    with pytest.raises(TransientError, match="over the page limit"):
        source.observe(T0)
    source.close()
    too_large = metrics.registry.get_sample_value(
        "ci_autoscaler_github_requests_total", {"endpoint": "runners", "status": "too_large"}
    )
    assert too_large == 1


def test_an_exception_escaping_the_adapter_is_a_transient_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def handler(request: httpx.Request) -> httpx.Response | None:
        if request.url.path.endswith("/actions/runners"):
            raise RuntimeError("a bug below the adapter")
        return None

    source, _, _ = _mock(handler, repos=())
    with pytest.raises(TransientError, match="unexpected RuntimeError") as caught:
        source.observe(T0)
    source.close()
    assert caught.value.code == "RuntimeError"
    assert any(r.exc_info for r in caplog.records if "unexpectedly" in r.message)


def test_a_gzipped_page_is_inflated_and_counted() -> None:
    """The helper asks for gzip only (one layer, inflated within the page limit): a
    gzipped page must read as the plain one."""
    runners = {"total_count": 1, "runners": [_RUNNER]}

    def handler(request: httpx.Request) -> httpx.Response | None:
        assert request.headers["accept-encoding"] == "gzip"
        if request.url.path.endswith("/orgs/acme/actions/runners"):
            body = gzip.compress(json.dumps(runners).encode())
            return httpx.Response(200, content=body, headers={"Content-Encoding": "gzip"})
        return None

    source, _, _ = _mock(handler, repos=())
    observation = source.observe(T0)
    source.close()
    assert [r.name for r in observation.runners] == ["gpu-1"]

"""The delivery log reader over ``httpx.MockTransport``: pages the fake would never send.

A ``Link`` back to a page already read, more pages than the cap, a page that is not a JSON
array and items without the documented fields: each ends or thins the read, is counted,
and leaves the window without evidence (the lean reconcile runs), never a hang or a crash.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from autoscaler.config import GitHubConfig
from autoscaler.observe.github.delivery_watch import DeliveryWatch
from autoscaler.observe.github.source import GitHubSource
from autoscaler.secrets import Secret
from autoscaler.telemetry import Metrics
from tests.adapters.webhook_support import fresh_metrics

BASE = "https://api.github.test"
NOW = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
PATH = "/orgs/demo-org/hooks/7/deliveries"


def item(
    ident: int, minutes_ago: float, code: int = 202, guid: str | None = None
) -> dict[str, Any]:
    at = datetime.fromtimestamp(NOW.timestamp() - 60 * minutes_ago, UTC)
    return {
        "id": ident,
        "guid": guid or f"g-{ident}",
        "delivered_at": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "redelivery": False,
        "duration": 0.1,
        "status": "OK" if code < 300 else "failed to connect",
        "status_code": code,
        "event": "workflow_job",
        "action": "queued",
        "installation_id": None,
        "repository_id": 1,
        "throttled_at": None,
    }


def source(handler: Callable[[httpx.Request], httpx.Response], metrics: Metrics) -> GitHubSource:
    config = GitHubConfig(owner="demo-org", api_url=BASE, token=Secret("t"))
    return GitHubSource(
        config,
        metrics,
        transport=httpx.MockTransport(handler),
        sleep=lambda _s: None,
        wall_clock=NOW.timestamp,
    )


def value(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_a_link_back_to_a_page_already_read_ends_the_read_incomplete() -> None:
    """Page 2's ``next`` points at page 1 again: two requests, not 82,000."""
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(str(request.url))
        cursor = request.url.params.get("cursor")
        link = f"<{BASE}{PATH}?per_page=100&cursor={'v1_2' if cursor is None else 'v1_1'}>"
        if cursor == "v1_1":
            link = f"<{BASE}{PATH}?per_page=100&cursor=v1_2>"
        page = [item(3, 1)] if cursor is None else [item(2, 2)]
        return httpx.Response(200, json=page, headers={"link": f'{link}; rel="next"'})

    metrics = fresh_metrics()
    github = source(handler, metrics)
    try:
        read = github.delivery_log(7).read(NOW.timestamp() - 3600)
    finally:
        github.close()
    assert (read.complete, read.cut, len(calls)) == (False, "loop", 3)
    assert [a.id for a in read.attempts] == [3, 2, 2]
    assert (
        value(
            metrics,
            "ci_autoscaler_github_pagination_errors_total",
            endpoint="hook_deliveries",
            reason="loop",
        )
        == 1
    )


def test_more_pages_than_the_cap_end_the_read_and_the_window_is_not_clean() -> None:
    """A log that never reaches back to the previous read (every page newer): the read
    stops at the cap; the watch says "incomplete", the reconcile lists as without it."""
    served = [0]

    def handler(request: httpx.Request) -> httpx.Response:
        served[0] += 1
        n = served[0]
        link = f'<{BASE}{PATH}?per_page=100&cursor=v1_{1000 - n}>; rel="next"'
        return httpx.Response(200, json=[item(1000 - n, 0.01 * n)], headers={"link": link})

    metrics = fresh_metrics()
    github = source(handler, metrics)
    try:
        watch = DeliveryWatch(github.delivery_log(7), metrics, first_window=300.0)
        watch.horizon = NOW.timestamp() - 300.0  # a previous read, five minutes ago
        assert watch.check(NOW) is False
    finally:
        github.close()
    assert served[0] == 20
    assert (
        value(metrics, "ci_autoscaler_webhook_delivery_log_reads_total", result="incomplete") == 1
    )
    assert (
        value(
            metrics,
            "ci_autoscaler_github_pagination_errors_total",
            endpoint="hook_deliveries",
            reason="page_cap",
        )
        == 1
    )


BAD_PAGES: list[tuple[str, bytes, int]] = [
    ("an-object-not-an-array", json.dumps({"message": "hi"}).encode(), 0),
    ("not-json", b"<html>", 0),
    (
        "malformed-items-skipped",
        json.dumps([item(5, 1), {"id": "x"}, 7, item(4, 2, code=502)]).encode(),
        2,
    ),
]


@pytest.mark.parametrize(
    ("body", "attempts"), [b[1:] for b in BAD_PAGES], ids=[b[0] for b in BAD_PAGES]
)
def test_malformed_input_is_skipped_counted_and_no_evidence(body: bytes, attempts: int) -> None:
    """What parses is used (a failed delivery on the page is still redelivered); what does
    not is counted in ``github_skipped_items_total`` and makes the window not clean."""
    posted: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            posted.append(request.url.path)
            return httpx.Response(202, json={})
        return httpx.Response(200, content=body, headers={"content-type": "application/json"})

    metrics = fresh_metrics()
    github = source(handler, metrics)
    try:
        log = github.delivery_log(7)
        read = log.read(NOW.timestamp() - 300)
        watch = DeliveryWatch(log, metrics, first_window=300.0)
        watch.horizon = NOW.timestamp() - 300.0
        clean = watch.check(NOW)
    finally:
        github.close()
    assert len(read.attempts) == attempts and read.skipped > 0
    assert clean is False
    assert (
        value(metrics, "ci_autoscaler_webhook_delivery_log_reads_total", result="incomplete") == 1
    )
    skipped = value(
        metrics, "ci_autoscaler_github_skipped_items_total", kind="hook_delivery"
    ) + value(metrics, "ci_autoscaler_github_skipped_items_total", kind="hook_deliveries_page")
    assert skipped == 2 * read.skipped  # the read here and the watch's
    assert posted == ([f"{PATH}/4/attempts"] if attempts else [])

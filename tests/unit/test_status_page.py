"""The page for on-call: what it shows, in which format, and that nothing in it runs.

A controller ticks over hand-written fakes (a GPU type whose spot pool refuses capacity,
a CPU type, jobs nobody serves) and the page is rendered from it.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from html.parser import HTMLParser

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.app import status_page
from autoscaler.config import (
    AlertRuleConfig,
    AwsConfig,
    BuiltinAlertsConfig,
    Config,
    RetryConfig,
)
from autoscaler.controller import Controller
from autoscaler.domain import Job, JobStatus, Observation, Runner, normalize_labels
from autoscaler.errors import CapacityError
from autoscaler.scale.scaler import Scaler
from autoscaler.telemetry import Metrics
from tests.factories import alert_engine, oncall
from tests.unit.handover_fakes import handover_ports
from tests.unit.scaling_fakes import GPU, T0, FakePool, config, pool, rtype

EVIL = '<script>alert("x")</script>'
EVIL_LABEL = "<img src=x onerror=alert(1)>"


@dataclass
class Source:
    jobs: tuple[Job, ...]

    def observe(self, now: datetime) -> Observation:
        return Observation(now, self.jobs, ())

    def remove_runner(self, runner_id: int) -> None:
        raise AssertionError("not here")

    def find_runner(self, name: str) -> Runner | None:
        raise AssertionError("not here")


def job(n: int, labels: list[str], minutes: float) -> Job:
    created = T0 - timedelta(minutes=minutes)
    return Job(n, n, "app", "build", normalize_labels(labels), JobStatus.QUEUED, created)


def cfg() -> Config:
    rule = AlertRuleConfig(
        name="Jobs queueing too long",
        team="dev-infra",
        priority="P2",
        description="Jobs wait",
        receivers=("oncall",),
        per_runner_type=True,
        max_queue_time=600.0,
    )
    alerts = oncall(BuiltinAlertsConfig(github_unreachable_after=0), rules=(rule,))
    base = config(rtype(), rtype(EVIL, pools=("evil-pool",)))
    return base.model_copy(
        update={"alerts": alerts, "aws": AwsConfig(retry=RetryConfig(max_attempts=1))}
    )


def controller() -> Controller:
    config = cfg()
    jobs = (
        job(1, ["self-hosted", GPU], 20),
        job(2, ["self-hosted", GPU], 3),
        job(3, ["self-hosted", EVIL.lower()], 1),
        job(4, ["self-hosted", EVIL_LABEL], 7),
    )
    fake = FakePool(
        {"gpu-spot": pool("gpu-spot"), "gpu-od": pool("gpu-od"), "evil-pool": pool("evil-pool")}
    )
    fake.fail(
        "set_desired_capacity", "gpu-spot", CapacityError("no", code="InsufficientInstanceCapacity")
    )
    metrics = Metrics(CollectorRegistry())
    source = Source(jobs)
    scaler = Scaler(
        fake,
        source,
        config,
        metrics,
        sleep=lambda _: None,
        rng=random.Random(0),
        **handover_ports(source),
    )
    engine = alert_engine(config.alerts, metrics=metrics)
    c = Controller(config, source, metrics, alerts=engine, scaler=scaler)
    c.tick(T0)
    return c


class Visible(HTMLParser):
    """Collects element names and text: what a browser would build."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(page: str) -> Visible:
    v = Visible()
    v.feed(page)
    return v


def test_html_page_shows_types_causes_pools_and_the_firing_alert() -> None:
    c = controller()
    html = status_page.render_html(c, T0 + timedelta(seconds=5))
    text = " ".join(parse(html).text)
    assert GPU in text and "A pool is out of capacity and backed off" in text
    assert "capacity_backoff" in text and "AWS: InsufficientInstanceCapacity" in text
    assert "Jobs ask for labels no runner type serves" in text
    assert "[P2] Jobs queueing too long (linux.g5.4xlarge.nvidia.gpu)" in text
    assert "Reason: max queue size 2, max queue time 20m; tripped: queue time" in text
    assert "firing for 5s" in text
    assert "Cause: capacity_backoff (gpu-spot since 03:00:00 UTC" in text
    assert "last successful poll 5s ago" in text
    assert '<meta http-equiv="refresh" content="30">' in html
    assert 'name="viewport"' in html
    assert "scale_up" in text  # the recent decisions: gpu-od took the need


@pytest.mark.parametrize(
    ("values", "words"),
    [
        pytest.param(
            {
                "max_queue_size": 7,
                "max_queue_time_mins": 62,
                "queue_size_threshold": 0,
                "queue_time_threshold": 1,
                "threshold_breached": 1,
            },
            "max queue size 7, max queue time 62m; tripped: queue time",
            id="the-seed-alert",
        ),
        pytest.param(
            {"max_queue_size": 1, "queue_size_threshold": 1, "threshold_breached": 1},
            "max queue size 1; tripped: queue size",
            id="a-flag-of-1-is-not-a-threshold-of-1",
        ),
        pytest.param(
            {"unmatched_jobs": 3, "threshold_breached": 1}, "unmatched jobs 3", id="no-flags"
        ),
    ],
)
def test_reason_flags_read_as_words(values: dict[str, int], words: str) -> None:
    """Story: the page showed ``queue_size_threshold=1``, which reads as "the threshold
    is 1"; it is a flag saying the queue size check tripped."""
    assert status_page.reason_words(values) == words


@pytest.mark.parametrize(
    ("history", "line"),
    [
        pytest.param([], "·" * 24, id="no-polls"),
        pytest.param([(0, 0), (200, 0)], "·" * 22 + "▁▁", id="empty-queue"),
        pytest.param(
            [(3500, 2), (1800, 8), (10, 4)],
            "▂" + "·" * 10 + "█" + "·" * 11 + "▄",
            id="rose-then-fell",
        ),
        pytest.param([(4000, 9), (10, 1)], "·" * 23 + "█", id="older-than-an-hour-dropped"),
    ],
)
def test_spark_line_of_the_last_hour(history: list[tuple[int, int]], line: str) -> None:
    now = T0 + timedelta(hours=2)
    polls = [(now - timedelta(seconds=age), {GPU: size}) for age, size in history]
    assert status_page.spark(polls, GPU, now) == line


def test_every_dynamic_string_is_escaped() -> None:
    """Regression guard: a runner type named like a script tag (config) and a job label
    carrying an onerror handler (GitHub) must come out as text, never as elements."""
    html = status_page.render_html(controller(), T0)
    tags = parse(html).tags
    assert "script" not in tags and "img" not in tags
    assert EVIL not in html and EVIL_LABEL.lower() not in html
    assert "&lt;script&gt;" in html and "&lt;img src=x onerror=alert(1)&gt;" in html


@pytest.mark.parametrize(
    ("target", "accept", "kind"),
    [
        pytest.param("/", "text/html,application/xhtml+xml,*/*;q=0.8", "html", id="browser"),
        pytest.param("/", "text/plain", "text", id="accept-text"),
        pytest.param("/", "*/*", "text", id="curl"),
        pytest.param("/", "", "text", id="no-accept"),
        pytest.param("/?format=text", "text/html", "text", id="format-text-wins"),
        pytest.param("/?format=html", "*/*", "html", id="format-html"),
        pytest.param("/?format=json", "text/html", "json", id="format-json"),
        pytest.param("/?format=bogus", "text/html", "html", id="unknown-format-ignored"),
    ],
)
def test_format_negotiation(target: str, accept: str, kind: str) -> None:
    assert status_page.wants(target, accept) == kind


def test_html_response_forbids_scripts() -> None:
    page = status_page.respond(controller(), T0, "/", "text/html")
    assert page.content_type == "text/html; charset=utf-8"
    assert page.headers["Content-Security-Policy"].startswith("default-src 'none'")


def test_text_page_keeps_the_table_and_adds_why() -> None:
    page = status_page.respond(controller(), T0, "/?format=text", "")
    text = page.body.decode()
    assert text.startswith("observed at 2026-11-30 03:00:00 UTC")
    assert "RUNNER TYPE" in text and "WHY JOBS WAIT" in text
    assert f"{GPU}: 2 queued, oldest waiting 20m" in text
    assert "    capacity_backoff: gpu-spot since 03:00:00 UTC" in text
    assert "  Cause: capacity_backoff" in text


def test_json_is_the_explain_document() -> None:
    doc = json.loads(status_page.respond(controller(), T0, "/?format=json", "").body)
    [gpu] = [t for t in doc["runner_types"] if t["name"] == GPU]
    assert set(gpu) == {"name", "queue_size", "max_queue_time_seconds", "causes", "pools"}
    assert [c["code"] for c in gpu["causes"]] == ["capacity_backoff", "demand_met"]
    assert [p["name"] for p in gpu["pools"]] == ["gpu-spot", "gpu-od"]


def test_before_the_first_tick() -> None:
    c = Controller(cfg(), Source(()), Metrics(CollectorRegistry()))
    assert status_page.render_text(c, T0) == "no tick yet\n"
    assert "No tick yet." in status_page.render_html(c, T0)

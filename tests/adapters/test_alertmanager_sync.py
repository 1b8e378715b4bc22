"""AlertmanagerSync and the engine with a fake transport standing in for Alertmanager.

Alertmanager's v2 API takes a JSON array of postable alerts (its OpenAPI
``postableAlerts``: ``labels`` required; ``annotations``, ``startsAt``, ``endsAt``,
``generatorURL`` optional) at ``/api/v2/alerts``; the e2e suite checks the same against a
real Alertmanager (tests/e2e/test_alertmanager.py).
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from autoscaler.alerting.alertmanager_sync import AlertmanagerSync
from autoscaler.alerting.delivery import Deliverer
from autoscaler.alerting.engine import AlertEngine, send_test
from autoscaler.config import AlertRuleConfig, AlertsConfig, BuiltinAlertsConfig, ReceiverConfig
from autoscaler.domain import QueueSnapshot, QueueStats, RunnerCounts
from autoscaler.secrets import SecretUrl
from autoscaler.telemetry import Metrics
from tests.factories import alert_engine

T0 = datetime(2026, 11, 30, 3, 12, tzinfo=UTC)
A, B = "http://am-0.example:9093", "http://am-1.example:9093"
POSTABLE_KEYS = {"labels", "annotations", "startsAt", "endsAt", "generatorURL"}


@dataclass
class FakeAlertmanagers:
    """Answers POST /api/v2/alerts like Alertmanager: 400 unless the body is an array of
    objects with labels; records what each host got. ``status[host]`` overrides."""

    posts: dict[str, list[list[dict[str, Any]]]] = field(default_factory=dict)
    status: dict[str, int] = field(default_factory=dict)
    gate: threading.Event | None = None

    def handler(self, request: httpx.Request) -> httpx.Response:
        if self.gate is not None:
            self.gate.wait(10)
        host = f"{request.url.scheme}://{request.url.host}:{request.url.port}"
        body = json.loads(request.content)
        if not request.url.path.endswith("/api/v2/alerts") or request.method != "POST":
            return httpx.Response(404)
        if not isinstance(body, list) or not all(
            isinstance(a, dict) and a.get("labels") and set(a) <= POSTABLE_KEYS for a in body
        ):
            return httpx.Response(400, json={"code": 400, "message": "models.PostableAlerts"})
        code = self.status.get(host, 200)
        if code == 200:
            self.posts.setdefault(host, []).append(body)
        return httpx.Response(code)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handler)


def rule(receivers: tuple[str, ...]) -> AlertRuleConfig:
    return AlertRuleConfig(
        name="Jobs queueing too long",
        team="pytorch-dev-infra",
        priority="P2",
        description="Jobs wait too long for a runner",
        receivers=receivers,
        max_queue_time=3600.0,
        per_runner_type=True,
        repeat_interval=3600.0,
        dashboard_url="https://grafana.example/d/ci",
    )


def snap(minutes: float) -> QueueSnapshot:
    stats = QueueStats(
        "linux.4xlarge", 7, minutes * 60, RunnerCounts(), queued_ages_seconds=(minutes * 60,) * 7
    )
    return QueueSnapshot(T0, {"linux.4xlarge": stats}, unmatched_jobs=0, ghost_jobs=0)


@dataclass
class Setup:
    engine: AlertEngine
    sync: AlertmanagerSync
    metrics: Metrics
    hooks: list[dict[str, Any]]

    def tick(self, second: float, queue_mins: float, *, dry_run: bool = False) -> None:
        now = T0 + timedelta(seconds=second)
        self.engine.step(snap(queue_mins), now, now, dry_run=dry_run)
        assert self.sync.flush(5)

    def count(self, result: str, receiver: str = "am") -> float:
        value = self.metrics.registry.get_sample_value(
            "ci_autoscaler_alertmanager_posts_total", {"receiver": receiver, "result": result}
        )
        return value or 0.0


def setup(
    fake: FakeAlertmanagers, *, resend: float = 60.0, urls: tuple[str, ...] = (A, B)
) -> Setup:
    hooks: list[dict[str, Any]] = []

    def hook(request: httpx.Request) -> httpx.Response:
        hooks.append(json.loads(request.content))
        return httpx.Response(200)

    secret_urls = tuple(SecretUrl(u) for u in urls)
    am = ReceiverConfig(
        name="am", type="alertmanager", url=secret_urls[0], urls=secret_urls, timeout=1.0
    )
    web = ReceiverConfig(name="hook", type="webhook", url=SecretUrl("http://hook.example/x"))
    config = AlertsConfig(
        rules=(rule(("am", "hook")),),
        receivers={"am": am, "hook": web},
        builtin=BuiltinAlertsConfig(unmatched_jobs=False, github_unreachable_after=0),
    )
    metrics = Metrics(CollectorRegistry())
    sync = AlertmanagerSync(
        config.receivers, metrics, resend=resend, interval=15.0, transport=fake.transport()
    )
    deliverer = Deliverer(
        config.receivers, metrics, transport=httpx.MockTransport(hook), sleep=lambda _: None
    )
    engine = alert_engine(config, metrics=metrics, deliverer=deliverer, alertmanager=sync)
    return Setup(engine, sync, metrics, hooks)


def test_every_alertmanager_gets_postable_alerts_while_firing_and_the_resolution() -> None:
    """The bug: the receiver posted Alertmanager's *webhook* payload to /api/v2/alerts and
    Alertmanager answered 400; once per transition at that, so an accepted alert would
    still have expired mid-incident. Now: an array of postable alerts, re-posted every
    resend with endsAt ahead, to both members of the HA pair."""
    fake = FakeAlertmanagers()
    s = setup(fake)
    s.tick(0, 62)
    s.tick(15, 63)  # within resend: nothing new to say
    s.tick(60, 64)  # resend elapsed: re-posted
    s.tick(75, 1)  # resolved: posted at once
    assert fake.posts[A] == fake.posts[B]
    first, again, resolved = fake.posts[A]
    [alert] = first
    assert alert["labels"] == {
        "alertname": "JobsQueueingTooLong",
        "team": "pytorch-dev-infra",
        "priority": "P2",
        "severity": "error",
        "runner_type": "linux.4xlarge",
    }
    assert alert["annotations"]["summary"] == "[P2] Jobs queueing too long (linux.4xlarge)"
    assert alert["annotations"]["reason"].startswith("max_queue_size=7, max_queue_time_mins=62")
    assert alert["generatorURL"] == "https://grafana.example/d/ci"
    assert alert["startsAt"] == "2026-11-30T03:12:00Z"
    assert alert["endsAt"] == "2026-11-30T03:16:00Z"  # now + 4 x max(60s, 15s)
    assert again[0]["endsAt"] == "2026-11-30T03:17:00Z"
    assert again[0]["annotations"]["reason"].startswith("max_queue_size=7, max_queue_time_mins=64")
    assert resolved[0]["endsAt"] == "2026-11-30T03:13:15Z"  # the resolve time
    assert resolved[0]["labels"] == alert["labels"]
    assert s.count("sent") == 6 and s.count("failed") == s.count("rejected") == 0


def test_other_receivers_keep_one_notification_per_transition() -> None:
    """Re-posting to Alertmanager is no lifecycle transition: the webhook receiver still
    gets exactly FIRING then RESOLVED, and the outbox never holds alertmanager items."""
    fake = FakeAlertmanagers()
    s = setup(fake, resend=0)  # re-post every tick
    for second, queue in ((0, 62), (15, 63), (30, 64), (45, 65), (60, 1)):
        s.tick(second, queue)
        assert all(i.receiver == "hook" for i in s.engine.store.pending())
    assert [h["state"] for h in s.hooks] == ["FIRING", "RESOLVED"]
    assert len(fake.posts[A]) == 5


def test_a_member_that_fails_gets_the_set_again_next_tick_the_other_does_not() -> None:
    fake = FakeAlertmanagers(status={B: 503})
    s = setup(fake)
    s.tick(0, 62)
    assert len(fake.posts[A]) == 1 and B not in fake.posts
    assert s.count("sent") == 1 and s.count("failed") == 1
    del fake.status[B]  # B is back
    s.tick(15, 63)
    assert len(fake.posts[A]) == 1  # A acknowledged it: not due before the resend
    assert len(fake.posts[B]) == 1
    assert fake.posts[B][0][0]["labels"]["runner_type"] == "linux.4xlarge"


def test_a_rejected_post_is_counted_logged_and_not_hammered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeAlertmanagers(status={A: 422})
    s = setup(fake, urls=(A,))
    with caplog.at_level(logging.ERROR):
        s.tick(0, 62)
        s.tick(15, 63)
    assert s.count("rejected") == 1
    assert "rejected" in caplog.text and "am-0.example:9093" in caplog.text
    s.tick(60, 64)  # the next resend tries again
    assert s.count("rejected") == 2


def test_failures_never_log_the_credentials_of_a_url(caplog: pytest.LogCaptureFixture) -> None:
    url = "http://ops:hunter2@am-0.example:9093/am?token=s3cret"
    fake = FakeAlertmanagers(status={"http://am-0.example:9093": 503})
    s = setup(fake, urls=(url,))
    with caplog.at_level(logging.DEBUG, logger="autoscaler"):
        s.tick(0, 62)
    assert s.count("failed") == 1
    assert "am-0.example:9093" in caplog.text
    for secret in ("hunter2", "ops:", "s3cret", "/am"):
        assert secret not in caplog.text


def test_sync_returns_while_a_post_is_still_in_flight() -> None:
    """The tick never waits for Alertmanager: with the fake hung, sync returns, the post
    completes later and is collected by a later tick; no second post starts meanwhile."""
    fake = FakeAlertmanagers(gate=threading.Event())
    s = setup(fake, urls=(A,))
    now = T0
    s.engine.step(snap(62), now, now)  # returns although Alertmanager has not answered
    assert A not in fake.posts
    s.engine.step(snap(63), now + timedelta(seconds=15), now + timedelta(seconds=15))
    assert fake.gate is not None
    fake.gate.set()
    assert s.sync.flush(5)
    assert len(fake.posts[A]) == 1
    assert s.count("sent") == 1


def test_dry_run_posts_nothing() -> None:
    fake = FakeAlertmanagers()
    s = setup(fake)
    s.tick(0, 62, dry_run=True)
    assert fake.posts == {}


def test_alerts_test_posts_a_firing_then_a_resolved_postable_alert() -> None:
    fake = FakeAlertmanagers()
    rc = ReceiverConfig(
        name="am", type="alertmanager", url=SecretUrl(A), urls=(SecretUrl(A), SecretUrl(B))
    )
    deliverer = Deliverer(
        {"am": rc}, Metrics(CollectorRegistry()), transport=fake.transport(), sleep=lambda _: None
    )
    assert send_test(rc, T0, deliverer) == {"FIRING": "sent", "RESOLVED": "sent"}
    for url in (A, B):
        (fire,), (resolve,) = fake.posts[url]
        assert fire["labels"]["alertname"] == "CiAutoscalerTestAlert"
        assert fire["endsAt"] > fire["startsAt"]
        assert resolve["endsAt"] == "2026-11-30T03:12:00Z"

"""Every receiver type against a real HTTP capture server on 127.0.0.1, plus one receiver
that is down (connection refused) and one that is slow (times out)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.alerting.delivery import Deliverer
from autoscaler.alerting.engine import AlertEngine, send_test
from autoscaler.alerting.store import StateStore
from autoscaler.config import AlertRuleConfig, AlertsConfig, BuiltinAlertsConfig, ReceiverConfig
from autoscaler.config.reader import Secret
from autoscaler.domain import QueueSnapshot, QueueStats, RunnerCounts
from autoscaler.telemetry import Metrics
from tests.conftest import free_port

T0 = datetime(2026, 11, 30, 3, 12, tzinfo=UTC)


@dataclass
class Captured:
    method: str
    path: str
    body: Any
    headers: dict[str, str]


@dataclass
class Capture:
    """A local HTTP server that records requests. Paths starting with /slow block until
    ``release`` is set; /status/NNN answers NNN; /flaky fails with 503 once."""

    port: int
    requests: list[Captured] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    flaky_failed: bool = False

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def bodies(self, prefix: str) -> list[Any]:
        return [r.body for r in self.requests if r.path.startswith(prefix)]


def _handler(cap: Capture) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _reply(self, code: int, body: Any = None) -> None:
            data = json.dumps(body or {}).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"null")
            if self.path.startswith("/slow"):
                cap.release.wait(10)
            if self.path.startswith("/flaky") and not cap.flaky_failed:
                cap.flaky_failed = True
                self._reply(503)
                return
            cap.requests.append(Captured(self.command, self.path, body, dict(self.headers)))
            if self.path.startswith("/status/"):
                self._reply(int(self.path.rsplit("/", 1)[1]))
            elif self.command == "POST" and self.path.endswith("/issues"):
                self._reply(201, {"number": 42})
            else:
                self._reply(202 if "pagerduty" in self.path else 200, {"status": "success"})

        do_POST = do_PATCH = _handle

    return Handler


def start(port: int = 0) -> tuple[Capture, ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", port), BaseHTTPRequestHandler)
    cap = Capture(server.server_address[1])
    server.RequestHandlerClass = _handler(cap)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return cap, server


@pytest.fixture
def capture() -> Iterator[Capture]:
    cap, server = start()
    yield cap
    cap.release.set()
    server.shutdown()
    server.server_close()


def receiver(name: str, rtype: str, url: str, **kw: Any) -> ReceiverConfig:
    return ReceiverConfig(name=name, type=rtype, url=url, **kw)


def setup(receivers: list[ReceiverConfig], **deliverer_kw: Any) -> tuple[AlertEngine, Metrics]:
    rule = AlertRuleConfig(
        name="Jobs queueing too long",
        team="pytorch-dev-infra",
        priority="P2",
        description="Jobs wait too long for a runner",
        receivers=tuple(r.name for r in receivers),
        max_queue_size=10,
        max_queue_time=3600.0,
        repeat_interval=3600.0,
        runbook_url="https://runbook.example/queue",
        dashboard_url="https://grafana.example/d/ci",
    )
    config = AlertsConfig(
        rules=(rule,),
        receivers={r.name: r for r in receivers},
        builtin=BuiltinAlertsConfig(unmatched_jobs=False, github_unreachable_after=0),
    )
    metrics = Metrics(CollectorRegistry())
    deliverer_kw.setdefault("sleep", lambda _: None)
    deliverer = Deliverer(config.receivers, metrics, **deliverer_kw)
    return AlertEngine(config, StateStore(None), deliverer, metrics), metrics


def snap(minutes: float) -> QueueSnapshot:
    stats = QueueStats(
        "linux.4xlarge", 7, minutes * 60, RunnerCounts(), queued_ages_seconds=(minutes * 60,) * 7
    )
    return QueueSnapshot(T0, {"linux.4xlarge": stats}, unmatched_jobs=0, ghost_jobs=0)


def tick(engine: AlertEngine, minute: int, queue_mins: float) -> None:
    now = T0 + timedelta(minutes=minute)
    engine.step(snap(queue_mins), now, now)


def count(metrics: Metrics, receiver: str, result: str) -> float:
    value = metrics.registry.get_sample_value(
        "ci_autoscaler_alert_notifications_total", {"receiver": receiver, "result": result}
    )
    return value or 0.0


def test_webhook_slack_pagerduty_alertmanager_webhook_fire_then_resolve(capture: Capture) -> None:
    engine, metrics = setup(
        [
            receiver("hook", "webhook", capture.url("/hook")),
            receiver("slack", "slack", capture.url("/slack")),
            receiver("pd", "pagerduty", capture.url("/pagerduty"), routing_key=Secret("rk-123")),
            receiver("am", "alertmanager_webhook", capture.url("/am")),
        ]
    )
    tick(engine, 0, 62)
    tick(engine, 1, 63)  # still firing: nothing new
    tick(engine, 2, 1)  # resolved

    fire, resolve = capture.bodies("/hook")
    assert fire["title"] == "[P2] Jobs queueing too long"
    assert fire["state"] == "FIRING" and resolve["state"] == "RESOLVED"
    assert fire["reason"] == (
        "max_queue_size=7, max_queue_time_mins=62, queue_size_threshold=0, "
        "queue_time_threshold=1, threshold_breached=1"
    )
    assert fire["values"]["max_queue_time_mins"] == 62
    assert fire["values"]["threshold_breached"] == 1
    assert fire["occurred_at"] == "2026-11-30T03:12:00Z"
    assert fire["text"].startswith("Occurred At: 2026-11-30 03:12:00 UTC\nState: FIRING\n")
    assert f"Fingerprint: {fire['fingerprint']}" in fire["text"]
    assert fire["runbook_url"] == "https://runbook.example/queue"
    assert resolve["occurred_at"] == "2026-11-30T03:14:00Z"

    s_fire, s_resolve = capture.bodies("/slack")
    assert "FIRING" in s_fire["text"] and "RESOLVED" in s_resolve["text"]
    assert s_fire["attachments"][0]["color"] != s_resolve["attachments"][0]["color"]

    p_fire, p_resolve = capture.bodies("/pagerduty")
    assert p_fire["event_action"] == "trigger" and p_resolve["event_action"] == "resolve"
    assert p_fire["dedup_key"] == p_resolve["dedup_key"] == fire["fingerprint"]
    assert p_fire["routing_key"] == "rk-123"
    assert p_fire["payload"]["severity"] == "error"
    assert p_fire["payload"]["source"] == "ci-autoscaler"

    a_fire, a_resolve = capture.bodies("/am")
    assert a_fire["version"] == "4" and a_fire["status"] == "firing"
    assert a_resolve["status"] == "resolved"
    assert a_fire["alerts"][0]["labels"]["alertname"] == "Jobs queueing too long"
    assert a_fire["alerts"][0]["endsAt"] == "0001-01-01T00:00:00Z"
    assert a_resolve["alerts"][0]["endsAt"] == "2026-11-30T03:14:00Z"
    for name in ("hook", "slack", "pd", "am"):
        assert count(metrics, name, "sent") == 2


def test_github_issue_opens_comments_on_repeat_and_closes(capture: Capture) -> None:
    gh = ReceiverConfig(
        name="gh",
        type="github_issue",
        url=capture.url("/api"),
        repo="pytorch/test-infra",
        labels=("ci",),
    )
    engine, _ = setup([gh], github_token=Secret("ghp-secret"))
    tick(engine, 0, 62)
    tick(engine, 61, 120)  # repeat_interval passed: a comment
    tick(engine, 62, 0)  # resolved: comment and close
    calls = [(r.method, r.path) for r in capture.requests]
    assert calls == [
        ("POST", "/api/repos/pytorch/test-infra/issues"),
        ("POST", "/api/repos/pytorch/test-infra/issues/42/comments"),
        ("POST", "/api/repos/pytorch/test-infra/issues/42/comments"),
        ("PATCH", "/api/repos/pytorch/test-infra/issues/42"),
    ]
    opened = capture.requests[0]
    assert opened.body["title"] == "[P2] Jobs queueing too long"
    assert opened.body["labels"] == ["team:pytorch-dev-infra", "priority:P2", "ci"]
    assert opened.headers["Authorization"] == "Bearer ghp-secret"
    assert capture.requests[3].body["state"] == "closed"
    fp = opened.body["body"].split("Fingerprint: ")[1].split()[0]
    assert engine.store.issue_number("gh", fp) is None


def test_down_receiver_keeps_its_outbox_and_others_still_get_theirs(capture: Capture) -> None:
    port = free_port()  # nothing listens here yet: connection refused
    down = receiver("down", "webhook", f"http://127.0.0.1:{port}/hook", max_attempts=3)
    engine, metrics = setup([down, receiver("up", "webhook", capture.url("/hook"))])
    tick(engine, 0, 62)
    assert len(capture.bodies("/hook")) == 1
    assert count(metrics, "down", "retried") == 2
    assert count(metrics, "down", "failed") == 1
    [item] = engine.store.pending()
    assert item.receiver == "down" and item.attempts == 1

    tick(engine, 1, 1)  # resolved while still down: FIRING and RESOLVED both wait, in order
    assert [i.notification.status for i in engine.store.pending()] == ["FIRING", "RESOLVED"]

    back, server = start(port)  # the receiver comes back
    try:
        tick(engine, 2, 1)
        assert [b["state"] for b in back.bodies("/hook")] == ["FIRING", "RESOLVED"]
        assert engine.store.pending() == []
        assert (
            metrics.registry.get_sample_value(
                "ci_autoscaler_alert_notifications_pending", {"receiver": "down"}
            )
            == 0
        )
    finally:
        server.shutdown()
        server.server_close()


def test_slow_receiver_times_out_without_holding_up_the_others(capture: Capture) -> None:
    slow = receiver("slow", "webhook", capture.url("/slow"), timeout=0.2, max_attempts=2)
    engine, metrics = setup([slow, receiver("fast", "webhook", capture.url("/hook"))])
    tick(engine, 0, 62)
    assert len(capture.bodies("/hook")) == 1
    assert count(metrics, "slow", "failed") == 1
    assert count(metrics, "slow", "retried") == 1
    assert [i.receiver for i in engine.store.pending()] == ["slow"]


def test_transient_5xx_is_retried_within_the_tick(capture: Capture) -> None:
    engine, metrics = setup([receiver("flaky", "webhook", capture.url("/flaky"))])
    tick(engine, 0, 62)
    assert count(metrics, "flaky", "retried") == 1
    assert count(metrics, "flaky", "sent") == 1
    assert engine.store.pending() == []


def test_permanent_4xx_is_rejected_logged_and_counted(capture: Capture) -> None:
    engine, metrics = setup([receiver("bad", "webhook", capture.url("/status/400"))])
    tick(engine, 0, 62)
    assert len(capture.bodies("/status/400")) == 1  # not retried
    assert count(metrics, "bad", "rejected") == 1
    assert engine.store.pending() == []


def test_deadline_returns_before_a_hung_receiver_and_collects_it_later(capture: Capture) -> None:
    hung = receiver("hung", "webhook", capture.url("/slow"), timeout=30.0)
    engine, _ = setup([hung], deadline=0.2)
    tick(engine, 0, 62)  # returns after the deadline; the request is still in flight
    assert [i.receiver for i in engine.store.pending()] == ["hung"]
    capture.release.set()
    deliverer = engine.deliverer
    assert deliverer is not None
    for _ in range(100):  # the in-flight task finishes; a later tick collects it
        deliverer.deliver(engine.store)
        if not engine.store.pending():
            break
        threading.Event().wait(0.05)
    assert len(capture.bodies("/slow")) == 1  # sent once, never in parallel twice
    assert engine.store.pending() == []


def test_dry_run_deliverer_sends_nothing(capture: Capture) -> None:
    engine, metrics = setup([receiver("hook", "webhook", capture.url("/hook"))], dry_run=True)
    tick(engine, 0, 62)
    assert capture.requests == []
    assert count(metrics, "hook", "dry_run") == 1


@pytest.mark.parametrize(
    "rtype", ["webhook", "slack", "alertmanager", "alertmanager_webhook", "github_issue"]
)
def test_send_test_sends_firing_then_resolved(capture: Capture, rtype: str) -> None:
    rc = receiver("r", rtype, capture.url("/t"), repo="o/r")
    deliverer = Deliverer({"r": rc}, Metrics(CollectorRegistry()), sleep=lambda _: None)
    assert send_test(rc, T0, deliverer) == {"FIRING": "sent", "RESOLVED": "sent"}
    assert len(capture.requests) == (3 if rtype == "github_issue" else 2)

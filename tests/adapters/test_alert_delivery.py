"""Every receiver type against a real HTTP capture server on 127.0.0.1 (the github_issue
receiver against the fake GitHub), plus one receiver that is down (connection refused),
one that fails transiently, one that never answers.

Delivery runs off the tick (rounds in daemon threads): each test waits for the rounds with
``Deliverer.flush``, a condition with a deadline, never a bare sleep.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from autoscaler.alerting.delivery import Deliverer
from autoscaler.alerting.engine import AlertEngine, send_test
from autoscaler.config import AlertRuleConfig, AlertsConfig, BuiltinAlertsConfig, ReceiverConfig
from autoscaler.domain import QueueSnapshot, QueueStats, RunnerCounts
from autoscaler.fakes.github import FakeGitHub
from autoscaler.secrets import Secret, SecretUrl
from autoscaler.telemetry import Metrics
from tests.factories import alert_engine

T0 = datetime(2026, 11, 30, 3, 12, tzinfo=UTC)


@dataclass
class Captured:
    method: str
    path: str
    body: Any
    headers: dict[str, str]


@dataclass
class Capture:
    """A local HTTP server that records requests. /status/NNN answers NNN; /flaky fails
    with 503 once; a GET of .../issues answers an empty list."""

    port: int
    requests: list[Captured] = field(default_factory=list)
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
            data = json.dumps({} if body is None else body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"null")
            if self.path.startswith("/flaky") and not cap.flaky_failed:
                cap.flaky_failed = True
                self._reply(503)
                return
            cap.requests.append(Captured(self.command, self.path, body, dict(self.headers)))
            if self.path.startswith("/status/"):
                self._reply(int(self.path.rsplit("/", 1)[1]))
            elif self.command == "GET":
                self._reply(200, [])
            elif self.command == "POST" and self.path.endswith("/issues"):
                self._reply(201, {"number": 42})
            else:
                self._reply(202 if "pagerduty" in self.path else 200, {"status": "success"})

        do_GET = do_POST = do_PATCH = _handle

    return Handler


def bound_server() -> tuple[Capture, ThreadingHTTPServer]:
    """A capture server bound to a port the system picked (port 0, read back), not yet
    listening: connections to it are refused until :func:`serve` activates it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler, bind_and_activate=False)
    server.server_bind()
    cap = Capture(server.server_address[1])
    server.RequestHandlerClass = _handler(cap)
    server.daemon_threads = True
    return cap, server


def serve(server: ThreadingHTTPServer) -> None:
    server.server_activate()
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()


@pytest.fixture
def capture() -> Iterator[Capture]:
    cap, server = bound_server()
    serve(server)
    yield cap
    server.shutdown()
    server.server_close()


@contextmanager
def tarpit() -> Iterator[str]:
    """A receiver that accepts every connection and never answers a byte."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/hook"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()


def receiver(name: str, rtype: str, url: str, **kw: Any) -> ReceiverConfig:
    return ReceiverConfig(name=name, type=rtype, url=SecretUrl(url), **kw)


RULE = AlertRuleConfig(
    name="Jobs queueing too long",
    team="pytorch-dev-infra",
    priority="P2",
    description="Jobs wait too long for a runner",
    receivers=(),
    max_queue_size=10,
    max_queue_time=3600.0,
    repeat_interval=3600.0,
    runbook_url="https://runbook.example/queue",
    dashboard_url="https://grafana.example/d/ci",
)


def setup(receivers: list[ReceiverConfig], **deliverer_kw: Any) -> tuple[AlertEngine, Metrics]:
    rule = AlertRuleConfig(**{**RULE.__dict__, "receivers": tuple(r.name for r in receivers)})
    config = AlertsConfig(
        rules=(rule,),
        receivers={r.name: r for r in receivers},
        builtin=BuiltinAlertsConfig(unmatched_jobs=False, github_unreachable_after=0),
    )
    metrics = Metrics(CollectorRegistry())
    deliverer_kw.setdefault("sleep", lambda _: None)
    deliverer = Deliverer(config.receivers, metrics, **deliverer_kw)
    return alert_engine(config, metrics=metrics, deliverer=deliverer), metrics


def snap(minutes: float) -> QueueSnapshot:
    stats = QueueStats(
        "linux.4xlarge", 7, minutes * 60, RunnerCounts(), queued_ages_seconds=(minutes * 60,) * 7
    )
    return QueueSnapshot(T0, {"linux.4xlarge": stats}, unmatched_jobs=0, ghost_jobs=0)


def tick(engine: AlertEngine, minute: int, queue_mins: float) -> None:
    """One tick, then wait (bounded) for the delivery rounds it started."""
    now = T0 + timedelta(minutes=minute)
    engine.step(snap(queue_mins), now, now)
    assert engine.deliverer is not None
    assert engine.deliverer.flush(10.0), "delivery rounds did not finish within 10 s"


def count(metrics: Metrics, receiver: str, result: str) -> float:
    value = metrics.registry.get_sample_value(
        "ci_autoscaler_alert_notifications_total", {"receiver": receiver, "result": result}
    )
    return value or 0.0


def wait_until(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds}s waiting for {what}")
        threading.Event().wait(0.01)


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
    assert a_fire["alerts"][0]["labels"]["alertname"] == "JobsQueueingTooLong"
    assert a_fire["alerts"][0]["endsAt"] == "0001-01-01T00:00:00Z"
    assert a_resolve["alerts"][0]["endsAt"] == "2026-11-30T03:14:00Z"
    for name in ("hook", "slack", "pd", "am"):
        assert count(metrics, name, "sent") == 2


def test_every_payload_carries_the_event_id_and_a_retry_repeats_it(capture: Capture) -> None:
    """Delivery is at least once: a receiver dedupes on event_id, which every format
    carries where it can, which a retried delivery repeats, and which differs between
    FIRING, RESOLVED and a repeat FIRING."""
    engine, _ = setup(
        [
            receiver("hook", "webhook", capture.url("/flaky")),  # 503 first: retried
            receiver("slack", "slack", capture.url("/slack")),
            receiver("pd", "pagerduty", capture.url("/pagerduty"), routing_key=Secret("k")),
        ]
    )
    tick(engine, 0, 62)
    tick(engine, 61, 62)  # repeat_interval (1 h) passed: a repeat FIRING
    tick(engine, 62, 1)
    fire, repeat, resolve = capture.bodies("/flaky")
    ids = [fire["event_id"], repeat["event_id"], resolve["event_id"]]
    assert len(set(ids)) == 3 and all(len(i) == 16 for i in ids)
    assert repeat["repeat"] is True
    slack = capture.bodies("/slack")
    assert [s["metadata"]["event_payload"]["event_id"] for s in slack] == ids
    assert all(i in json.dumps(s["attachments"]) for i, s in zip(ids, slack, strict=True))
    pd_fire, pd_repeat, _ = capture.bodies("/pagerduty")
    assert [
        pd_fire["payload"]["custom_details"]["event_id"],
        pd_repeat["payload"]["custom_details"]["event_id"],
    ] == ids[:2]


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    fake = FakeGitHub(owner="pytorch", token="ghp-secret")
    fake.add_repo("test-infra")
    with fake:
        yield fake


def issue_receiver(fake: FakeGitHub) -> ReceiverConfig:
    return ReceiverConfig(
        name="gh",
        type="github_issue",
        url=SecretUrl(fake.url),
        repo="pytorch/test-infra",
        labels=("ci",),
    )


def test_github_issue_opens_comments_on_repeat_and_closes(github: FakeGitHub) -> None:
    engine, _ = setup([issue_receiver(github)], github_token=Secret("ghp-secret"))
    tick(engine, 0, 62)
    tick(engine, 61, 120)  # repeat_interval passed: a comment
    tick(engine, 62, 0)  # resolved: comment and close
    [issue] = github.issues("test-infra")
    assert issue.title == "[P2] Jobs queueing too long"
    assert issue.labels == ("team:pytorch-dev-infra", "priority:P2", "ci")
    assert len(issue.comments) == 2
    assert issue.comments[0].startswith("**Still firing**")
    assert issue.comments[1].startswith("**Resolved**")
    assert (issue.state, issue.state_reason) == ("closed", "completed")
    assert "<!-- ci-autoscaler fingerprint=" in (issue.body or "")
    fp = (issue.body or "").split("Fingerprint: ")[1].split()[0]
    assert engine.store.issue_number("gh", fp) is None
    writes = [(r.method, r.path) for r in github.requests if r.method != "GET"]
    assert writes == [
        ("POST", "/repos/pytorch/test-infra/issues"),
        ("POST", "/repos/pytorch/test-infra/issues/1/comments"),
        ("POST", "/repos/pytorch/test-infra/issues/1/comments"),
        ("PATCH", "/repos/pytorch/test-infra/issues/1"),
    ]


def test_github_issue_whose_create_answer_was_lost_is_not_opened_twice(
    github: FakeGitHub,
) -> None:
    """The create request reached GitHub and opened the issue; its answer never came back
    (the same as a crash between delivery and recording it). Retrying the POST blind, or
    the next tick resending it, opened a second issue. Now the create is not retried
    within the round and the next round finds the open issue by its marker first."""
    lost: list[str] = []

    def lose_first_create(method: str, path: str, status: int) -> bool:
        if method == "POST" and path.endswith("/issues") and not lost:
            lost.append(path)
            return True
        return False

    github.before_reply = lose_first_create
    engine, metrics = setup([issue_receiver(github)], github_token=Secret("ghp-secret"))
    tick(engine, 0, 62)
    assert len(github.issues("test-infra")) == 1  # opened, though we never heard back
    assert count(metrics, "gh", "failed") == 1
    tick(engine, 1, 62)  # the outbox item goes again: found, adopted, not reopened
    [issue] = github.issues("test-infra")
    assert issue.comments == []  # the issue already says what this notification says
    assert engine.store.pending() == []
    tick(engine, 2, 0)
    assert github.issues("test-infra")[0].state == "closed"


def test_github_issue_resolved_without_a_record_closes_the_open_issue(
    github: FakeGitHub,
) -> None:
    """The issue number was lost with the state (a new state file): RESOLVED still closes
    the issue it finds by the alert's marker."""
    engine, _ = setup([issue_receiver(github)], github_token=Secret("ghp-secret"))
    tick(engine, 0, 62)
    [issue] = github.issues("test-infra")
    fp = (issue.body or "").split("Fingerprint: ")[1].split()[0]
    engine.store.set_issue_number("gh", fp, None)
    tick(engine, 1, 0)
    [issue] = github.issues("test-infra")
    assert issue.state == "closed" and issue.comments[0].startswith("**Resolved**")


def test_down_receiver_keeps_its_outbox_and_others_still_get_theirs(capture: Capture) -> None:
    back, server = bound_server()  # nothing listens yet: connection refused
    down = receiver("down", "webhook", back.url("/hook"), max_attempts=3)
    engine, metrics = setup([down, receiver("up", "webhook", capture.url("/hook"))])
    try:
        tick(engine, 0, 62)
        assert len(capture.bodies("/hook")) == 1
        assert count(metrics, "down", "retried") == 2
        assert count(metrics, "down", "failed") == 1
        [item] = engine.store.pending()
        assert item.receiver == "down" and item.attempts == 1

        tick(engine, 1, 1)  # resolved while still down: FIRING and RESOLVED both wait
        assert [i.notification.status for i in engine.store.pending()] == ["FIRING", "RESOLVED"]

        serve(server)  # the receiver comes back
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


def test_a_timeout_is_transient_retried_then_left_for_the_next_round(capture: Capture) -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/slow":
            raise httpx.ReadTimeout("no answer", request=request)
        return httpx.Response(200)

    slow_rc = receiver("slow", "webhook", "http://127.0.0.1:9/slow", max_attempts=2)
    fast_rc = receiver("fast", "webhook", "http://127.0.0.1:9/fast")
    engine, metrics = setup([slow_rc, fast_rc], transport=httpx.MockTransport(slow))
    tick(engine, 0, 62)
    assert count(metrics, "fast", "sent") == 1
    assert count(metrics, "slow", "failed") == 1
    assert count(metrics, "slow", "retried") == 1
    assert [i.receiver for i in engine.store.pending()] == ["slow"]


def test_a_hung_receiver_never_blocks_the_tick(capture: Capture) -> None:
    """The story: a receiver that accepted the connection and never
    answered held the tick for the deliverer's whole deadline every time a round started,
    and ``once`` could not exit before timeout x attempts (its worker threads were joined
    at exit), though the README promised delivery never blocks the tick.

    Now the tick returns at once, other receivers get theirs while the hung one hangs, and
    the hung round ends by its own overall deadline (2 s here), before even one of its 5 s
    timeouts, let alone 3 attempts of them."""
    with tarpit() as url:
        hung = receiver("hung", "webhook", url, timeout=5.0, max_attempts=3)
        engine, metrics = setup(
            [hung, receiver("fast", "webhook", capture.url("/hook"))], deadline=2.0
        )
        deliverer = engine.deliverer
        assert deliverer is not None
        started = time.monotonic()
        engine.step(snap(62), T0, T0)
        tick_seconds = time.monotonic() - started
        assert tick_seconds < 0.5, f"the tick waited {tick_seconds:.2f}s for delivery"

        # the fast receiver's delivery is recorded while the hung one still hangs
        def owed() -> list[str]:
            return [i.receiver for i in engine.store.pending()]

        wait_until(lambda: owed() == ["hung"], 5, "the fast receiver's delivery recorded")
        assert len(capture.bodies("/hook")) == 1
        assert count(metrics, "hung", "failed") == 0, "the hung round ended before its deadline"

        assert deliverer.flush(4.0), "the hung round outlived its own deadline"
        round_seconds = time.monotonic() - started
        assert round_seconds < hung.timeout, f"the hung round took {round_seconds:.2f}s"
        assert count(metrics, "hung", "failed") == 1
        [item] = engine.store.pending()
        assert (item.receiver, item.attempts) == ("hung", 1)


def test_close_waits_at_most_the_deadline_and_keeps_what_it_did_not_confirm() -> None:
    with tarpit() as url:
        engine, _ = setup([receiver("hung", "webhook", url, timeout=30.0)], deadline=0.5)
        deliverer = engine.deliverer
        assert deliverer is not None
        engine.step(snap(62), T0, T0)
        started = time.monotonic()
        deliverer.close()
        assert time.monotonic() - started < 5.0
        assert [i.receiver for i in engine.store.pending()] == ["hung"]


def test_transient_5xx_is_retried_within_the_round(capture: Capture) -> None:
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
    # github_issue: look for an open issue, open one, comment and close it
    assert len(capture.requests) == (4 if rtype == "github_issue" else 2)

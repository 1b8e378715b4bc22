"""Receiver URLs are secrets: never in a log line (ours or httpx's, at DEBUG), an error, a
metric or a repr.

Story: with ``--log-level debug`` httpx logged ``HTTP Request: POST
http://alice:s3cr3t@host/services/T0.../B0.../...``: a webhook's basic-auth password and
a Slack webhook's secret path, in the log of every delivery.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from autoscaler.alerting.alertmanager_sync import AlertmanagerSync
from autoscaler.alerting.delivery import Deliverer
from autoscaler.alerting.engine import AlertEngine
from autoscaler.config import AlertRuleConfig, AlertsConfig, BuiltinAlertsConfig, ReceiverConfig
from autoscaler.domain import QueueSnapshot, QueueStats, RunnerCounts
from autoscaler.secrets import SecretUrl
from autoscaler.telemetry import Metrics
from tests.factories import alert_engine

T0 = datetime(2026, 11, 30, 3, 12, tzinfo=UTC)
SECRETS = ("alice", "s3cr3t-pa55", "T0SECRETTEAM", "B0SECRETHOOK", "pathKey9x", "q-t0ken")


class _Handler(BaseHTTPRequestHandler):
    """200 for /ok..., 500 for /down..., 400 for /bad...; every request counted."""

    hits: list[str] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.hits.append(self.path)
        code = (
            500 if self.path.startswith("/down") else 400 if self.path.startswith("/bad") else 200
        )
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def server() -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 (so httpcore's connection log runs too)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield f"127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def refused() -> Iterator[str]:
    """A port that is bound but not listening: connecting is refused, and nobody else can
    take the port while the test runs."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    yield f"127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


def _receivers(server: str, refused: str) -> list[ReceiverConfig]:
    auth = "alice:s3cr3t-pa55@"
    secret_path = "/services/T0SECRETTEAM/B0SECRETHOOK/pathKey9x?token=q-t0ken"
    return [
        ReceiverConfig(
            name="hook", type="webhook", url=SecretUrl(f"http://{auth}{server}/ok{secret_path}")
        ),
        ReceiverConfig(
            name="slack", type="slack", url=SecretUrl(f"http://{server}/down{secret_path}")
        ),
        ReceiverConfig(
            name="gone", type="webhook", url=SecretUrl(f"http://{auth}{refused}{secret_path}")
        ),
        ReceiverConfig(
            name="bad",
            type="alertmanager_webhook",
            url=SecretUrl(f"http://{auth}{server}/bad{secret_path}"),
        ),
        ReceiverConfig(  # Alertmanager's API, posted beside the outbox
            name="am",
            type="alertmanager",
            url=SecretUrl(f"http://{auth}{server}/ok/am{secret_path}"),
            urls=(SecretUrl(f"http://{auth}{server}/ok/am{secret_path}"),),
        ),
    ]


def _engine(
    receivers: list[ReceiverConfig], metrics: Metrics
) -> tuple[AlertEngine, Deliverer, AlertmanagerSync]:
    rule = AlertRuleConfig(
        name="Jobs queueing too long",
        team="dev-infra",
        priority="P2",
        description="Jobs wait too long",
        receivers=tuple(r.name for r in receivers),
        max_queue_size=1,
    )
    config = AlertsConfig(
        rules=(rule,),
        receivers={r.name: r for r in receivers},
        builtin=BuiltinAlertsConfig(unmatched_jobs=False, github_unreachable_after=0),
    )
    deliverer = Deliverer(config.receivers, metrics, sleep=lambda _: None, deadline=20.0)
    sync = AlertmanagerSync(config.receivers, metrics)
    engine = alert_engine(config, metrics=metrics, deliverer=deliverer, alertmanager=sync)
    return engine, deliverer, sync


def _snapshot(queued: int) -> QueueSnapshot:
    stats = QueueStats("cpu", queued, 60.0, RunnerCounts(), queued_ages_seconds=(60.0,) * queued)
    return QueueSnapshot(T0, {"cpu": stats}, unmatched_jobs=0, ghost_jobs=0)


def test_no_receiver_url_secret_reaches_logs_errors_metrics_or_reprs(
    server: str, refused: str, caplog: pytest.LogCaptureFixture
) -> None:
    for name in (None, "httpx", "httpcore"):  # --log-level debug, as the story ran it
        caplog.set_level(logging.DEBUG, logger=name)
    metrics = Metrics(CollectorRegistry())
    receivers = _receivers(server, refused)
    engine, deliverer, sync = _engine(receivers, metrics)
    _Handler.hits = []
    try:
        engine.step(_snapshot(5), T0, T0)  # FIRING to all four
        deliverer.flush(timeout=20.0)  # delivery runs off the tick: wait for its rounds
        later = T0 + timedelta(minutes=5)
        engine.step(_snapshot(0), later, later)  # RESOLVED (and the failed ones again)
        deliverer.flush(timeout=20.0)
        sync.close(timeout=20.0)  # waits for the Alertmanager posts
    finally:
        deliverer.close()
    # Every kind of outcome happened: sent, failed after retries, refused, rejected.
    assert any(h.startswith("/ok/services/") for h in _Handler.hits)
    assert any(h.startswith("/down/services/") for h in _Handler.hits)
    assert any(h.startswith("/bad/services/") for h in _Handler.hits)
    assert any(h.startswith("/ok/am/services/") for h in _Handler.hits)
    sample = metrics.registry.get_sample_value
    for receiver, result in (("hook", "sent"), ("slack", "failed"), ("gone", "failed")):
        labels = {"receiver": receiver, "result": result}
        assert sample("ci_autoscaler_alert_notifications_total", labels), labels
    assert sample(
        "ci_autoscaler_alert_notifications_total", {"receiver": "bad", "result": "rejected"}
    )
    # Control: httpx's request log is captured at DEBUG for any other client...
    httpx.post(f"http://{server}/ok/control", content=b"")
    assert "HTTP Request: POST http://" in caplog.text and "/ok/control" in caplog.text
    # ...our own lines name the receivers...
    assert "to slack failed" in caplog.text and "to bad rejected" in caplog.text
    assert [i.last_error for i in engine.store.pending()], "no failed item kept its error"
    # ...and no secret part of a receiver URL is anywhere.
    places = {
        "log": caplog.text,
        "errors": "\n".join(item.last_error or "" for item in engine.store.pending()),
        "metrics": generate_latest(metrics.registry).decode(),
        "reprs": repr(receivers) + str([r.url for r in receivers]),
    }
    for where, text in places.items():
        for secret in SECRETS:
            assert secret not in text, f"{secret!r} leaked into {where}"

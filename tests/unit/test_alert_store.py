"""Restart continuity: a second engine on the same SQLite file neither re-pages nor forgets
to resolve, and an undelivered notification survives the restart."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry

from autoscaler.alerting.delivery import Deliverer
from autoscaler.alerting.engine import AlertEngine
from autoscaler.config import AlertRuleConfig, AlertsConfig, BuiltinAlertsConfig, ReceiverConfig
from autoscaler.domain import QueueSnapshot, QueueStats, RunnerCounts
from autoscaler.secrets import SecretUrl
from autoscaler.state.sqlite import SqliteStore
from autoscaler.telemetry import Metrics
from tests.factories import alert_engine

T0 = datetime(2026, 11, 30, 3, 12, tzinfo=UTC)
RULE = AlertRuleConfig(
    name="Jobs queueing too long",
    team="pytorch-dev-infra",
    priority="P2",
    description="Jobs wait too long for a runner",
    receivers=("oncall",),
    max_queue_size=10,
    max_queue_time=3600.0,
)
CONFIG = AlertsConfig(
    rules=(RULE,),
    receivers={
        "oncall": ReceiverConfig(
            name="oncall", type="webhook", url=SecretUrl("http://127.0.0.1:9/hook"), max_attempts=1
        )
    },
    builtin=BuiltinAlertsConfig(unmatched_jobs=False, github_unreachable_after=0),
)


def snap(now: datetime, mins: float) -> QueueSnapshot:
    stats = QueueStats(
        "linux.4xlarge", 7, mins * 60, RunnerCounts(), queued_ages_seconds=(mins * 60,) * 7
    )
    return QueueSnapshot(now, {"linux.4xlarge": stats}, unmatched_jobs=0, ghost_jobs=0)


class Capture:
    """A MockTransport handler that records states, or refuses while ``down``."""

    def __init__(self) -> None:
        self.states: list[str] = []
        self.down = False

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("refused", request=request)
        self.states.append(json.loads(request.content)["state"])
        return httpx.Response(200)


def engine(path: Path, capture: Capture) -> AlertEngine:
    metrics = Metrics(CollectorRegistry())
    deliverer = Deliverer(
        CONFIG.receivers, metrics, transport=httpx.MockTransport(capture), sleep=lambda _: None
    )
    return alert_engine(CONFIG, store=SqliteStore(path), metrics=metrics, deliverer=deliverer)


def stop(e: AlertEngine) -> None:
    """Shut down as the CLI does: delivery first (bounded), then the store."""
    assert e.deliverer is not None
    e.deliverer.close()
    assert isinstance(e.store, SqliteStore)
    e.store.close()


def step(e: AlertEngine, snapshot: QueueSnapshot, now: datetime) -> list[str]:
    """One tick, waiting (bounded) for its delivery rounds; the views' states."""
    views = e.step(snapshot, T0, now)
    assert e.deliverer is not None and e.deliverer.flush(10.0)
    return [v.state for v in views]


def test_restart_sends_no_second_firing_and_still_resolves(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    capture = Capture()
    first = engine(db, capture)
    assert step(first, snap(T0, 62), T0) == ["firing"]
    stop(first)

    second = engine(db, capture)
    assert step(second, snap(T0 + timedelta(minutes=1), 63), T0 + timedelta(minutes=1)) == [
        "firing"
    ]
    step(second, snap(T0 + timedelta(minutes=2), 1), T0 + timedelta(minutes=2))
    assert capture.states == ["FIRING", "RESOLVED"]


def test_undelivered_notification_survives_restart(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    capture = Capture()
    capture.down = True
    first = engine(db, capture)
    step(first, snap(T0, 62), T0)
    assert [i.notification.status for i in first.store.pending()] == ["FIRING"]
    stop(first)

    capture.down = False
    second = engine(db, capture)
    step(second, snap(T0 + timedelta(minutes=1), 62), T0 + timedelta(minutes=1))
    assert capture.states == ["FIRING"]
    assert second.store.pending() == []


def test_dry_run_persists_and_sends_nothing(tmp_path: Path) -> None:
    capture = Capture()
    e = engine(tmp_path / "state.db", capture)
    views = e.step(snap(T0, 62), T0, T0, dry_run=True)
    assert [v.state for v in views] == ["firing"]
    assert "State: FIRING" in views[0].text
    assert e.store.load_states() == {} and e.store.pending() == []
    step(e, snap(T0, 62), T0)
    assert capture.states == ["FIRING"]


def test_memory_store_roundtrips_issue_numbers() -> None:
    store = SqliteStore(None)
    store.set_issue_number("gh", "abc", 12)
    assert store.issue_number("gh", "abc") == 12
    store.set_issue_number("gh", "abc", None)
    assert store.issue_number("gh", "abc") is None

"""The built-in "GitHub repositories not listed" alert: it fires while the poll leaves
watched repositories out (no listing of them at all), holds while no poll came in, and
resolves once each is listed."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import httpx

from autoscaler.alerting.builtin_rules import UNLISTED_RULE, evaluate_unlisted
from autoscaler.alerting.delivery import Deliverer
from autoscaler.alerting.engine import AlertEngine
from autoscaler.config import AlertsConfig, BuiltinAlertsConfig, ReceiverConfig
from autoscaler.secrets import SecretUrl
from autoscaler.state.sqlite import SqliteStore
from autoscaler.telemetry import Metrics

T0 = datetime(2026, 11, 30, 3, 12, tzinfo=UTC)
BUILTIN = BuiltinAlertsConfig(team="dev-infra", unmatched_jobs=False, github_budget=False)


def test_the_evaluation_counts_the_repositories_left_out() -> None:
    evaluation = evaluate_unlisted(BUILTIN, ["gpu", "infra"], ("oncall",))
    assert evaluation.rule == UNLISTED_RULE
    assert dict(evaluation.values) == {"unlisted_repos": 2, "threshold_breached": 1}
    assert "explain" in evaluation.description
    assert not evaluate_unlisted(BUILTIN, [], ("oncall",)).breached


def test_fires_once_holds_without_a_poll_and_resolves() -> None:
    sent: list[tuple[str, str]] = []

    def capture(request: httpx.Request) -> httpx.Response:
        doc = json.loads(request.content)
        sent.append((doc["state"], doc["title"]))
        return httpx.Response(200)

    receivers = {
        "oncall": ReceiverConfig(name="oncall", type="webhook", url=SecretUrl("http://127.0.0.1:9"))
    }
    config = AlertsConfig(receivers=receivers, builtin=BUILTIN)
    metrics = Metrics()
    deliverer = Deliverer(receivers, metrics, transport=httpx.MockTransport(capture))
    engine = AlertEngine(config, SqliteStore(None), deliverer, metrics)
    try:
        tick = [T0 + timedelta(seconds=30 * i) for i in range(4)]
        for at, unlisted in zip(tick, (["gpu"], ["gpu"], None), strict=False):
            engine.step(None, at, at, unlisted=unlisted)  # None: this tick's poll failed
            deliverer.flush()  # delivery runs off the tick: wait for its round
        assert sent == [("FIRING", "[P2] GitHub repositories not listed")]
        engine.step(None, tick[3], tick[3], unlisted=[])
        deliverer.flush()
        assert [s for s, _ in sent] == ["FIRING", "RESOLVED"]
    finally:
        deliverer.close()


def test_off_with_the_unreachable_alert() -> None:
    config = AlertsConfig(builtin=BuiltinAlertsConfig(github_unreachable_after=0))
    engine = AlertEngine(config, SqliteStore(None), None, Metrics())
    evaluations, keep = engine.evaluate(None, T0, T0, unlisted=["gpu"])
    assert UNLISTED_RULE not in {e.rule for e in evaluations} | keep

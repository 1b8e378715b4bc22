"""The built-in "GitHub budget too small for this org" alert: it fires when the rate-limit
budget stretches the repositories with queued jobs, holds while no plan is known, and
resolves when the plan fits again."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import httpx

from autoscaler.alerting.builtin_rules import BUDGET_RULE, evaluate_budget
from autoscaler.config import AlertsConfig, BuiltinAlertsConfig
from autoscaler.domain import PollBudget
from tests.factories import alert_engine, oncall, paging

T0 = datetime(2026, 11, 30, 3, 12, tzinfo=UTC)
BUILTIN = BuiltinAlertsConfig(team="dev-infra", unmatched_jobs=False, github_unreachable_after=0)
TIGHT = PollBudget(30.0, 90.0, 900.0, 4000.0, 36000.0, True)
FITS = PollBudget(30.0, 30.0, 30.0, 4000.0, 2000.0, False)


def test_budget_evaluation_names_the_numbers_and_points_at_webhooks() -> None:
    evaluation = evaluate_budget(BUILTIN, TIGHT, ("oncall",))
    assert evaluation.rule == BUDGET_RULE == "GitHub budget too small for this org"
    assert dict(evaluation.values) == {
        "poll_interval_seconds": 30,
        "busy_interval_seconds": 90,
        "budget_requests_per_hour": 4000,
        "needed_requests_per_hour": 36000,
        "threshold_breached": 1,
    }
    assert "every 90s" in evaluation.description
    assert "webhook" in evaluation.description
    assert not evaluate_budget(BUILTIN, FITS, ("oncall",)).breached


def test_fires_once_holds_without_a_plan_and_resolves() -> None:
    sent: list[tuple[str, str]] = []

    def capture(request: httpx.Request) -> httpx.Response:
        doc = json.loads(request.content)
        sent.append((doc["state"], doc["title"]))
        return httpx.Response(200)

    with paging(oncall(BUILTIN), capture) as (engine, deliverer):
        tick = [T0 + timedelta(seconds=30 * i) for i in range(4)]
        engine.step(None, T0, tick[0], budget=TIGHT)
        deliverer.flush()  # delivery runs off the tick: wait for its round
        engine.step(None, T0, tick[1], budget=TIGHT)  # still too small: no second page
        deliverer.flush()  # delivery runs off the tick: wait for its round
        engine.step(None, T0, tick[2], budget=None)  # the poll failed: unknown, held
        deliverer.flush()  # delivery runs off the tick: wait for its round
        assert sent == [("FIRING", "[P2] GitHub budget too small for this org")]
        engine.step(None, T0, tick[3], budget=FITS)
        deliverer.flush()  # delivery runs off the tick: wait for its round
        assert [s for s, _ in sent] == ["FIRING", "RESOLVED"]


def test_the_alert_can_be_switched_off() -> None:
    config = AlertsConfig(builtin=BuiltinAlertsConfig(github_budget=False))
    engine = alert_engine(config)
    evaluations, keep = engine.evaluate(None, T0, T0, budget=TIGHT)
    assert BUDGET_RULE not in {e.rule for e in evaluations} | keep

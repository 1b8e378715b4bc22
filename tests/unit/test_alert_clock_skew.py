"""The built-in clock skew alert: GitHub's or AWS's clock more than a minute from ours."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from autoscaler.alerting.builtin_rules import CLOCK_SKEW_RULE, evaluate_clock_skew
from autoscaler.config import AlertsConfig, BuiltinAlertsConfig
from autoscaler.domain import ClockSkew
from tests.factories import alert_engine, oncall, paging

T0 = datetime(2026, 11, 30, 3, 12, tzinfo=UTC)
BUILTIN = BuiltinAlertsConfig(team="dev-infra", unmatched_jobs=False, github_unreachable_after=0)


@pytest.mark.parametrize(
    ("skew", "values"),
    [
        pytest.param(ClockSkew(github=0.4, aws=-1.2), (0, -1, 0), id="in-step"),
        pytest.param(ClockSkew(github=60.0, aws=0.0), (60, 0, 0), id="a-minute-is-not-past"),
        pytest.param(ClockSkew(github=61.5), (62, 0, 1), id="github-ahead"),
        pytest.param(ClockSkew(github=2.0, aws=-95.0), (2, -95, 1), id="aws-behind"),
        pytest.param(ClockSkew(aws=None, github=-3600.0), (-3600, 0, 1), id="an-hour-off"),
    ],
)
def test_clock_skew_evaluation(skew: ClockSkew, values: tuple[int, int, int]) -> None:
    ev = evaluate_clock_skew(BUILTIN, skew, ("oncall",))
    assert ev.rule == CLOCK_SKEW_RULE
    github, aws, breached = values
    assert dict(ev.values) == {
        "github_clock_skew_seconds": github,
        "aws_clock_skew_seconds": aws,
        "clock_skew_threshold_seconds": 60,
        "threshold_breached": breached,
    }


def test_fires_past_a_minute_resolves_and_holds_while_unmeasured() -> None:
    sent: list[tuple[str, str]] = []

    def capture(request: httpx.Request) -> httpx.Response:
        doc = json.loads(request.content)
        sent.append((doc["state"], doc["reason"]))
        return httpx.Response(200)

    with paging(oncall(BUILTIN), capture) as (engine, deliverer):
        tick = [T0 + timedelta(seconds=30 * i) for i in range(5)]
        engine.step(None, T0, tick[0], clock_skew=ClockSkew(github=1.0, aws=0.0))
        deliverer.flush()  # delivery runs off the tick: wait for its round
        engine.step(None, T0, tick[1], clock_skew=ClockSkew(github=1.0, aws=-95.0))
        deliverer.flush()  # delivery runs off the tick: wait for its round
        engine.step(None, T0, tick[2], clock_skew=ClockSkew())  # nothing measured: held
        deliverer.flush()  # delivery runs off the tick: wait for its round
        engine.step(None, T0, tick[3], clock_skew=None)
        deliverer.flush()  # delivery runs off the tick: wait for its round
        assert [s for s, _ in sent] == ["FIRING"]
        assert "aws_clock_skew_seconds=-95" in sent[0][1]
        engine.step(None, T0, tick[4], clock_skew=ClockSkew(github=1.0, aws=-2.0))
        deliverer.flush()  # delivery runs off the tick: wait for its round
        assert [s for s, _ in sent] == ["FIRING", "RESOLVED"]


def test_zero_turns_the_alert_off() -> None:
    off = AlertsConfig(builtin=BuiltinAlertsConfig(clock_skew_max=0, github_unreachable_after=0))
    engine = alert_engine(off)
    evaluations, keep = engine.evaluate(None, T0, T0, [], clock_skew=ClockSkew(github=3600.0))
    assert CLOCK_SKEW_RULE not in {e.rule for e in evaluations} | keep

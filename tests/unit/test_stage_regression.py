"""The alert that names the stage of a wait that regressed.

The story: the page showed a type's queue time growing, and on-call had to guess where the
time went (GitHub, our decision, EC2, the boot, the assignment). The alert compares each
stage's p95 over the last hour with the day before it and names the one that grew:
"boot p95 for gpu went from 95 s to 240 s over the last hour". One slow job, a quiet
window, or a few-second stage doubling pages nobody.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from autoscaler.alerting.builtin_rules import STAGE_RULE, evaluate_stage_regressions
from autoscaler.alerting.lifecycle import Notification
from autoscaler.alerting.render import text, title
from autoscaler.config import BuiltinAlertsConfig, StageRegressionConfig
from autoscaler.domain import STAGES, JobWait
from autoscaler.observe.waits import RecentWaits, StageRegression, stage_regressions
from tests.factories import config_doc, config_problems, load_config, oncall, paging

NOW = datetime(2026, 11, 30, 3, 12, tzinfo=UTC)
RULE = StageRegressionConfig()
BOOT = STAGES.index("boot")


def waits(
    n: int, boot: float, *, ago: float, runner_type: str = "gpu", slow: int = 0
) -> list[JobWait]:
    """``n`` jobs of ``runner_type`` started ``ago`` seconds before NOW (spread over the
    next minutes), booting ``boot`` seconds each; the last ``slow`` boot 600 s."""
    out = []
    for i in range(n):
        seconds = 600.0 if i >= n - slow else boot
        stages = (2.0, 1.0, 20.0, seconds, 3.0)
        at = NOW - timedelta(seconds=ago - i * 30)
        out.append(JobWait(runner_type, stages, started_at=at))
    return out


def day_before(n: int = 40, boot: float = 95.0) -> list[JobWait]:
    return waits(n, boot, ago=7 * 3600)


def last_hour(n: int = 30, boot: float = 240.0, slow: int = 0) -> list[JobWait]:
    return waits(n, boot, ago=1800, slow=slow)


def boot_of(judged: Sequence[StageRegression], runner_type: str = "gpu") -> StageRegression:
    [found] = [j for j in judged if j.runner_type == runner_type and j.stage == "boot"]
    return found


@pytest.mark.parametrize(
    ("history", "regressed"),
    [
        pytest.param(day_before() + last_hour(), True, id="boot-95s-to-240s"),
        pytest.param(day_before() + last_hour(boot=100.0), False, id="steady"),
        pytest.param(day_before() + last_hour(n=19), False, id="recent-too-few-jobs"),
        pytest.param(day_before(n=19) + last_hour(), False, id="baseline-too-few-jobs"),
        pytest.param(day_before() + last_hour(boot=95.0, slow=1), False, id="one-slow-job"),
        pytest.param(day_before() + last_hour(boot=95.0, slow=2), True, id="two-slow-of-30"),
        pytest.param(day_before(boot=4.0) + last_hour(boot=30.0), False, id="small-stage-7x"),
        pytest.param(day_before(boot=200.0) + last_hour(boot=300.0), False, id="grew-only-half"),
        pytest.param(
            waits(40, 95.0, ago=2 * 86400) + last_hour(), False, id="baseline-older-than-a-day"
        ),
        pytest.param(
            [*day_before(), *last_hour()[:19], *waits(20, 240.0, ago=-600)],
            False,
            id="jobs-from-the-future-ignored",
        ),
    ],
)
def test_regression_rule(history: list[JobWait], regressed: bool) -> None:
    assert boot_of(stage_regressions(history, NOW, RULE)).regressed is regressed


def test_only_the_stage_that_grew_is_named() -> None:
    judged = stage_regressions(day_before() + last_hour(), NOW, RULE)
    assert [(j.stage, j.regressed) for j in judged] == [(s, s == "boot") for s in STAGES]
    boot = boot_of(judged)
    assert (boot.baseline_p95, boot.recent_p95) == (95.0, 240.0)
    assert (boot.baseline_jobs, boot.recent_jobs) == (40, 30)


def test_runner_types_are_judged_apart() -> None:
    cpu = waits(40, 60.0, ago=7 * 3600, runner_type="cpu") + waits(
        30, 60.0, ago=1800, runner_type="cpu"
    )
    judged = stage_regressions(day_before() + last_hour() + cpu, NOW, RULE)
    assert boot_of(judged).regressed
    assert not boot_of(judged, "cpu").regressed


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        pytest.param("min_jobs", 5, "min_jobs", id="one-job-would-be-the-p95"),
        pytest.param("recent", "0s", "recent", id="empty-window"),
        pytest.param("min_growth_pct", 0, "min_growth_pct", id="no-growth"),
    ],
)
def test_config_refuses(key: str, value: object, problem: str) -> None:
    doc = {"builtin": {"stage_regression": {key: value}}}
    [found] = config_problems(config_doc(alerts=doc))
    assert problem in found


def test_config_reads_its_keys() -> None:
    cfg = load_config(
        alerts={"builtin": {"stage_regression": {"recent": "30m", "min_increase": "2m"}}}
    )
    rule = cfg.alerts.builtin.stage_regression
    assert (rule.recent, rule.baseline, rule.min_increase, rule.min_jobs) == (
        1800.0,
        86400.0,
        120.0,
        20,
    )


def test_on_call_text_names_the_stage() -> None:
    b = BuiltinAlertsConfig(runbook_url="https://rb.example/s", dashboard_url="https://d.example/w")
    judged = stage_regressions(day_before() + last_hour(), NOW, RULE)
    evaluations = evaluate_stage_regressions(b, judged, ("oncall",))
    [fired] = [e for e in evaluations if e.breached]
    assert (fired.rule, fired.scope, dict(fired.labels)) == (
        STAGE_RULE,
        "gpu/boot",
        {"runner_type": "gpu", "stage": "boot"},
    )
    n = Notification("FIRING", fired, started_at=NOW, created_at=NOW)
    assert title(fired) == "[P2] Job wait stage regressed (gpu/boot)"
    assert text(n) == (
        "Occurred At: 2026-11-30 03:12:00 UTC\n"
        "State: FIRING\n"
        "Team: dev-infra\n"
        "Priority: P2\n"
        "Description: boot p95 for gpu went from 95 s to 240 s over the last hour"
        " (baseline: the day before)\n"
        "Reason: stage_p95_baseline_secs=95, stage_p95_recent_secs=240, jobs_baseline=40,"
        " jobs_recent=30, min_jobs=20, threshold_breached=1\n"
        "Runbook: https://rb.example/s\n"
        "Dashboard: https://d.example/w\n"
        f"Fingerprint: {fired.fingerprint}"
    )


def test_pages_once_names_the_stage_then_resolves() -> None:
    """Through the engine: FIRING once for gpu/boot, held while the stages were not judged
    (no scaling this tick), RESOLVED once the last hour's boots are back to normal."""
    sent: list[tuple[str, str]] = []

    def capture(request: httpx.Request) -> httpx.Response:
        doc = json.loads(request.content)
        sent.append((doc["state"], doc["description"]))
        return httpx.Response(200)

    builtin = BuiltinAlertsConfig(unmatched_jobs=False, github_unreachable_after=0)
    regressed = stage_regressions(day_before() + last_hour(), NOW, RULE)
    recovered = stage_regressions(day_before() + last_hour(boot=96.0), NOW, RULE)
    with paging(oncall(builtin), capture) as (engine, deliverer):

        def step(at: datetime, stages: list[StageRegression] | None) -> None:
            engine.step(None, NOW, at, stages=stages)
            assert deliverer.flush(10.0), "delivery did not finish"

        step(NOW, regressed)
        step(NOW + timedelta(seconds=30), regressed)
        step(NOW + timedelta(seconds=60), None)
        assert sent == [
            (
                "FIRING",
                "boot p95 for gpu went from 95 s to 240 s over the last hour"
                " (baseline: the day before)",
            )
        ]
        step(NOW + timedelta(seconds=90), recovered)
        assert [s for s, _ in sent] == ["FIRING", "RESOLVED"]
        assert "went from 95 s to 96 s" in sent[1][1]


def test_recent_waits_keep_the_windows_and_forget_older() -> None:
    kept = RecentWaits(keep=10, window=RULE.recent + RULE.baseline)
    kept.add(waits(50, 95.0, ago=3 * 86400))  # older than both windows
    kept.add(day_before() + last_hour())
    assert len(kept.all()) == 70
    assert kept.summary()["gpu"].jobs == 10
    assert boot_of(stage_regressions(kept.all(), NOW, RULE)).regressed

"""The Cause line and the causes in every payload; the queue-time objective alert.

The ``Reason:`` line stays byte-for-byte as design.md defines it; queue alerts get one more
line, ``Cause:``, right after it, and every receiver's payload carries
``causes: [{runner_type, code, detail}]``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from autoscaler.alerting import render
from autoscaler.alerting.alertmanager import alert_annotations
from autoscaler.alerting.builtin_rules import OBJECTIVE_RULE, evaluate_objective, evaluate_unmatched
from autoscaler.alerting.evaluation import Evaluation, fingerprint
from autoscaler.alerting.lifecycle import Notification
from autoscaler.alerting.rules import evaluate_rule
from autoscaler.config import (
    AlertRuleConfig,
    BuiltinAlertsConfig,
    QueueObjective,
)
from autoscaler.domain import Cause, QueueSnapshot, QueueStats, RunnerCounts
from autoscaler.observe.starts import ObjectiveStatus
from autoscaler.scale.causes import UNMATCHED
from autoscaler.state.sqlite import SqliteStore
from tests.factories import alert_engine, oncall

NOW = datetime(2026, 11, 30, 3, 12, tzinfo=UTC)
CPU, GPU, ROCM = "linux.4xlarge", "linux.g5.4xlarge.nvidia.gpu", "linux.rocm.gpu"
AT_MAX = Cause("at_max", f"{CPU} 50/50 instances")
BOOTING = Cause("booting", "3 instances in ci-cpu, oldest 4m (boot_timeout 15m)")
BACKOFF = Cause(
    "capacity_backoff",
    "ci-gpu-spot since 03:02:00 UTC, skipped until 03:07:00 UTC; Failed scaling activity,"
    " AWS: We currently do not have sufficient g5.4xlarge capacity",
)
CAUSES = {CPU: (AT_MAX, BOOTING), GPU: (BACKOFF,), ROCM: (Cause("booting", "x"),)}
REASON = (
    "Reason: max_queue_size=7, max_queue_time_mins=62, queue_size_threshold=0, "
    "queue_time_threshold=1, threshold_breached=1"
)


def rule(**kw: object) -> AlertRuleConfig:
    base: dict[str, object] = {
        "name": "Jobs queueing too long",
        "team": "pytorch-dev-infra",
        "priority": "P2",
        "description": "Jobs wait too long for a runner",
        "receivers": ("oncall",),
        "max_queue_size": 150,
        "max_queue_time": 3600.0,
        "runbook_url": "https://rb.example/q",
        "dashboard_url": "https://dash.example/d",
    }
    base.update(kw)
    return AlertRuleConfig(**base)


def snapshot(**queues: tuple[int, float]) -> QueueSnapshot:
    """Runner type (underscores for dots) -> (queued, oldest minutes)."""
    per = {}
    for key, (n, mins) in queues.items():
        name = {"cpu": CPU, "gpu": GPU, "rocm": ROCM}[key]
        ages = tuple([mins * 60.0] * n)
        per[name] = QueueStats(
            name, n, mins * 60.0 if n else 0.0, RunnerCounts(), queued_ages_seconds=ages
        )
    return QueueSnapshot(NOW, per, 0, 0)


def firing(ev: Evaluation) -> Notification:
    return Notification("FIRING", ev, started_at=NOW, created_at=NOW)


def test_the_cause_line_follows_the_unchanged_reason_line() -> None:
    cfg = rule(per_runner_type=True)
    [ev] = evaluate_rule(cfg, snapshot(cpu=(7, 62.5)), CAUSES)
    assert render.text(firing(ev)) == (
        "Occurred At: 2026-11-30 03:12:00 UTC\n"
        "State: FIRING\n"
        "Team: pytorch-dev-infra\n"
        "Priority: P2\n"
        "Description: Jobs wait too long for a runner\n"
        f"{REASON}\n"
        f"Cause: at_max ({CPU} 50/50 instances); booting (3 instances in ci-cpu, oldest 4m"
        " (boot_timeout 15m))\n"
        "Runbook: https://rb.example/q\n"
        "Dashboard: https://dash.example/d\n"
        f"Fingerprint: {fingerprint('Jobs queueing too long', CPU)}"
    )


def test_a_queue_alert_with_no_cause_found_says_so() -> None:
    [ev] = evaluate_rule(rule(per_runner_type=True), snapshot(cpu=(7, 62.5)), {})
    assert "\nCause: none found\n" in render.text(firing(ev))


def test_fleet_alert_carries_the_waiting_covered_types_longest_wait_first() -> None:
    """A fleet-wide rule names the causes of the covered types whose jobs count: the GPU
    type waits longest, so its cause leads; ROCm is excluded by the rule, and the idle CPU
    type has nothing waiting."""
    cfg = rule(exclude_runner_types=("*rocm*",), min_job_age=300.0)
    snap = snapshot(cpu=(2, 3), gpu=(4, 70), rocm=(9, 90))
    [ev] = evaluate_rule(cfg, snap, CAUSES)
    assert ev.causes == ((GPU, BACKOFF),)
    lines = render.text(firing(ev)).splitlines()
    assert lines[5].startswith("Reason: max_queue_size=4, max_queue_time_mins=70")
    assert lines[6] == f"Cause: capacity_backoff ({BACKOFF.detail})"


def test_without_causes_the_text_is_exactly_as_before() -> None:
    """Alerts evaluated without a diagnosis (and every built-in about the controller
    itself) keep the design's text: no Cause line at all."""
    [ev] = evaluate_rule(rule(), snapshot(cpu=(7, 62.5)))
    lines = render.text(firing(ev)).splitlines()
    assert lines[5] == REASON and lines[6].startswith("Runbook: ")


def test_every_receiver_payload_carries_the_causes() -> None:
    """The causes ride beside the event id (receivers drop a redelivery by it)
    on every payload: neither merge side's field displaces the other's."""
    [ev] = evaluate_rule(rule(per_runner_type=True), snapshot(cpu=(7, 62.5)), CAUSES)
    n = firing(ev)
    assert n.event_id and render.webhook_payload(n)["event_id"] == n.event_id
    assert render.slack_payload(n)["metadata"]["event_payload"]["event_id"] == n.event_id
    details = render.pagerduty_payload(n, "key")["payload"]["custom_details"]
    assert details["event_id"] == n.event_id and details["causes"]
    am_annotations = render.alertmanager_payload(n, "am")["alerts"][0]["annotations"]
    assert am_annotations["event_id"] == n.event_id and am_annotations["cause"] == ev.cause
    expected = [
        {"runner_type": CPU, "code": "at_max", "detail": AT_MAX.detail},
        {"runner_type": CPU, "code": "booting", "detail": BOOTING.detail},
    ]
    assert render.webhook_payload(n)["causes"] == expected
    assert render.slack_payload(n)["causes"] == expected
    assert render.pagerduty_payload(n, "key")["payload"]["custom_details"]["causes"] == expected
    am = render.alertmanager_payload(n, "am")  # Alertmanager's exact shape: strings only
    assert am["alerts"][0]["annotations"]["cause"] == ev.cause
    assert alert_annotations(n)["cause"] == ev.cause  # the v2 API receiver
    assert "\nCause: at_max" in render.github_issue_body(n)
    assert "Cause: at_max" in render.slack_payload(n)["attachments"][0]["fallback"]
    json.dumps(render.webhook_payload(n))  # plain JSON


def test_causes_survive_the_store_and_old_rows_still_load() -> None:
    [ev] = evaluate_rule(rule(per_runner_type=True), snapshot(cpu=(7, 62.5)), CAUSES)
    again = Evaluation.from_dict(json.loads(json.dumps(ev.to_dict())))
    assert again == ev
    old_row = {k: v for k, v in ev.to_dict().items() if k != "causes"}
    old = Evaluation.from_dict(old_row)
    assert old.causes is None and old.cause is None
    assert "Cause:" not in render.text(firing(old))
    assert render.webhook_payload(firing(old))["causes"] == []


def test_unmatched_alert_names_the_label_sets() -> None:
    snap = QueueSnapshot(NOW, {}, 2, 0, (600.0, 300.0))
    unmatched = Cause(
        "no_runner_type", "2 queued jobs no runner type serves, by labels: [arm64, self-hosted] x2"
    )
    ev = evaluate_unmatched(BuiltinAlertsConfig(), snap, ("oncall",), {UNMATCHED: (unmatched,)})
    assert ev.cause == f"no_runner_type ({unmatched.detail})"
    assert ev.causes_as_dicts()[0]["runner_type"] == UNMATCHED


def _status(good_bad: dict[float, tuple[int, int]], objective: float = 0.95) -> ObjectiveStatus:
    counts = {w: (good, good + bad) for w, (good, bad) in good_bad.items()}
    return ObjectiveStatus(GPU, QueueObjective(queue_time=300.0, objective=objective), counts)


@pytest.mark.parametrize(
    ("windows", "breached"),
    [
        pytest.param(
            {300: (2, 8), 1800: (30, 10), 3600: (20, 80), 21600: (500, 60)},
            True,
            id="fast burn: 1h and 5m both above 14.4",
        ),
        pytest.param(
            {300: (10, 0), 1800: (30, 10), 3600: (20, 80), 21600: (500, 60)},
            False,
            id="fast burn over: the 5m window recovered",
        ),
        pytest.param(
            {300: (10, 0), 1800: (60, 30), 3600: (110, 10), 21600: (300, 140)},
            True,
            id="slow burn: 6h and 30m both above 6",
        ),
        pytest.param(
            {300: (10, 0), 1800: (90, 0), 3600: (200, 2), 21600: (1000, 40)},
            False,
            id="within budget",
        ),
        pytest.param({}, False, id="no jobs at all"),
    ],
)
def test_queue_time_objective_alert(windows: dict[float, tuple[int, int]], breached: bool) -> None:
    ev = evaluate_objective(BuiltinAlertsConfig(), _status(windows), ("oncall",), CAUSES)
    assert ev.rule == OBJECTIVE_RULE and ev.scope == GPU
    assert ev.breached is breached
    assert ev.cause == f"capacity_backoff ({BACKOFF.detail})"
    assert list(ev.values) == [
        "queue_time_objective_secs",
        "objective_pct",
        "jobs_started_1h",
        "within_objective_pct_1h",
        "burn_rate_5m",
        "burn_rate_1h",
        "burn_rate_30m",
        "burn_rate_6h",
        "threshold_breached",
    ]


def test_objective_reason_numbers() -> None:
    """1h: 60 of 120 jobs late with a 5% budget burns at 10; shares read floored."""
    status = _status({300: (1, 1), 1800: (0, 0), 3600: (60, 60), 21600: (60, 60)})
    ev = evaluate_objective(BuiltinAlertsConfig(), status, ("oncall",))
    assert ev.reason == (
        "queue_time_objective_secs=300, objective_pct=95, jobs_started_1h=120,"
        " within_objective_pct_1h=50, burn_rate_5m=10, burn_rate_1h=10, burn_rate_30m=0,"
        " burn_rate_6h=10, threshold_breached=0"
    )


def test_engine_puts_causes_on_alerts_views_and_the_store() -> None:
    store = SqliteStore()
    config = oncall(
        BuiltinAlertsConfig(unmatched_jobs=False, github_unreachable_after=0),
        rules=(rule(per_runner_type=True, max_queue_time=1800.0),),
    )
    engine = alert_engine(config, store=store)
    views = engine.step(snapshot(cpu=(7, 62.5)), NOW, NOW, causes=CAUSES)
    [cpu] = [v for v in views if v.state == "firing"]
    assert cpu.cause == ev_cause(CAUSES[CPU])
    assert f"\nCause: {cpu.cause}\n" in cpu.text
    assert "cause" not in cpu.to_dict()  # once's JSON is unchanged
    [stored] = store.load_states().values()
    assert stored.evaluation.causes == ((CPU, AT_MAX), (CPU, BOOTING))
    [(receiver, note)] = [(i.receiver, i.notification) for i in store.pending()]
    assert receiver == "oncall" and note.evaluation.cause == cpu.cause
    later = NOW + timedelta(minutes=1)
    views = engine.step(snapshot(cpu=(7, 63.5)), later, later, causes={CPU: (BOOTING,)})
    assert [v.cause for v in views if v.state == "firing"] == [ev_cause((BOOTING,))]


def ev_cause(causes: tuple[Cause, ...]) -> str:
    return "; ".join(f"{c.code} ({c.detail})" for c in causes)

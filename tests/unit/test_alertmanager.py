"""Alertmanager's v2 API, pure half: URLs, labels, annotations, the batch per tick, when a
target is due, and that an alert that keeps firing never expires between posts."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from autoscaler.alerting import alertmanager as am
from autoscaler.alerting.evaluation import FLEET, Evaluation
from autoscaler.alerting.lifecycle import AlertState, AlertStatus, Notification, advance
from autoscaler.config import ReceiverConfig
from autoscaler.secrets import SecretUrl

T0 = datetime(2026, 11, 30, 3, 12, tzinfo=UTC)
GPU = "linux.g5.4xlarge.nvidia.gpu"
VALUES = {
    "max_queue_size": 7,
    "max_queue_time_mins": 62,
    "queue_size_threshold": 0,
    "queue_time_threshold": 1,
    "threshold_breached": 1,
}


def evaluation(scope: str = GPU, breached: bool = True, **kw: Any) -> Evaluation:
    values = {**VALUES, "threshold_breached": int(breached)}
    base = Evaluation(
        rule="Jobs queueing too long",
        scope=scope,
        team="pytorch-dev-infra",
        priority="P2",
        description="Jobs wait too long for a runner",
        receivers=("am",),
        values=values,
        runbook_url="https://runbook.example/queue",
        dashboard_url="https://grafana.example/d/ci",
        labels={} if scope == FLEET else {"runner_type": scope},
    )
    return replace(base, **kw)


def firing(ev: Evaluation | None = None, at: datetime = T0) -> AlertState:
    return AlertState(AlertStatus.FIRING, ev or evaluation(), since=at, fired_at=at)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://am:9093", "http://am:9093/api/v2/alerts"),
        ("http://am:9093/", "http://am:9093/api/v2/alerts"),
        ("http://am:9093/api/v2/alerts", "http://am:9093/api/v2/alerts"),
        ("http://am:9093/api/v2/alerts/", "http://am:9093/api/v2/alerts"),
        ("https://mon.example/alertmanager", "https://mon.example/alertmanager/api/v2/alerts"),
        ("https://u:p@am.example", "https://u:p@am.example/api/v2/alerts"),
    ],
    ids=["base", "trailing-slash", "full-path", "full-path-slash", "route-prefix", "userinfo"],
)
def test_api_url_accepts_the_base_url_or_the_full_path(url: str, expected: str) -> None:
    assert am.api_url(url) == expected


def test_api_urls_are_every_member_of_the_cluster() -> None:
    rc = ReceiverConfig(
        name="am",
        type="alertmanager",
        url=SecretUrl("http://a:9093"),
        urls=(SecretUrl("http://a:9093"), SecretUrl("http://b:9093/api/v2/alerts")),
    )
    assert am.api_urls(rc) == ("http://a:9093/api/v2/alerts", "http://b:9093/api/v2/alerts")
    single = ReceiverConfig(name="am", type="alertmanager", url=SecretUrl("http://a:9093"))
    assert am.api_urls(single) == ("http://a:9093/api/v2/alerts",)


@pytest.mark.parametrize(
    ("ev", "expected"),
    [
        (
            evaluation(),
            {
                "alertname": "JobsQueueingTooLong",
                "team": "pytorch-dev-infra",
                "priority": "P2",
                "severity": "error",
                "runner_type": GPU,
            },
        ),
        (
            evaluation(FLEET),
            {
                "alertname": "JobsQueueingTooLong",
                "team": "pytorch-dev-infra",
                "priority": "P2",
                "severity": "error",
            },
        ),
        # the provisioning built-in sets its scope to the runner type but no labels
        (
            evaluation(rule="Runner pool provisioning failing", priority="P1", labels={}),
            {
                "alertname": "RunnerPoolProvisioningFailing",
                "team": "pytorch-dev-infra",
                "priority": "P1",
                "severity": "critical",
                "runner_type": GPU,
            },
        ),
    ],
    ids=["per-runner-type", "fleet-wide", "builtin-scoped"],
)
def test_labels_are_the_alert_identity_and_only_configured_values(
    ev: Evaluation, expected: dict[str, str]
) -> None:
    assert am.alert_labels(ev) == expected


def test_labels_never_carry_the_reason_numbers() -> None:
    """Two evaluations of one alert with different numbers are the same alert."""
    quiet = evaluation(values={**VALUES, "max_queue_size": 1000})
    assert am.alert_labels(quiet) == am.alert_labels(evaluation())


def test_annotations_are_what_on_call_reads() -> None:
    n = Notification("FIRING", evaluation(), started_at=T0, created_at=T0)
    assert am.alert_annotations(n) == {
        "summary": f"[P2] Jobs queueing too long ({GPU})",
        "description": "Jobs wait too long for a runner",
        "reason": (
            "max_queue_size=7, max_queue_time_mins=62, queue_size_threshold=0, "
            "queue_time_threshold=1, threshold_breached=1"
        ),
        "runbook_url": "https://runbook.example/queue",
        "dashboard_url": "https://grafana.example/d/ci",
        "fingerprint": evaluation().fingerprint,
    }


def test_empty_links_are_left_out() -> None:
    n = Notification("FIRING", evaluation(runbook_url="", dashboard_url=""), T0, T0)
    alert = am.postable(n, T0)
    assert "runbook_url" not in alert["annotations"]
    assert "generatorURL" not in alert


def test_the_cause_line_of_the_on_call_text_becomes_an_annotation() -> None:
    """No evaluation carries causes yet (the diagnosis issue adds them as a `Cause:` line
    right after `Reason:`); the annotation reads that line, so it needs no change then."""
    text = (
        "State: FIRING\nReason: max_queue_size=7, threshold_breached=1\n"
        "Cause: at_max (linux.4xlarge 50/50 instances)\nRunbook: https://x\n"
    )
    assert am.text_line(text, "Cause") == "at_max (linux.4xlarge 50/50 instances)"
    assert am.text_line(text, "Dashboard") == ""
    n = Notification("FIRING", evaluation(), T0, T0)
    assert "cause" not in am.alert_annotations(n)  # nothing made up meanwhile


def test_valid_for_is_four_times_the_longer_of_resend_and_interval() -> None:
    assert am.valid_for(60, 30) == 240
    assert am.valid_for(60, 120) == 480


def test_batch_firing_resolved_pending_and_other_receivers() -> None:
    now = T0 + timedelta(minutes=5)
    resolved = AlertState(
        AlertStatus.RESOLVED,
        evaluation(FLEET, breached=False),
        since=now - timedelta(seconds=30),
        fired_at=T0,
    )
    pending = AlertState(AlertStatus.PENDING, evaluation("linux.4xlarge"), since=T0)
    elsewhere = firing(evaluation("linux.2xlarge", receivers=("slack",)))
    b = am.batch([firing(), resolved, pending, elsewhere], "am", now, 240)

    by_scope = {a["labels"].get("runner_type", FLEET): a for a in b.alerts}
    assert set(by_scope) == {GPU, FLEET}
    fire = by_scope[GPU]
    assert set(fire) == {"labels", "annotations", "startsAt", "endsAt", "generatorURL"}
    assert fire["startsAt"] == "2026-11-30T03:12:00Z"
    assert fire["endsAt"] == "2026-11-30T03:21:00Z"  # now + 4 minutes
    done = by_scope[FLEET]
    assert done["endsAt"] == "2026-11-30T03:16:30Z"  # when it resolved, in the past
    assert done["annotations"]["reason"].endswith("threshold_breached=0")
    assert b.keys == {(firing().fingerprint, "firing"), (resolved.fingerprint, "resolved")}


def test_retain_resolved_keeps_a_resolution_for_the_retention_unless_it_fires_again() -> None:
    gone = AlertState(AlertStatus.RESOLVED, evaluation(FLEET, breached=False), since=T0)
    kept = am.retain_resolved({}, {gone.fingerprint: gone}, T0)
    assert kept == {gone.fingerprint: gone}
    later = T0 + timedelta(minutes=14)
    assert am.retain_resolved(kept, {}, later) == kept  # the lifecycle forgot it; we did not
    assert am.retain_resolved(kept, {}, T0 + timedelta(minutes=15)) == {}
    again = firing(evaluation(FLEET), at=later)
    assert am.retain_resolved(kept, {again.fingerprint: again}, later) == {}


KEY = frozenset({("fp1", "firing")})


@pytest.mark.parametrize(
    ("keys", "acked", "last_ok_ago", "due"),
    [
        (frozenset(), frozenset(), None, False),
        (KEY, frozenset(), None, True),
        (KEY, KEY, 10.0, False),
        (KEY, KEY, 60.0, True),
        (KEY | {("fp2", "firing")}, KEY, 10.0, True),
        (frozenset({("fp1", "resolved")}), KEY, 10.0, True),
        (frozenset(), KEY, 120.0, False),
    ],
    ids=[
        "nothing-to-say",
        "never-posted",
        "acked-recently",
        "resend-elapsed",
        "new-alert",
        "just-resolved",
        "all-gone",
    ],
)
def test_due(
    keys: frozenset[tuple[str, str]],
    acked: frozenset[tuple[str, str]],
    last_ok_ago: float | None,
    due: bool,
) -> None:
    last_ok = None if last_ok_ago is None else T0 - timedelta(seconds=last_ok_ago)
    assert am.due(keys, acked, last_ok, T0, resend=60) is due


@pytest.mark.parametrize("interval", [15.0, 60.0, 300.0], ids=["15s", "1m", "5m"])
def test_a_firing_alert_never_expires_between_posts_even_when_two_posts_fail(
    interval: float,
) -> None:
    """The regression: the receiver posted once per transition, so even a payload
    Alertmanager accepted would have ended at its endsAt (or resolve_timeout after the
    post) minutes into an incident. Simulated over 80 minutes of ticks, posting whenever due
    and losing two posts in a row out of every five (as Prometheus allows for), the alert
    Alertmanager holds is still valid at every tick until the lifecycle resolves it."""
    resend = 60.0
    valid = am.valid_for(resend, interval)
    states: dict[str, AlertState] = {}
    resolved: dict[str, AlertState] = {}
    acked: frozenset[tuple[str, str]] = frozenset()
    last_ok: datetime | None = None
    held_until: datetime | None = None
    attempts = 0
    now = T0
    while now < T0 + timedelta(minutes=80):
        breached = now < T0 + timedelta(minutes=50)
        states, _ = advance(states, [evaluation(breached=breached)], now)
        resolved = am.retain_resolved(resolved, states, now)  # as AlertmanagerSync does
        current = [*states.values(), *(s for fp, s in resolved.items() if fp not in states)]
        b = am.batch(current, "am", now, valid)
        if held_until is not None and breached:
            assert now < held_until, f"expired at {now - T0} before a re-post"
        if am.due(b.keys, acked, last_ok, now, resend):
            attempts += 1
            if attempts % 5 not in (1, 2):  # the 1st and 2nd of every 5 posts are lost
                acked, last_ok = b.keys, now
                ends = datetime.fromisoformat(b.alerts[0]["endsAt"])
                held_until = ends
        now += timedelta(seconds=interval)
    assert held_until is not None and held_until <= T0 + timedelta(minutes=50, seconds=interval)

"""The Reason line and its flags, as design.md ("Alert text") defines them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from autoscaler.alerting.builtin_rules import evaluate_unmatched, evaluate_unreachable
from autoscaler.alerting.evaluation import FLEET, fingerprint
from autoscaler.alerting.lifecycle import Notification
from autoscaler.alerting.render import text, title
from autoscaler.alerting.rules import covered_types, evaluate_rule
from autoscaler.config import AlertRuleConfig, BuiltinAlertsConfig
from autoscaler.domain import QueueSnapshot, QueueStats, RunnerCounts

NOW = datetime(2026, 11, 30, 3, 12, tzinfo=UTC)
MIN = 60.0


def stats(name: str, ages_mins: list[float]) -> QueueStats:
    ages = tuple(sorted((a * MIN for a in ages_mins), reverse=True))
    return QueueStats(
        runner_type=name,
        queue_size=len(ages),
        max_queue_time_seconds=max(ages, default=0.0),
        runners=RunnerCounts(),
        queued_ages_seconds=ages,
    )


def snapshot(**per_type: list[float]) -> QueueSnapshot:
    return QueueSnapshot(
        observed_at=NOW,
        per_type={n: stats(n, a) for n, a in per_type.items()},
        unmatched_jobs=0,
        ghost_jobs=0,
    )


def rule(**kw: object) -> AlertRuleConfig:
    base: dict[str, object] = {
        "name": "Jobs queueing too long",
        "team": "pytorch-dev-infra",
        "priority": "P2",
        "description": "Jobs wait too long for a runner",
        "receivers": ("oncall",),
        "max_queue_size": 10,
        "max_queue_time": 60 * MIN,
    }
    base.update(kw)
    return AlertRuleConfig(**base)


SEVEN_JOBS_62_MINS: dict[str, list[float]] = {"linux.4xlarge": [62, 50, 40, 30, 20, 10, 6]}


@pytest.mark.parametrize(
    ("cfg", "queues", "reason"),
    [
        pytest.param(
            rule(),
            SEVEN_JOBS_62_MINS,
            "max_queue_size=7, max_queue_time_mins=62, queue_size_threshold=0, "
            "queue_time_threshold=1, threshold_breached=1",
            id="seed-example-7-jobs-62-mins-any",
        ),
        pytest.param(
            rule(match="all"),
            SEVEN_JOBS_62_MINS,
            "max_queue_size=7, max_queue_time_mins=62, queue_size_threshold=0, "
            "queue_time_threshold=1, threshold_breached=0",
            id="all-needs-both-checks",
        ),
        pytest.param(
            rule(match="all", max_queue_size=5),
            SEVEN_JOBS_62_MINS,
            "max_queue_size=7, max_queue_time_mins=62, queue_size_threshold=1, "
            "queue_time_threshold=1, threshold_breached=1",
            id="all-both-tripped",
        ),
        pytest.param(
            rule(max_queue_time=None, match="all", max_queue_size=5),
            SEVEN_JOBS_62_MINS,
            "max_queue_size=7, max_queue_time_mins=62, queue_size_threshold=1, "
            "queue_time_threshold=0, threshold_breached=1",
            id="all-ignores-unconfigured-check",
        ),
        pytest.param(
            rule(),
            {"a": [59.99]},
            "max_queue_size=1, max_queue_time_mins=59, queue_size_threshold=0, "
            "queue_time_threshold=0, threshold_breached=0",
            id="below-thresholds-minutes-floored",
        ),
        pytest.param(
            rule(),
            {"a": [60.0]},
            "max_queue_size=1, max_queue_time_mins=60, queue_size_threshold=0, "
            "queue_time_threshold=0, threshold_breached=0",
            id="exactly-at-threshold-does-not-trip",
        ),
        pytest.param(
            rule(max_queue_size=2),
            {"a": [1, 1], "b": [1, 1, 1], "c": [90]},
            "max_queue_size=3, max_queue_time_mins=90, queue_size_threshold=1, "
            "queue_time_threshold=1, threshold_breached=1",
            id="fleet-wide-takes-maxima-over-types",
        ),
        pytest.param(
            rule(exclude_runner_types=("*rocm*",)),
            {"linux.rocm.gpu": [90], "linux.2xlarge": [3]},
            "max_queue_size=1, max_queue_time_mins=3, queue_size_threshold=0, "
            "queue_time_threshold=0, threshold_breached=0",
            id="exclusion-hides-rocm",
        ),
        pytest.param(
            rule(runner_types=("linux.g5*",)),
            {"linux.g5.4xlarge": [61], "linux.2xlarge": [99]},
            "max_queue_size=1, max_queue_time_mins=61, queue_size_threshold=0, "
            "queue_time_threshold=1, threshold_breached=1",
            id="glob-selects-gpu-only",
        ),
        pytest.param(
            rule(min_job_age=5 * MIN, max_queue_size=3),
            {"a": [1, 2, 3, 4, 5, 6, 7]},
            "max_queue_size=3, max_queue_time_mins=7, queue_size_threshold=0, "
            "queue_time_threshold=0, threshold_breached=0",
            id="min-job-age-drops-young-jobs",
        ),
        pytest.param(
            rule(min_job_age=10 * MIN),
            {"a": [1, 2, 3]},
            "max_queue_size=0, max_queue_time_mins=0, queue_size_threshold=0, "
            "queue_time_threshold=0, threshold_breached=0",
            id="min-job-age-drops-everything",
        ),
        pytest.param(
            rule(runner_types=("nothing*",)),
            {"a": [100]},
            "max_queue_size=0, max_queue_time_mins=0, queue_size_threshold=0, "
            "queue_time_threshold=0, threshold_breached=0",
            id="no-covered-type-never-fires",
        ),
    ],
)
def test_reason_line(cfg: AlertRuleConfig, queues: dict[str, list[float]], reason: str) -> None:
    [ev] = evaluate_rule(cfg, snapshot(**queues))
    assert ev.scope == FLEET
    assert ev.reason == reason
    assert ev.breached == reason.endswith("threshold_breached=1")


def test_per_runner_type_gives_one_evaluation_per_covered_type() -> None:
    cfg = rule(per_runner_type=True, exclude_runner_types=("*rocm*",))
    evs = evaluate_rule(cfg, snapshot(b=[61], a=[1], rocm=[600]))
    assert [(e.scope, e.breached) for e in evs] == [("a", False), ("b", True)]
    assert evs[0].labels == {"runner_type": "a"}
    assert len({e.fingerprint for e in evs}) == 2


@pytest.mark.parametrize(
    ("rule_name", "scope", "expected"),
    [
        pytest.param("Jobs queueing too long", FLEET, "c83953ecef9f9fc5", id="readme-sample"),
        pytest.param("r", FLEET, "4772f542c8a9ca7d", id="fleet"),
        pytest.param("r", "linux.4xlarge", "307a014ca369af84", id="runner-type"),
    ],
)
def test_fingerprint_is_pinned(rule_name: str, scope: str, expected: str) -> None:
    """Receivers dedupe and stored alert states are keyed on the fingerprint: a change of
    the hash would re-page every firing alert after an upgrade, so its values are pinned
    (sha256 of ``rule NUL scope``, first 16 hex digits)."""
    assert fingerprint(rule_name, scope) == expected


def test_fingerprint_is_scoped() -> None:
    assert fingerprint("r", "a") != fingerprint("r", "b")
    assert fingerprint("r", "a") != fingerprint("ra", "")


@pytest.mark.parametrize(
    ("include", "exclude", "expected"),
    [
        pytest.param(("*",), (), ["a.gpu", "b.cpu", "c.rocm"], id="star"),
        pytest.param(("*",), ("*rocm*",), ["a.gpu", "b.cpu"], id="exclude"),
        pytest.param(("*.gpu", "b.*"), (), ["a.gpu", "b.cpu"], id="several-globs"),
        pytest.param(("*",), ("*",), [], id="exclude-all"),
    ],
)
def test_covered_types(
    include: tuple[str, ...], exclude: tuple[str, ...], expected: list[str]
) -> None:
    cfg = rule(runner_types=include, exclude_runner_types=exclude)
    assert covered_types(cfg, ["c.rocm", "b.cpu", "a.gpu"]) == expected


def test_unmatched_builtin() -> None:
    snap = QueueSnapshot(
        NOW, {}, unmatched_jobs=3, ghost_jobs=0, unmatched_ages_seconds=(30 * MIN, 5.0)
    )
    ev = evaluate_unmatched(BuiltinAlertsConfig(), snap, ("oncall", "slack"))
    assert ev.reason == "unmatched_jobs=3, max_queue_time_mins=30, threshold_breached=1"
    assert ev.receivers == ("oncall", "slack")
    quiet = QueueSnapshot(NOW, {}, unmatched_jobs=0, ghost_jobs=0)
    assert not evaluate_unmatched(BuiltinAlertsConfig(), quiet, ()).breached


@pytest.mark.parametrize(
    ("last_poll_mins_ago", "breached"),
    [
        pytest.param(5, False, id="recent-poll"),
        pytest.param(10, False, id="exactly-at-limit"),
        pytest.param(11, True, id="past-limit"),
        pytest.param(None, True, id="never-polled-since-start"),
    ],
)
def test_github_unreachable_builtin(last_poll_mins_ago: int | None, breached: bool) -> None:
    b = BuiltinAlertsConfig(github_unreachable_after=600.0, receivers=("pager",))
    last = None if last_poll_mins_ago is None else NOW - timedelta(minutes=last_poll_mins_ago)
    ev = evaluate_unreachable(b, last, NOW - timedelta(minutes=20), NOW, ("x",))
    assert ev.breached is breached
    assert ev.receivers == ("pager",)
    assert ev.reason.startswith("mins_since_last_successful_poll=")


def test_on_call_text_matches_design_format() -> None:
    cfg = rule(runbook_url="https://rb.example/q", dashboard_url="https://dash.example/d")
    [ev] = evaluate_rule(cfg, snapshot(**SEVEN_JOBS_62_MINS))
    n = Notification("FIRING", ev, started_at=NOW, created_at=NOW)
    assert title(ev) == "[P2] Jobs queueing too long"
    assert text(n) == (
        "Occurred At: 2026-11-30 03:12:00 UTC\n"
        "State: FIRING\n"
        "Team: pytorch-dev-infra\n"
        "Priority: P2\n"
        "Description: Jobs wait too long for a runner\n"
        "Reason: max_queue_size=7, max_queue_time_mins=62, queue_size_threshold=0, "
        "queue_time_threshold=1, threshold_breached=1\n"
        "Runbook: https://rb.example/q\n"
        "Dashboard: https://dash.example/d\n"
        "Fingerprint: c83953ecef9f9fc5"
    )

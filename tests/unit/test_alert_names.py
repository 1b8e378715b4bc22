"""One name per alert: every alert the controller raises on its own (the built-ins and the
shipped queue rules) has a Prometheus rule under ``alerts/prometheus`` with the same
``alertname``, and no rule there carries a team or a URL (configuration gives them)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.alerting import builtin_rules, job_retry_alerts
from autoscaler.alerting.evaluation import alert_name
from autoscaler.config.alerts import shipped_rule_bodies

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "alerts" / "prometheus" / "ci-autoscaler.rules.yml"

BUILTIN = sorted(
    {
        value
        for module in (builtin_rules, job_retry_alerts)
        for key, value in vars(module).items()
        if key.endswith("_RULE") and isinstance(value, str)
    }
    | {body["name"] for body in shipped_rule_bodies()}
)
#: Built-in alerts whose Prometheus rule groups by runner type.
PER_RUNNER_TYPE = {
    "Queue-time objective burning",
    "Runner pool provisioning failing",
    "Job retries exhausted",
    "Job re-runs not permitted",
}


def prometheus_alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        pytest.param("Jobs queueing too long", "JobsQueueingTooLong", id="words"),
        pytest.param("Queue-time objective burning", "QueueTimeObjectiveBurning", id="hyphen"),
        pytest.param("GPU jobs queueing", "GPUJobsQueueing", id="acronym-kept"),
        pytest.param("4xx from GitHub", "Alert4xxFromGitHub", id="leading-digit"),
    ],
)
def test_alert_name(rule: str, expected: str) -> None:
    assert alert_name(rule) == expected


def test_the_finder_found_the_builtins() -> None:
    assert len(BUILTIN) >= 9, BUILTIN


@pytest.mark.parametrize("rule", BUILTIN)
def test_every_builtin_alert_has_a_prometheus_rule_of_the_same_name(rule: str) -> None:
    """Story: the controller said "Jobs queueing too long" to Alertmanager and the shipped
    Prometheus rule "JobsQueueingTooLong": two names, two routes, one incident."""
    mirrors = [r for r in prometheus_alerts() if r["alert"] == alert_name(rule)]
    assert mirrors, f"no Prometheus rule named {alert_name(rule)} for {rule!r}"
    if rule in PER_RUNNER_TYPE:
        for mirror in mirrors:
            assert "runner_type" in mirror["expr"], mirror["alert"]
            assert "{{ $labels.runner_type }}" in mirror["annotations"]["summary"]


@pytest.mark.parametrize("alert", prometheus_alerts(), ids=lambda r: str(r["alert"]))
def test_no_prometheus_rule_carries_a_team_or_a_url(alert: dict[str, Any]) -> None:
    assert "team" not in alert.get("labels", {})
    texts = [*alert.get("labels", {}).values(), *alert.get("annotations", {}).values()]
    assert not [t for t in texts if re.search(r"https?://", str(t))]

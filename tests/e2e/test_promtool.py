"""The Prometheus rules in alerts/prometheus pass `promtool check rules` and their unit
tests (`promtool test rules`), one test case per alert."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from autoscaler.config import BuiltinAlertsConfig
from autoscaler.config.alerts import shipped_rule_bodies
from tests.conftest import require_tool

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "alerts" / "prometheus" / "ci-autoscaler.rules.yml"
TESTS = sorted((ROOT / "alerts" / "prometheus" / "tests").glob("*.yml"))


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_tool("promtool"), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_check_rules() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_rule_unit_tests_pass() -> None:
    assert TESTS
    result = promtool("test", "rules", *map(str, TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test() -> None:
    alerts = {
        rule["alert"]
        for group in yaml.safe_load(RULES.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    tested = {
        case["alertname"]
        for path in TESTS
        for test in yaml.safe_load(path.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
    }
    assert alerts == tested


def test_queue_rule_mirrors_the_shipped_rule() -> None:
    [shipped] = shipped_rule_bodies()
    groups = yaml.safe_load(RULES.read_text())["groups"]
    [mirror] = [r for g in groups for r in g["rules"] if r.get("alert") == "JobsQueueingTooLong"]
    assert f"> {shipped['max_queue_size']})" in mirror["expr"]
    assert shipped["max_queue_time"] == "60m" and "> 3600)" in mirror["expr"]
    priority = BuiltinAlertsConfig().priority
    assert mirror["labels"]["priority"] == priority
    assert mirror["annotations"]["summary"] == f"[{priority}] {shipped['name']}"

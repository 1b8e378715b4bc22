"""The queue rules shipped in the package: on by default, dressed by ``alerts.builtin``,
replaced by a rule of the user's with the same name, off on request."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.config import AlertRuleConfig
from autoscaler.config.alerts import shipped_rule_bodies
from tests.factories import load_config

HOOKS = {"a": {"type": "webhook", "url": "https://a"}, "b": {"type": "webhook", "url": "https://b"}}
SHIPPED = "Jobs queueing too long"


def rules(alerts: dict[str, Any]) -> tuple[AlertRuleConfig, ...]:
    return load_config(alerts=alerts).alerts.rules


def test_the_package_ships_the_queue_rule_without_team_receivers_or_links() -> None:
    """Story: the example's ``rule_files: [alerts/rules/*.yaml]`` named a folder that neither
    the wheel nor the image carries, so the example failed outside the repository."""
    bodies = shipped_rule_bodies()
    assert [b["name"] for b in bodies] == [SHIPPED]
    for body in bodies:
        assert not {"team", "receivers", "runbook_url", "dashboard_url"} & set(body)


@pytest.mark.parametrize(
    ("alerts", "names"),
    [
        pytest.param({}, [SHIPPED], id="on-by-default"),
        pytest.param({"builtin": {"shipped_rules": False}}, [], id="turned-off"),
        pytest.param(
            {
                "receivers": HOOKS,
                "rules": [
                    {
                        "name": "Mine",
                        "team": "t",
                        "description": "d",
                        "receivers": ["a"],
                        "max_queue_size": 1,
                    }
                ],
            },
            [SHIPPED, "Mine"],
            id="before-the-users-rules",
        ),
        pytest.param(
            {
                "receivers": HOOKS,
                "rules": [
                    {
                        "name": SHIPPED,
                        "team": "t",
                        "description": "d",
                        "receivers": ["a"],
                        "max_queue_size": 3,
                    }
                ],
            },
            [SHIPPED],
            id="replaced-by-a-rule-of-the-same-name",
        ),
    ],
)
def test_which_rules_are_evaluated(alerts: dict[str, Any], names: list[str]) -> None:
    assert [r.name for r in rules(alerts)] == names


def test_a_replacing_rule_keeps_its_own_thresholds() -> None:
    mine = {
        "name": SHIPPED,
        "team": "t",
        "description": "d",
        "receivers": ["a"],
        "max_queue_size": 3,
    }
    (rule,) = rules({"receivers": HOOKS, "rules": [mine]})
    assert (rule.team, rule.max_queue_size, rule.max_queue_time) == ("t", 3, None)


@pytest.mark.parametrize(
    ("builtin", "receivers"),
    [
        pytest.param({}, ("a", "b"), id="every-receiver-by-default"),
        pytest.param({"receivers": ["b"]}, ("b",), id="the-builtin-receivers"),
    ],
)
def test_the_shipped_rule_takes_team_priority_receivers_and_links_from_builtin(
    builtin: dict[str, Any], receivers: tuple[str, ...]
) -> None:
    section = {
        "team": "infra",
        "priority": "P1",
        "runbook_url": "https://docs/runbook",
        "dashboard_url": "https://grafana/d/x",
        **builtin,
    }
    (rule,) = rules({"receivers": HOOKS, "builtin": section})
    assert (rule.team, rule.priority, rule.receivers) == ("infra", "P1", receivers)
    assert (rule.runbook_url, rule.dashboard_url) == ("https://docs/runbook", "https://grafana/d/x")
    assert (rule.max_queue_size, rule.max_queue_time, rule.min_job_age) == (150, 3600.0, 300.0)


def test_loading_twice_does_not_double_the_shipped_rule() -> None:
    """A dumped config read again (``model_validate`` of its own dump) keeps one copy."""
    config = load_config()
    again = type(config.alerts).model_validate(
        config.alerts.model_dump(by_alias=True, exclude_defaults=True)
    )
    assert [r.name for r in again.rules] == [SHIPPED]

"""Config the runner-safety fixes depend on: boot_timeout has a floor, the clock skew
alert has a threshold. (General config refusals live in test_config.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.config import parse_config
from autoscaler.config.schema import MIN_BOOT_TIMEOUT
from autoscaler.errors import ConfigError
from tests.factories import config_doc


def doc(boot_timeout: Any = None, **builtin: Any) -> dict[str, Any]:
    cpu: dict[str, Any] = {"labels": ["self-hosted", "cpu"], "pools": ["ci-cpu"]}
    if boot_timeout is not None:
        cpu["boot_timeout"] = boot_timeout
    return config_doc(runner_types={"cpu": cpu}, alerts={"builtin": builtin})


FLOOR = "runner_types.cpu.boot_timeout: must be at least 10s"
NO_UNIT = "runner_types.cpu.boot_timeout: must be a duration like 30s, 5m or 4h, got 0"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("0s", FLOOR, id="zero"),
        pytest.param(0, NO_UNIT, id="bare-zero"),  # a bare number has no unit: refused too
        pytest.param("500ms", FLOOR, id="half-a-second"),
        pytest.param("9s", FLOOR, id="below-the-floor"),
    ],
)
def test_boot_timeout_below_the_floor_is_refused(value: Any, expected: str) -> None:
    """Regression: ``boot_timeout: 0s`` was accepted, and made every
    instance an orphan candidate the moment it launched, before it could register."""
    with pytest.raises(ConfigError) as info:
        parse_config(doc(value), env={})
    [problem] = info.value.problems
    assert problem.startswith(expected)


@pytest.mark.parametrize("value", ["10s", "15m"])
def test_boot_timeout_at_or_above_the_floor_is_accepted(value: str) -> None:
    config = parse_config(doc(value), env={})
    assert config.runner_types[0].boot_timeout >= MIN_BOOT_TIMEOUT


def test_clock_skew_alert_threshold_defaults_to_a_minute_and_reads_a_duration() -> None:
    assert parse_config(doc(), env={}).alerts.builtin.clock_skew_max == 60.0
    assert parse_config(doc(clock_skew_max="2m"), env={}).alerts.builtin.clock_skew_max == 120.0
    assert parse_config(doc(clock_skew_max="0s"), env={}).alerts.builtin.clock_skew_max == 0.0

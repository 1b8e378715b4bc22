"""The ``job_retry`` section and ``aws.interruption_queue_url``: defaults, values, problems."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.config import JobRetryConfig
from autoscaler.errors import ConfigError
from tests.factories import load_config


def test_defaults_are_off_and_bounded() -> None:
    c = load_config()
    assert c.job_retry == JobRetryConfig()
    assert (c.job_retry.enabled, c.job_retry.max_attempts) == (False, 2)
    assert (c.job_retry.max_failed_jobs_per_run, c.job_retry.max_per_hour) == (5, 100)
    assert c.job_retry.retry_exit_codes == frozenset()
    assert c.aws.interruption_queue_url is None


def test_every_key_is_read() -> None:
    c = load_config(
        job_retry={
            "enabled": True,
            "max_attempts": 3,
            "max_failed_jobs_per_run": 2,
            "max_per_hour": 10,
            "retry_exit_codes": [137, 143],
        },
        aws={"interruption_queue_url": "https://sqs.us-east-1.amazonaws.com/1/q"},
    )
    assert c.job_retry == JobRetryConfig(
        enabled=True,
        max_attempts=3,
        max_failed_jobs_per_run=2,
        max_per_hour=10,
        retry_exit_codes=frozenset({137, 143}),
    )
    assert c.aws.interruption_queue_url == "https://sqs.us-east-1.amazonaws.com/1/q"


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        pytest.param({"enabled": "yes"}, "job_retry.enabled", id="enabled-not-bool"),
        pytest.param({"max_attempts": 0}, "job_retry.max_attempts", id="max-attempts-zero"),
        pytest.param(
            {"max_failed_jobs_per_run": 0}, "job_retry.max_failed_jobs_per_run", id="per-run-0"
        ),
        pytest.param({"max_per_hour": -1}, "job_retry.max_per_hour", id="negative-hourly"),
        pytest.param({"retry_exit_codes": 137}, "job_retry.retry_exit_codes", id="not-a-list"),
        pytest.param(
            {"retry_exit_codes": [0]}, "job_retry.retry_exit_codes[0]", id="exit-code-zero"
        ),
        pytest.param(
            {"retry_exit_codes": [137, 256]}, "job_retry.retry_exit_codes[1]", id="over-255"
        ),
        pytest.param(
            {"retry_exit_codes": ["x"]}, "job_retry.retry_exit_codes[0]", id="not-a-number"
        ),
        pytest.param({"max_attempt": 2}, "job_retry.max_attempt", id="unknown-key"),
    ],
)
def test_problems_name_the_key(section: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(job_retry=section)
    assert any(p.startswith(expected) for p in err.value.problems), err.value.problems


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(
            job_retry={"max_attempts": 0, "retry_exit_codes": [999]},
            aws={"interruption_queue_url": "sqs://nope"},
        )
    paths = [p.split(":")[0] for p in err.value.problems]
    assert any("job_retry.max_attempts" in p for p in paths)
    assert any("job_retry.retry_exit_codes[0]" in p for p in paths)
    assert any("aws.interruption_queue_url" in p for p in paths)

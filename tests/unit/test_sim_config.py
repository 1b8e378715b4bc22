"""The ``simulation`` config section: defaults, overrides, and every problem at once."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from autoscaler.config import parse_config
from autoscaler.config.simulation import (
    BootTime,
    Launches,
    LaunchTime,
    Outage,
    SimPoolConfig,
)
from autoscaler.errors import ConfigError
from tests.factories import config_doc


def raw(simulation: Any) -> dict[str, Any]:
    return config_doc(
        runner_types={
            "cpu": {"labels": ["self-hosted", "cpu"], "pools": ["ci-cpu"], "max": 50},
            "gpu": {"labels": ["self-hosted", "gpu"], "pools": ["gpu-spot", "gpu-od"]},
        },
        simulation=simulation,
    )


def test_defaults_when_the_section_is_absent() -> None:
    sim = parse_config(raw(None), env={}).simulation
    assert sim.boot_time == BootTime(p50=90.0, p95=240.0)
    assert sim.outages == () and sim.reaction is None and sim.seed == 0
    assert sim.pool("ci-cpu") == SimPoolConfig(name="ci-cpu")
    assert sim.launch_time == LaunchTime(p50=10.0, p95=30.0) and sim.boot_correlation == 0.5
    assert sim.launches == Launches(per_activity=100, retry=10.0, bucket=1000, refill=2.0)
    assert sim.billing_minimum == 60.0 and sim.poll_latency == 5.0


def test_a_full_section_reads_into_typed_values() -> None:
    sim = parse_config(
        raw(
            {
                "seed": 7,
                "boot_time": {"p50": "1m", "p95": "3m"},
                "pools": {"gpu-spot": {"boot_time": {"p50": "2m", "p95": "5m"}, "max_size": 40}},
                "outages": [
                    {"pool": "gpu-spot", "from": "10h", "to": "11h30m"},
                    {
                        "pool": "ci-cpu",
                        "from": "2026-11-30T14:00:00Z",
                        "to": "2026-11-30T15:00:00Z",
                    },
                    {"pool": "ci-cpu", "from": datetime(2026, 12, 1, 1), "to": "26h"},
                ],
                "reaction": "1s",
                "launch_time": {"p50": "5s", "p95": "20s"},
                "boot_correlation": 0,
                "launches": {"per_activity": 50, "retry": "30s", "bucket": 200, "refill": 0.5},
                "billing_minimum": "0s",
                "poll_latency": "2s",
            }
        ),
        env={},
    ).simulation
    assert sim.seed == 7 and sim.reaction == 1.0
    assert sim.launch_time == LaunchTime(p50=5.0, p95=20.0) and sim.boot_correlation == 0.0
    assert sim.launches == Launches(per_activity=50, retry=30.0, bucket=200, refill=0.5)
    assert sim.billing_minimum == 0.0 and sim.poll_latency == 2.0
    assert sim.boot_time == BootTime(p50=60.0, p95=180.0)
    assert sim.pool("gpu-spot") == SimPoolConfig(
        name="gpu-spot", boot_time=BootTime(p50=120.0, p95=300.0), max_size=40
    )
    assert sim.outages[0] == Outage(pool="gpu-spot", start=36000.0, end=41400.0)
    assert sim.outages[1].start == datetime(2026, 11, 30, 14, tzinfo=UTC)
    assert sim.outages[2] == Outage(
        pool="ci-cpu", start=datetime(2026, 12, 1, 1, tzinfo=UTC), end=93600.0
    )


def test_every_problem_is_reported_at_once_with_its_path() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(
            raw(
                {
                    "boot_time": {"p50": "3m", "p95": "1m"},
                    "pools": {"nope": {"max_size": 0}},
                    "outages": [
                        {"pool": "gpu-spot", "from": "5h", "to": "4h"},
                        {"pool": "elsewhere", "from": "1h", "to": "2h"},
                        {"pool": "gpu-spot", "from": "2026-13-01T00:00:00Z", "to": "1h"},
                        {"pool": "gpu-spot", "to": "1h"},
                        "down",
                    ],
                    "reaction": "0s",
                    "reacton": "1s",
                    "boot_correlation": 2,
                    "launches": {"per_activity": 0, "refill": 0, "burst": 3},
                    "launch_time": {"p50": "0s"},
                }
            ),
            env={},
        )
    problems = err.value.problems
    expected = [
        "simulation.boot_time.p95: must be at least p50 (180s)",
        "simulation.pools.nope: not a pool of any runner type",
        "simulation.pools.nope.max_size: must be >= 1, got 0",
        "simulation.outages[0]: from must be before to",
        "simulation.outages[1].pool: not a pool of any runner type",
        "simulation.outages[2].from: not an ISO-8601 time",
        "simulation.outages[3].from: is required",
        "simulation.outages[4]: must be a mapping, got a string",
        "simulation.reaction: must be greater than zero",
        "simulation.reacton: unknown key (did you mean 'reaction'?)",
        "simulation.boot_correlation: must be between 0 and 1, got 2",
        "simulation.launches.per_activity: must be >= 1, got 0",
        "simulation.launches.refill: must be greater than zero",
        "simulation.launches.burst: unknown key",
        "simulation.launch_time.p50: must be greater than zero",
    ]
    assert [p for p, text in zip(problems, expected, strict=True) if not p.startswith(text)] == []


@pytest.mark.parametrize("section", ["boot_time", "launch_time"])
def test_a_wrong_p50_is_the_one_problem_of_its_latency(section: str) -> None:
    """p95's default is taken from p50: a p50 found wrong used to add pydantic's "the
    default factory uses validated data" about a p95 nobody wrote."""
    with pytest.raises(ConfigError) as err:
        parse_config(raw({section: {"p50": "0s"}}), env={})
    assert err.value.problems == [f"simulation.{section}.p50: must be greater than zero"]

"""The oracle: the fewest runner-hours that start every job at once, knowing the future.

Jobs are (start, duration, boot): the boot a machine launched for that job would take.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence

import pytest

from autoscaler.config import parse_config
from autoscaler.sim.oracle import floor, waiting_seconds, zero_wait_seconds
from autoscaler.sim.trace import parse_trace

Jobs = Sequence[tuple[float, float, float]]


def brute_force(jobs: Jobs) -> float:
    """Every way to give each job a predecessor on its machine (or a fresh boot)."""
    ends = [s + d for s, d, _ in jobs]
    best = float("inf")

    def place(j: int, used: frozenset[int], cost: float) -> None:
        nonlocal best
        if cost >= best:
            return
        if j == len(jobs):
            best = cost
            return
        start, duration, boot = jobs[j]
        place(j + 1, used, cost + duration + boot)
        for i, end in enumerate(ends):
            if i != j and i not in used and end <= start:
                place(j + 1, used | {i}, cost + duration + start - end)

    place(0, frozenset(), 0.0)
    return best


@pytest.mark.parametrize(
    ("jobs", "seconds"),
    [
        ([(0, 100, 60)], 160),
        ([(0, 100, 60), (150, 10, 60)], 100 + 10 + 60 + 50),
        ([(0, 100, 60), (200, 10, 60)], 100 + 10 + 60 + 60),
        ([(0, 100, 60), (50, 10, 60)], 100 + 10 + 60 + 60),
        ([(0, 10, 100), (12, 100, 3), (50, 1, 100)], 10 + 100 + 1 + 100 + 3 + 40),
    ],
    ids=[
        "one-job-one-boot",
        "a-gap-shorter-than-a-boot-is-kept",
        "a-gap-longer-than-a-boot-stops-the-machine",
        "overlapping-jobs-need-two-machines",
        "a-cheap-boot-gives-its-machine-to-a-job-that-would-boot-slowly",
    ],
)
def test_zero_wait_by_hand(jobs: Jobs, seconds: float) -> None:
    assert zero_wait_seconds(sorted(jobs)) == pytest.approx(seconds)


def test_zero_wait_is_the_exact_minimum_on_random_small_traces() -> None:
    rng = random.Random(7)
    for _ in range(200):
        jobs = sorted(
            (
                float(rng.randint(0, 100)),
                float(rng.randint(1, 40)),
                float(rng.randint(5, 30)),
            )
            for _ in range(rng.randint(1, 6))
        )
        assert zero_wait_seconds(jobs) == pytest.approx(brute_force(jobs)), jobs


def test_a_job_that_may_wait_takes_a_machine_still_busy() -> None:
    jobs = [(0.0, 100.0, 60.0), (90.0, 10.0, 60.0)]
    assert zero_wait_seconds(jobs) == 230.0
    assert waiting_seconds(jobs, 5.0) == 230.0  # 10 s away: too long
    assert waiting_seconds(jobs, 10.0) == 170.0  # waits 10 s for it, no second boot


def config() -> object:
    return parse_config(
        {
            "github": {"owner": "o", "token": "t"},
            "runner_types": {
                "cpu": {"labels": ["cpu"], "pools": ["p1", "p2"]},
                "gpu": {"labels": ["gpu"], "pools": ["g1"]},
                "arm": {"labels": ["arm"]},
            },
            "simulation": {
                "boot_time": {"p50": "90s", "p95": "240s"},
                "pools": {"p2": {"boot_time": {"p50": "30s", "p95": "30s"}}},
            },
        },
        env={},
    )


def trace() -> object:
    lines = [
        json.dumps({"created_at": i * 60.0, "labels": [label], "duration": 300})
        for i in range(40)
        for label in ("cpu", "gpu", "arm", "nobody")
    ]
    return parse_trace(lines)


def test_the_floor_is_per_runner_type_with_pools_and_repeatable() -> None:
    c, t = config(), trace()
    first = floor(c, t)  # type: ignore[arg-type]
    assert [x.name for x in first.types] == ["cpu", "gpu"]  # arm has no pools
    cpu, gpu = first.types
    assert cpu.jobs == gpu.jobs == 40
    assert cpu.busy_hours == pytest.approx(40 * 300 / 3600)
    # a job every minute lasting five: five machines, each kept across its one-minute gaps
    assert cpu.zero_wait_hours > cpu.busy_hours
    assert first.zero_wait_hours == pytest.approx(cpu.zero_wait_hours + gpu.zero_wait_hours)
    # cpu's second pool boots in 30 s: the oracle launches there
    assert cpu.zero_wait_hours < gpu.zero_wait_hours
    assert floor(c, t) == first  # type: ignore[arg-type]
    hours = [p.runner_hours for p in first.frontier()]
    assert hours == sorted(hours, reverse=True) and hours[0] == first.zero_wait_hours

"""The arrival rate per observation, the boots new runners took, and what they ask for:
idle runners worth keeping, and ``min_idle.predict``'s warm runners (a Poisson quantile)."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from autoscaler.config.schedule import MinIdle, Prediction
from autoscaler.domain import Runner
from autoscaler.errors import ConfigError
from autoscaler.observe.queue import compute_queue
from autoscaler.scale.forecast import (
    BOOTS_KEPT,
    arrival_rate,
    boot_seconds,
    count_arrivals,
    count_boots,
    poisson_quantile,
    warm_runners,
)
from autoscaler.scale.plan import ScalingState
from autoscaler.sim.simulate import simulate
from autoscaler.sim.trace import parse_trace
from tests.factories import load_config

T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)
CPU = ["self-hosted", "cpu"]


def config(min_idle: Any = 0, **extra: Any) -> Any:
    return load_config(
        runner_types={"cpu": {"labels": CPU, "pools": ["p"], "min_idle": min_idle, **extra}},
        simulation={
            "boot_time": {"p50": "60s", "p95": "60s"},
            "launch_time": {"p50": "10s", "p95": "10s"},
            "poll_latency": "0s",
        },
    )


PREDICT = {"default": 0, "predict": {"window": "10m", "lead": "1m", "quantile": 0.9, "max": 6}}


@pytest.mark.parametrize(
    ("mean", "quantile", "k"),
    [(0.0, 0.9, 0), (1.0, 0.5, 1), (4.0, 0.5, 4), (4.0, 0.9, 7), (0.2, 0.9, 1), (0.1, 0.9, 0)],
    ids=["none", "one-median", "four-median", "four-p90", "rare-p90", "rarer-p90"],
)
def test_poisson_quantile(mean: float, quantile: float, k: int) -> None:
    assert poisson_quantile(mean, quantile) == k


def snapshot(now: datetime, queued_ages: list[float], runners: list[Runner]) -> Any:
    from autoscaler.domain import Job, JobStatus  # noqa: PLC0415

    jobs = [
        Job(i, i, "r", "j", frozenset(CPU), JobStatus.QUEUED, now - timedelta(seconds=age))
        for i, age in enumerate(queued_ages)
    ]
    c = config(PREDICT)
    return compute_queue(jobs, runners, [rt.runner_type for rt in c.runner_types], now)


def runner(rid: int, busy: bool) -> Runner:
    return Runner(rid, f"p-i-{rid:017x}", frozenset(CPU), True, busy)


def test_arrivals_are_new_queued_jobs_plus_idle_runners_that_took_a_job() -> None:
    c = config(PREDICT)
    first = count_arrivals(
        c, snapshot(T0, [], [runner(1, False)]), [runner(1, False)], ScalingState()
    )
    assert first.observed_at == T0 and first.arrivals == {}
    state = ScalingState(idle_since={1: T0, 2: T0}, observed_at=T0)
    now = T0 + timedelta(seconds=30)
    runners = [runner(1, True), runner(2, False), runner(3, True)]  # 3 was busy already
    after = count_arrivals(c, snapshot(now, [10, 25, 45], runners), runners, state)
    assert after.arrivals == {"cpu": ((now, 3),)}  # ages 10 and 25 (< 30 s) + runner 1
    assert arrival_rate(c.runner_types[0], after, now) == pytest.approx(3 / 600)


def test_arrivals_older_than_the_window_are_forgotten() -> None:
    c = config(PREDICT)
    now = T0 + timedelta(minutes=20)
    state = ScalingState(
        observed_at=now - timedelta(seconds=30),
        arrivals={"cpu": ((T0, 50), (now - timedelta(minutes=5), 12))},
    )
    after = count_arrivals(c, snapshot(now, [], []), [], state)
    assert after.arrivals["cpu"] == ((now - timedelta(minutes=5), 12), (now, 0))
    assert arrival_rate(c.runner_types[0], after, now) == pytest.approx(12 / 600)


def test_without_predict_arrivals_are_counted_and_min_idle_is_as_scheduled() -> None:
    """Every type's rate is watched (the scale-in weighs it); only predict warms runners."""
    c = config(2)
    first = count_arrivals(c, snapshot(T0, [1], []), [], ScalingState())
    assert first.watching_since == T0 and first.observed_at == T0
    now = T0 + timedelta(seconds=30)
    after = count_arrivals(c, snapshot(now, [10, 45], []), [], first)
    assert after.arrivals == {"cpu": ((now, 1),)} and after.watching_since == T0
    assert warm_runners(c.runner_types[0], after, now) == 2


@pytest.mark.parametrize(
    ("arrivals", "warm"),
    [(0, 1), (10, 2), (30, 5), (240, 6)],
    ids=["quiet-keeps-default", "1-a-minute", "3-a-minute", "24-a-minute-capped-at-max"],
)
def test_warm_runners_follow_the_rate_between_default_and_max(arrivals: int, warm: int) -> None:
    rt = config({**PREDICT, "default": 1}).runner_types[0]
    state = ScalingState(arrivals={"cpu": ((T0, arrivals),)})
    # arrivals over the 10 min window -> mean over the 1 min lead = arrivals / 10;
    # p90 of Poisson(1) is 2, of Poisson(3) 5, of Poisson(24) more than max (6)
    assert warm_runners(rt, state, T0 + timedelta(seconds=1)) == warm


def test_predicted_warm_runners_cut_the_queue_time_of_a_steady_stream() -> None:
    """A short job every 90 s: without prediction the idle runner goes after 20 s and every
    other job waits for a launch and a boot; with it, the arrival rate keeps warm runners."""
    lines = [
        json.dumps({"created_at": 615 + i * 90.0, "labels": CPU, "duration": 10})
        for i in range(120)
    ]
    trace = parse_trace(lines)
    plain = simulate(config(0, idle_timeout="20s"), trace)
    warm = simulate(config({"predict": {"lead": "2m"}}, idle_timeout="20s"), trace)
    assert plain.p50_queue_seconds > 30 and warm.p50_queue_seconds == 0.0
    assert warm.runner_hours > plain.runner_hours  # what it costs


def test_predict_reads_from_yaml_and_counts_in_the_max_check() -> None:
    rt = config(PREDICT).runner_types[0]
    assert rt.min_idle == MinIdle(
        default=0, predict=Prediction(window=600.0, lead=60.0, quantile=0.9, max=6)
    )
    assert config({"predict": {}}).runner_types[0].min_idle.predict == Prediction()
    with pytest.raises(ConfigError) as err:
        config({"predict": {"quantile": 1.5, "window": "0s", "max": 50}}, max=10)
    # In file order, and an already-invalid min_idle is not blamed again against max.
    assert err.value.problems == [
        "runner_types.cpu.min_idle.predict.quantile: must be between 0 and 1 (exclusive), got 1.5",
        "runner_types.cpu.min_idle.predict.window: must be greater than zero",
    ]
    with pytest.raises(ConfigError) as err:
        config({"predict": {"max": 50}}, max=10)
    assert err.value.problems == ["runner_types.cpu.min_idle: must not exceed max (10)"]


def test_a_new_runner_records_how_long_its_instance_took_to_register() -> None:
    c = config()
    rt = c.runner_types[0]
    launched = {f"i-{rid:017x}": T0 - timedelta(seconds=100 + rid) for rid in range(1, 30)}
    first = count_boots(c, [runner(1, False)], launched, ScalingState(), T0)
    assert first.registered == {1} and first.boots == {}  # who was there: not new
    assert boot_seconds(rt, first) == rt.idle_timeout  # nothing seen yet: about one boot
    seen = replace(first, observed_at=T0)
    later = T0 + timedelta(seconds=30)
    after = count_boots(c, [runner(1, False), runner(2, True)], launched, seen, later)
    assert after.boots == {"cpu": (132.0,)} and after.registered == {1, 2}
    many = [runner(rid, False) for rid in range(1, 30)]
    full = count_boots(c, many, launched, replace(after, observed_at=later), later)
    assert len(full.boots["cpu"]) == BOOTS_KEPT
    assert boot_seconds(rt, full) == pytest.approx(statistics.median(full.boots["cpu"]))

"""The retry policy: bounded attempts, a deadline, full jitter, retry_after, error classes."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.config import RetryConfig
from autoscaler.errors import (
    AuthenticationError,
    AutoscalerError,
    CapacityError,
    DeferredError,
    PermanentError,
    RateLimitedError,
    RejectedError,
    TransientError,
)
from autoscaler.retrying import RetryPolicy, backoff_cap
from autoscaler.telemetry import Metrics


class FakeTime:
    """An injected clock and sleep: sleeping advances the clock, nothing waits."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def monotonic(self) -> float:
        return self.now


class Flaky:
    """Raises the given errors in turn, then returns "ok"; counts calls."""

    def __init__(self, *errors: Exception, cost: float = 0.0, clock: FakeTime | None = None):
        self.errors = list(errors)
        self.calls = 0
        self.cost, self.clock = cost, clock

    def __call__(self) -> str:
        self.calls += 1
        if self.clock is not None:
            self.clock.now += self.cost
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def policy(
    t: FakeTime,
    metrics: Metrics | None = None,
    seed: int = 7,
    *,
    max_attempts: int = 4,
    deadline: float = 30.0,
    initial_backoff: float = 0.5,
    max_backoff: float = 8.0,
) -> RetryPolicy:
    cfg = RetryConfig(
        max_attempts=max_attempts,
        deadline=deadline,
        initial_backoff=initial_backoff,
        max_backoff=max_backoff,
    )
    return RetryPolicy(cfg, metrics, sleep=t.sleep, rng=random.Random(seed), monotonic=t.monotonic)


def transient() -> TransientError:
    return TransientError("boom", code="Throttling")


def test_transient_retried_until_success() -> None:
    t = FakeTime()
    fn = Flaky(transient(), transient())
    assert policy(t).call(fn) == "ok"
    assert fn.calls == 3
    assert len(t.sleeps) == 2


def test_attempts_are_bounded_and_last_error_reraised() -> None:
    t = FakeTime()
    last = TransientError("last", code="ServiceUnavailable")
    fn = Flaky(transient(), transient(), transient(), last, transient())
    with pytest.raises(TransientError) as info:
        policy(t).call(fn)
    assert info.value is last
    assert fn.calls == 4
    assert len(t.sleeps) == 3


@pytest.mark.parametrize("seed", range(20))
def test_full_jitter_waits_within_exponential_caps(seed: int) -> None:
    t = FakeTime()
    fn = Flaky(*(transient() for _ in range(10)))
    with pytest.raises(TransientError):
        policy(t, seed=seed, max_attempts=8, deadline=1000.0).call(fn)
    caps = [backoff_cap(RetryConfig(initial_backoff=0.5, max_backoff=8.0), n) for n in range(1, 8)]
    assert caps == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert len(t.sleeps) == 7
    assert all(0.0 <= s <= cap for s, cap in zip(t.sleeps, caps, strict=True))


def test_jitter_is_spread_not_fixed() -> None:
    waits = set()
    for seed in range(10):
        t = FakeTime()
        policy(t, seed=seed).call(Flaky(transient()))
        waits.add(round(t.sleeps[0], 6))
    assert len(waits) == 10


def test_deadline_stops_before_an_attempt_would_start_late() -> None:
    t = FakeTime()
    fn = Flaky(*(transient() for _ in range(10)), cost=4.0, clock=t)
    with pytest.raises(TransientError):
        policy(t, max_attempts=100, deadline=10.0, initial_backoff=1.0, max_backoff=1.0).call(fn)
    # every attempt costs 4s and each wait is at most 1s: no attempt starts after 10s
    assert fn.calls == 3
    assert t.now <= 10.0 + 4.0


def test_retry_after_is_honoured() -> None:
    t = FakeTime()
    policy(t).call(Flaky(RateLimitedError("slow down", code="Throttling", retry_after=5.0)))
    assert t.sleeps == [5.0]  # the jitter (at most 0.5s here) never shortens the hint


def test_retry_after_past_the_deadline_gives_up_without_sleeping() -> None:
    t = FakeTime()
    fn = Flaky(RateLimitedError("slow down", retry_after=60.0))
    with pytest.raises(RateLimitedError):
        policy(t, deadline=30.0).call(fn)
    assert fn.calls == 1
    assert t.sleeps == []


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(DeferredError("busy", code="ScalingActivityInProgress"), id="deferred"),
        pytest.param(CapacityError("none", code="InsufficientInstanceCapacity"), id="capacity"),
        pytest.param(PermanentError("no", code="ValidationError"), id="permanent"),
        pytest.param(AuthenticationError("no", code="AccessDenied"), id="auth"),
        pytest.param(RejectedError("busy runner", code="422"), id="rejected"),
        pytest.param(ValueError("a bug"), id="not-ours"),
    ],
)
def test_non_transient_errors_are_never_retried(error: Exception) -> None:
    t = FakeTime()
    fn = Flaky(error)
    with pytest.raises(type(error)):
        policy(t).call(fn)
    assert fn.calls == 1
    assert t.sleeps == []


def test_retries_and_failures_counted_by_pool_and_class() -> None:
    t = FakeTime()
    m = Metrics(CollectorRegistry())
    p = policy(t, m)
    p.call(Flaky(transient(), RateLimitedError("x")), pool="gpu-spot")
    with pytest.raises(AutoscalerError):
        p.call(Flaky(CapacityError("x")), pool="gpu-spot")

    def value(name: str, **labels: str) -> float | None:
        return m.registry.get_sample_value(name, labels)

    assert value("ci_autoscaler_cloud_retries_total", pool="gpu-spot", error_class="transient") == 1
    assert (
        value("ci_autoscaler_cloud_retries_total", pool="gpu-spot", error_class="rate_limited") == 1
    )
    assert value("ci_autoscaler_cloud_failures_total", pool="gpu-spot", error_class="capacity") == 1

"""Capacity asked -> runner online, per pool: each ask answered once, oldest first."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from autoscaler.scale.provisioning import ProvisioningClock

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_runners_answer_asks_oldest_first() -> None:
    clock = ProvisioningClock()
    assert clock.observed([(1, "cpu")], at(0)) == []  # already online before any ask
    clock.asked("cpu", 2, at(10))
    clock.asked("cpu", 1, at(40))
    assert clock.observed([(1, "cpu"), (2, "cpu")], at(100)) == [("cpu", 90.0)]
    assert clock.observed([(1, "cpu"), (2, "cpu"), (3, "cpu"), (4, "cpu")], at(160)) == [
        ("cpu", 150.0),
        ("cpu", 120.0),
    ]
    assert clock.pending("cpu") == 0


def test_a_runner_seen_again_or_in_another_pool_answers_nothing() -> None:
    clock = ProvisioningClock()
    clock.observed([], at(0))
    clock.asked("gpu", 1, at(0))
    assert clock.observed([(7, "cpu")], at(30)) == []  # no ask in cpu
    assert clock.observed([(7, "cpu")], at(60)) == []
    assert clock.pending("gpu") == 1


def test_released_capacity_and_old_asks_are_forgotten() -> None:
    """The pool gave two asked instances back after a failed launch: they will never come,
    so they must not be paired with a runner that boots much later."""
    clock = ProvisioningClock(horizon=3600)
    clock.observed([], at(0))
    clock.asked("spot", 3, at(0))
    clock.released("spot", 2)
    assert clock.pending("spot") == 1
    clock.released("spot", 5)  # never below zero
    assert clock.pending("spot") == 0
    clock.asked("spot", 1, at(10))
    assert clock.observed([], at(4000)) == []  # past the horizon: forgotten
    assert clock.pending("spot") == 0


def test_asks_per_pool_are_bounded() -> None:
    clock = ProvisioningClock(max_asks=5)
    clock.asked("cpu", 50, at(0))
    assert clock.pending("cpu") == 5

"""The loop with webhooks: a notify ends the wait early (after the debounce), and the
loop also wakes when the reconcile is due, whatever the poll interval says."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

from autoscaler.app.service import Wakeup, run_loop
from autoscaler.controller import Controller
from autoscaler.errors import TransientError
from autoscaler.telemetry import Metrics
from tests.unit.test_controller import FakeSource, config

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


def _run(controller: Controller, stop: threading.Event, **kwargs: object) -> threading.Thread:
    thread = threading.Thread(
        target=run_loop, args=(controller, 3600.0, stop), kwargs={"clock": lambda: T0, **kwargs}
    )
    thread.start()
    return thread


def _wait_calls(source: FakeSource, count: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if source.calls >= count:
            return True
        time.sleep(0.01)
    return False


def test_a_notify_wakes_an_hour_long_wait() -> None:
    source = FakeSource([TransientError("down")])
    controller = Controller(config(), source, Metrics())
    stop, wake = threading.Event(), Wakeup(debounce=0.05)
    thread = _run(controller, stop, wake=wake)
    try:
        assert _wait_calls(source, 1)
        wake.notify()
        assert _wait_calls(source, 2), "the notify did not end the hour-long wait"
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()  # the stop ends a woken-capable wait too


def test_the_loop_wakes_when_the_reconcile_is_due() -> None:
    source = FakeSource([TransientError("down")])
    controller = Controller(config(), source, Metrics())
    stop = threading.Event()
    thread = _run(controller, stop, wake=Wakeup(), due_in=lambda _now: 0.05)
    try:
        assert _wait_calls(source, 3), "due_in did not shorten the hour-long wait"
    finally:
        stop.set()
        thread.join(10)


def test_a_notify_during_a_long_tick_needs_no_debounce_after_it() -> None:
    """Reaction time at load 7 missed p95 < 1 s: a queued event that arrived
    while a tick ran waited for the tick, then a whole debounce (200 ms) more, though
    the burst it debounces had long come in. The debounce now counts from the first
    notify: after a tick longer than it, the next tick starts at once."""
    wake, stop = Wakeup(debounce=0.2), threading.Event()
    wake.notify()
    stop.wait(0.3)  # the tick the notify arrived during
    started = time.monotonic()
    wake.wait(30.0, stop)
    assert time.monotonic() - started < 0.15
    wake.notify()  # the next burst is debounced again
    started = time.monotonic()
    wake.wait(30.0, stop)
    assert time.monotonic() - started >= 0.15

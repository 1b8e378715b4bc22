"""The long-running loop: tick every poll interval until told to stop.

The loop never dies of a failed tick; SIGTERM/SIGINT set the stop event, which wakes the
wait at once, so the process stops within one interval (usually at once).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from types import FrameType

from autoscaler.controller import Controller

log = logging.getLogger(__name__)


def utc_now() -> datetime:
    return datetime.now(UTC)


def run_loop(
    controller: Controller,
    interval: float,
    stop: threading.Event,
    *,
    clock: Callable[[], datetime] = utc_now,
    on_tick: Callable[[], None] | None = None,
    max_ticks: int | None = None,
    wake: threading.Event | None = None,
) -> int:
    """Tick until ``stop`` is set (or ``max_ticks``); returns the number of ticks run.

    ``wake`` set (the lease keeper: this controller just became the leader) starts the
    next tick at once instead of at the end of the interval; :func:`stop_on_signals`
    sets it too, so a stop is not held up by the wait."""
    ticks = 0
    while not stop.is_set():
        started = time.monotonic()
        try:
            controller.tick(clock())
            if on_tick is not None:
                on_tick()
        except Exception:
            log.exception("tick failed; the loop goes on")
            controller.reporter.stage_failed("tick")
        ticks += 1
        if max_ticks is not None and ticks >= max_ticks:
            break
        left = max(0.0, interval - (time.monotonic() - started))
        if wake is None:
            stop.wait(left)
        elif wake.wait(left):
            wake.clear()
    return ticks


def stop_on_signals(stop: threading.Event, wake: threading.Event | None = None) -> None:
    """SIGTERM and SIGINT end the loop cleanly (``wake``: the loop's wake-up, set too)."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()
        if wake is not None:
            wake.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)

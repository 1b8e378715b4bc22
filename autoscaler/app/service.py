"""The long-running loop: tick every poll interval until told to stop.

The loop never dies of a failed tick; SIGTERM/SIGINT set the stop event, which wakes the
wait at once, so the process stops within one interval (usually at once).

With webhooks a :class:`Wakeup` ends the wait early: a queued event calls
:meth:`Wakeup.notify`, the loop waits ``debounce`` more for the rest of a burst (a
100-job matrix is one tick, one scale-up) and ticks. Woken ticks are spaced by at least
the last tick's length, so a stream of deliveries never keeps the loop ticking back to
back.

Ticks never overlap: one thread runs them in turn. A tick longer than the interval (a
first poll of a large org, a slow cloud API) is logged and counted
(``ci_autoscaler_tick_overruns_total``), and the next one starts at once: the loop
keeps to its interval as closely as a tick allows, without piling ticks up.
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


class Wakeup:
    """Ends the loop's wait early; thread-safe. :meth:`notify` (a queued webhook) is
    debounced, :meth:`set` (a new leader, a stop signal) is not: it is the ``wake`` event
    of :func:`run_loop` and :func:`stop_on_signals`, with a debounced way in."""

    #: How often a woken-capable wait looks at the stop event (seconds).
    STOP_CHECK = 0.1

    def __init__(self, debounce: float = 0.2) -> None:
        self.debounce = debounce
        self._event = threading.Event()
        self._now = False
        self._lock = threading.Lock()
        self._first: float | None = None

    def notify(self) -> None:
        """Wake the loop ``debounce`` after the first notify since it last woke (the rest
        of a burst comes with it; a notify that came during a tick longer than the
        debounce has waited enough: the next tick starts at once)."""
        with self._lock:
            if self._first is None:
                self._first = time.monotonic()
        self._event.set()

    def set(self) -> None:
        """Wake the loop at once."""
        self._now = True
        self._event.set()

    def wait(self, timeout: float, stop: threading.Event, *, rest: float = 0.0) -> None:
        """Until ``timeout`` passes, ``stop`` is set, a :meth:`set`, or a :meth:`notify`:
        then ``debounce`` more, and at least ``rest`` after this wait began. ``rest`` is
        the last tick's length: under a stream of deliveries woken ticks take at most half
        of the loop's time, so a tick that grew costly leaves the listener the other half,
        and a cheap one still starts ``debounce`` after the first delivery."""
        began = time.monotonic()
        deadline = began + timeout
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self._event.wait(min(left, self.STOP_CHECK)):
                if not self._now:
                    with self._lock:
                        first = time.monotonic() if self._first is None else self._first
                    due = min(deadline, max(first + self.debounce, began + rest))
                    stop.wait(max(0.0, due - time.monotonic()))
                with self._lock:
                    self._now, self._first = False, None
                    self._event.clear()
                return


def run_loop(
    controller: Controller,
    interval: float,
    stop: threading.Event,
    *,
    clock: Callable[[], datetime] = utc_now,
    on_tick: Callable[[], None] | None = None,
    max_ticks: int | None = None,
    wake: threading.Event | Wakeup | None = None,
    due_in: Callable[[datetime], float | None] | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> int:
    """Tick until ``stop`` is set (or ``max_ticks``); returns the number of ticks run.

    ``wake`` set (the lease keeper: this controller just became the leader) starts the
    next tick at once instead of at the end of the interval; :func:`stop_on_signals`
    sets it too, so a stop is not held up by the wait. A :class:`Wakeup` also takes
    debounced notifies (a queued webhook). ``due_in``: seconds until something is due
    (the webhooks' reconcile): the wait ends then, if sooner. ``monotonic``: the clock
    that times each tick."""
    ticks = 0
    while not stop.is_set():
        started = monotonic()
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
        took = monotonic() - started
        if took > interval:
            log.warning(
                "tick took %.1fs, longer than the %.0fs poll interval; the next one starts now",
                took,
                interval,
            )
            controller.reporter.tick_overran()
        left = max(0.0, interval - took)
        due = due_in(clock()) if due_in is not None else None
        if due is not None:
            left = max(0.0, min(left, due))
        if wake is None:
            stop.wait(left)
        elif isinstance(wake, Wakeup):
            wake.wait(left, stop, rest=took)
        elif wake.wait(left):
            wake.clear()
    return ticks


def stop_on_signals(stop: threading.Event, wake: threading.Event | Wakeup | None = None) -> None:
    """SIGTERM and SIGINT end the loop cleanly (``wake``: the loop's wake-up, set too)."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()
        if wake is not None:
            wake.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)

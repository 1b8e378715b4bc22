"""One retry policy for every outbound call (AWS, GitHub, alert receivers), on tenacity.

- The error's class decides what is retried: :class:`TransientError` (and its kinds) is;
  :class:`DeferredError`, :class:`CapacityError` and :class:`PermanentError` go straight
  to the caller, who knows what they mean.
- Bounded: at most ``max_attempts`` attempts, the first included.
- A deadline: no wait is begun that would end past it (``deadline`` seconds after the
  first attempt started, or the caller's ``deadline_at`` on the monotonic clock).
- Exponential backoff with full jitter: the wait after failed attempt ``n`` is drawn
  uniformly from ``[0, min(max_backoff, initial_backoff * 2 ** (n - 1))]``.
- The peer's word, through a :data:`Hint`: the wait is at least what the peer asked for
  (by default the error's ``retry_after``). A hint of ``math.inf`` means "not within this
  call": the call stops at once. GitHub passes its own hint (its rate limits and
  ``Retry-After`` rules, :mod:`autoscaler.observe.github.ratelimit`).

The sleep, the clock and the random generator are injected, so tests run in no time and
are deterministic. AWS calls count retries in ``cloud_retries{pool,error_class}`` and calls
that fail for good in ``cloud_failures{pool,error_class}`` (``error_class`` is the error's
bounded ``kind``); other callers count through ``on_retry``.

botocore's own retries are set to ``AwsConfig.botocore_max_attempts`` (default 1), so one
logical AWS call costs at most ``max_attempts * botocore_max_attempts`` HTTP requests.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception_type

from autoscaler.errors import AutoscalerError, TransientError
from autoscaler.telemetry import Metrics

T = TypeVar("T")

log = logging.getLogger(__name__)

#: Seconds the peer asked us to wait before trying again after this error (None: it did
#: not say; ``math.inf``: not within this call).
Hint = Callable[[BaseException], float | None]


class Backoff(Protocol):
    """What the policy reads from its settings (``RetryConfig`` has these)."""

    @property
    def max_attempts(self) -> int: ...
    @property
    def deadline(self) -> float: ...
    @property
    def initial_backoff(self) -> float: ...
    @property
    def max_backoff(self) -> float: ...


def retry_after(error: BaseException) -> float | None:
    """The default hint: a transient error's ``retry_after``."""
    return error.retry_after if isinstance(error, TransientError) else None


def backoff_cap(config: Backoff, attempt: int) -> float:
    """The upper bound of the full-jitter wait after failed attempt ``attempt`` (1-based)."""
    exponent = min(max(attempt - 1, 0), 62)
    return float(min(config.max_backoff, config.initial_backoff * (2.0**exponent)))


class RetryPolicy:
    """Runs a callable, retrying :class:`TransientError` with bounded, jittered backoff."""

    def __init__(
        self,
        config: Backoff,
        metrics: Metrics | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        hint: Hint = retry_after,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self._sleep = sleep
        self._rng = rng if rng is not None else random.Random()  # noqa: S311 (jitter, not crypto)
        self._monotonic = monotonic
        self._hint = hint

    def wait_for(self, attempt: int, error: BaseException | None) -> float:
        """The wait before the next attempt after failed attempt ``attempt`` (1-based)."""
        wait = self._rng.uniform(0.0, backoff_cap(self.config, attempt))
        asked = None if error is None else self._hint(error)
        return wait if asked is None else max(wait, asked)

    def call(
        self,
        fn: Callable[[], T],
        *,
        pool: str = "",
        operation: str = "",
        deadline_at: float | None = None,
        attempts: int | None = None,
        on_retry: Callable[[BaseException], None] | None = None,
    ) -> T:
        """``fn()``, retried on TransientError; the last error is re-raised unchanged.

        ``deadline_at``: the monotonic time no wait may end past (default: ``deadline``
        seconds from now); ``attempts``: this call's bound (default ``max_attempts``);
        ``on_retry``: told of each error about to be retried."""
        most = self.config.max_attempts if attempts is None else attempts
        if deadline_at is None:
            deadline_at = self._monotonic() + self.config.deadline

        def wait(rs: RetryCallState) -> float:
            error = rs.outcome.exception() if rs.outcome is not None else None
            return self.wait_for(rs.attempt_number, error)

        def stop(rs: RetryCallState) -> bool:
            if rs.attempt_number >= most or math.isinf(rs.upcoming_sleep):
                return True
            return self._monotonic() + rs.upcoming_sleep > deadline_at

        def before_sleep(rs: RetryCallState) -> None:
            error = rs.outcome.exception() if rs.outcome is not None else None
            kind = error.kind if isinstance(error, AutoscalerError) else "unknown"
            if on_retry is not None and error is not None:
                on_retry(error)
            if self.metrics is not None:
                self.metrics.cloud_retries.labels(pool, kind).inc()
            log.info(
                "retrying %s on %s after %s (%s), attempt %d, waiting %.2fs",
                operation or "call",
                pool or "-",
                kind,
                error.code if isinstance(error, AutoscalerError) else "",
                rs.attempt_number,
                rs.upcoming_sleep,
            )

        retrying = Retrying(
            retry=retry_if_exception_type(TransientError),
            wait=wait,
            stop=stop,
            sleep=self._sleep,
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            return retrying(fn)
        except AutoscalerError as exc:
            if self.metrics is not None:
                self.metrics.cloud_failures.labels(pool, exc.kind).inc()
            raise

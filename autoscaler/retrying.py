"""One retry policy for every cloud call, built on tenacity from :class:`RetryConfig`.

- bounded: at most ``max_attempts`` attempts, the first included;
- a deadline: no attempt starts (and no wait is begun) that would end past ``deadline``
  seconds after the first attempt started;
- exponential backoff with full jitter: the wait before attempt ``n + 1`` is drawn
  uniformly from ``[0, min(max_backoff, initial_backoff * 2 ** (n - 1))]``; when the peer
  sent a ``retry_after`` hint the wait is at least that long;
- only :class:`TransientError` is retried. :class:`DeferredError`, :class:`CapacityError`
  and :class:`PermanentError` go straight to the caller, who knows what they mean.

The sleep, the clock and the random generator are injected, so tests run in no time and
are deterministic. Retries are counted in ``cloud_retries{pool,error_class}`` and calls
that fail for good in ``cloud_failures{pool,error_class}`` (``error_class`` is the error's
bounded ``kind``).

botocore's own retries are set to ``AwsConfig.botocore_max_attempts`` (default 1), so one
logical call costs at most ``max_attempts * botocore_max_attempts`` HTTP requests.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception_type

from autoscaler.config import RetryConfig
from autoscaler.errors import AutoscalerError, TransientError
from autoscaler.telemetry import Metrics

T = TypeVar("T")

log = logging.getLogger(__name__)


def backoff_cap(config: RetryConfig, attempt: int) -> float:
    """The upper bound of the full-jitter wait after failed attempt ``attempt`` (1-based)."""
    exponent = min(max(attempt - 1, 0), 62)
    return float(min(config.max_backoff, config.initial_backoff * (2.0**exponent)))


class RetryPolicy:
    """Runs a callable, retrying :class:`TransientError` with bounded, jittered backoff."""

    def __init__(
        self,
        config: RetryConfig,
        metrics: Metrics | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self._sleep = sleep
        self._rng = rng if rng is not None else random.Random()  # noqa: S311 (jitter, not crypto)
        self._monotonic = monotonic

    def wait_for(self, attempt: int, error: BaseException | None) -> float:
        """The wait before the next attempt after failed attempt ``attempt`` (1-based)."""
        wait = self._rng.uniform(0.0, backoff_cap(self.config, attempt))
        if isinstance(error, TransientError) and error.retry_after is not None:
            wait = max(wait, float(error.retry_after))
        return wait

    def call(self, fn: Callable[[], T], *, pool: str = "", operation: str = "") -> T:
        """``fn()``, retried on TransientError; the last error is re-raised unchanged."""
        started = self._monotonic()

        def wait(rs: RetryCallState) -> float:
            error = rs.outcome.exception() if rs.outcome is not None else None
            return self.wait_for(rs.attempt_number, error)

        def stop(rs: RetryCallState) -> bool:
            if rs.attempt_number >= self.config.max_attempts:
                return True
            elapsed = self._monotonic() - started
            return elapsed + rs.upcoming_sleep > self.config.deadline

        def before_sleep(rs: RetryCallState) -> None:
            error = rs.outcome.exception() if rs.outcome is not None else None
            kind = error.kind if isinstance(error, AutoscalerError) else "unknown"
            code = error.code if isinstance(error, AutoscalerError) else ""
            if self.metrics is not None:
                self.metrics.cloud_retries.labels(pool, kind).inc()
            log.info(
                "retrying %s on pool %s after %s (%s), attempt %d, waiting %.2fs",
                operation or "call",
                pool or "-",
                kind,
                code,
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

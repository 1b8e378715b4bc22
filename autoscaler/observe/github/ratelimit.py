"""GitHub's rate limits and ``Retry-After`` at the adapter edge: one gate every request passes.

GitHub's documentation ("Rate limits for the REST API", "Exceeding the rate limit"):

- **Primary**: a 403 or 429 with ``x-ratelimit-remaining: 0``. No request may be sent
  before ``x-ratelimit-reset`` (UTC epoch seconds). ``GET /rate_limit`` does not count
  against the limit and is always allowed.
- **Secondary**: a 403 or 429 whose message says a secondary rate limit was exceeded
  (``Retry-After`` is optional). Wait ``Retry-After`` seconds when given, else at least
  a minute, and exponentially longer while it keeps happening.
- **A 5xx with** ``Retry-After``: no request to that endpoint before then.

A rate limit pauses **every** worker: the gate is shared, so no thread keeps sending while
another waits. The gate never sleeps: :meth:`RateGate.before` raises, and the one retry
policy (:mod:`autoscaler.retrying`) decides with :meth:`RateGate.hint`. A rate-limit pause
that ends before the call's deadline is slept there (through :meth:`RateGate.sleep`); a
longer one ends the call with :class:`RateLimitedError`, so no sleep inside a tick is
longer than the tick's own deadline: the tick ends with what it has and the next tick
starts after the pause. A 5xx's ``Retry-After`` is never slept: the call ends with a
:class:`TransientError` carrying it, and the endpoint stays closed across ticks until then.

GitHub says "secondary" only in its message; telling the two limits apart by it happens
here, at the edge, and nowhere above: callers see the error's type and ``retry_after``.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping

from autoscaler.errors import RateLimitedError, TransientError
from autoscaler.observe.github.budget import Limits
from autoscaler.telemetry import Metrics

log = logging.getLogger("autoscaler.observe.github")

#: The first secondary-limit pause without ``Retry-After`` (GitHub: "at least one minute").
SECONDARY_INITIAL = 60.0
#: Cap of the doubling secondary-limit pause.
SECONDARY_MAX = 3600.0


def classify(status: int, headers: Mapping[str, str], message: str) -> str | None:
    """``primary``, ``secondary`` or None (not a rate limit) for one error response."""
    if status not in (403, 429):
        return None
    if headers.get("x-ratelimit-remaining") == "0":
        return "primary"
    if status == 429 or "retry-after" in headers or "rate limit" in message.lower():
        return "secondary"
    return None


def _number(text: str | None) -> float | None:
    try:
        return None if text is None else float(text)
    except ValueError:
        return None


class RateGate:
    """Shared by the source's workers: when may the next request go out, and to where."""

    def __init__(
        self,
        metrics: Metrics,
        wall_clock: Callable[[], float],
        sleep: Callable[[float], None],
    ) -> None:
        self._metrics = metrics
        self._wall_clock = wall_clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._until = 0.0
        self._kind = ""
        self._strikes = 0
        self._limits = Limits()
        #: Endpoint -> wall time before which it gets no request (a 5xx's Retry-After).
        self._endpoints: dict[str, float] = {}

    @property
    def limits(self) -> Limits:
        with self._lock:
            return self._limits

    def blocked_for(self) -> float:
        """Seconds until requests may go out again (0: now)."""
        with self._lock:
            return max(0.0, self._until - self._wall_clock())

    def before(self, where: str, endpoint: str, *, exempt: bool = False) -> None:
        """Call before each request: returns when it may go out, else raises
        RateLimitedError (every request waits) or TransientError (this endpoint waits for
        a 5xx's ``Retry-After``), each with the seconds left as ``retry_after``.
        ``exempt``: a request the rate limit does not count (``GET /rate_limit``)."""
        now = self._wall_clock()
        with self._lock:
            wait, kind = self._until - now, self._kind
            closed = self._endpoints.get(endpoint, 0.0) - now
        if wait > 0 and not exempt:
            raise RateLimitedError(
                f"GitHub {where}: {kind} rate limit, no request before {wait:.0f}s from now",
                code=kind,
                retry_after=wait,
            )
        if closed > 0:
            raise TransientError(
                f"GitHub {where}: GitHub asked for no request before {closed:.0f}s from now",
                code="retry_after",
                retry_after=closed,
            )

    def hint(self, error: BaseException) -> float | None:
        """GitHub's rules as the retry policy's wait: a rate limit's pause (slept when it
        fits the call's deadline); a 5xx's ``Retry-After`` never within the call."""
        if isinstance(error, RateLimitedError):
            return error.retry_after
        if isinstance(error, TransientError) and error.retry_after is not None:
            return math.inf
        return None

    def sleep(self, seconds: float) -> None:
        """The retry policy's sleep: a rate-limit pause it covered is then over for every
        worker (the injected wall clock need not move with the injected sleep)."""
        with self._lock:
            until, started = self._until, self._wall_clock()
        self._sleep(seconds)
        if until and started + seconds >= until:
            with self._lock:
                if self._until == until:
                    self._until = 0.0

    def close_endpoint(self, endpoint: str, seconds: float, where: str) -> None:
        """A 5xx with ``Retry-After``: no request to ``endpoint`` for ``seconds``."""
        until = self._wall_clock() + seconds
        with self._lock:
            first = until > self._endpoints.get(endpoint, 0.0)
            self._endpoints[endpoint] = max(until, self._endpoints.get(endpoint, 0.0))
        self._metrics.github_rate_limit_pauses.labels("retry_after").inc()
        if first:
            log.warning(
                "GitHub %s: asked to retry after %.0fs; no %s request before %.0f",
                where,
                seconds,
                endpoint,
                until,
            )

    def observe(self, headers: Mapping[str, str]) -> None:
        """Remember the primary limit a response reports (``x-ratelimit-*``, core only)."""
        if headers.get("x-ratelimit-resource", "core") != "core":
            return
        limit = _number(headers.get("x-ratelimit-limit"))
        remaining = _number(headers.get("x-ratelimit-remaining"))
        reset = _number(headers.get("x-ratelimit-reset"))
        if limit is None and remaining is None:
            return
        with self._lock:
            old = self._limits
            self._limits = Limits(
                int(limit) if limit is not None else old.limit,
                int(remaining) if remaining is not None else old.remaining,
                reset if reset is not None else old.reset,
            )

    def succeeded(self) -> None:
        """A request went through: the secondary back-off starts over."""
        if self._strikes:
            with self._lock:
                self._strikes = 0

    def hit(self, kind: str, headers: Mapping[str, str], where: str) -> float:
        """A rate-limit answer: pause every worker. Returns the pause in seconds."""
        now = self._wall_clock()
        retry_after = _number(headers.get("retry-after"))
        with self._lock:
            if kind == "primary":
                reset = _number(headers.get("x-ratelimit-reset"))
                pause = max(
                    retry_after or 0.0,
                    (reset - now) if reset is not None else SECONDARY_INITIAL,
                )
            else:
                self._strikes += 1
                backoff = min(SECONDARY_MAX, SECONDARY_INITIAL * 2 ** (self._strikes - 1))
                pause = retry_after if retry_after is not None else backoff
            pause = max(0.0, pause)
            first = now + pause > self._until
            self._until = max(self._until, now + pause)
            self._kind = kind
        self._metrics.github_rate_limit_pauses.labels(kind).inc()
        if first:
            log.warning(
                "GitHub %s: %s rate limit; every request waits %.0fs (until %.0f)",
                where,
                kind,
                pause,
                now + pause,
            )
        return pause

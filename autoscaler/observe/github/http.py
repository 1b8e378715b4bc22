"""One instrumented HTTP helper for every GitHub call: auth, rate gate, ETag cache, errors.

- Every request is counted in ``github_requests_total{endpoint,status}`` and timed.
- A GET of a listing page is conditional when its URL is cached: a ``304`` reuses the
  compact record (a 304 costs no rate limit) and the 304's ``Link``, else the cached one.
  A 200 is parsed once into a record; the body is dropped.
- A body over :data:`MAX_PAGE_BYTES` is refused before it is parsed (by ``Content-Length``
  or while reading); invalid or too deeply nested JSON is a :class:`BadPage`.
- Rate limits go through the shared :class:`RateGate` (primary: nothing before the reset;
  secondary: every worker pauses, doubling from 60 s); a wait longer than the time the
  poll has left raises :class:`RateLimitedError`.
- 5xx, timeouts and connection errors: retried with full-jitter backoff, then
  :class:`TransientError`. 401 -> AuthenticationError, 404 -> NotFoundError,
  422 -> RejectedError, 409 -> ConflictError; messages name the method and URL path,
  never a credential.
- Every answer's ``Date`` header gives GitHub's clock against ours (the injected wall
  clock): :attr:`GitHubHttp.clock_skew` and ``ci_autoscaler_clock_skew_seconds{peer="github"}``.

This module is the retry loop and the page cache; its parts live beside it: ``wire``
(request headers, the bounded body read), ``answers`` (what an answer means: the error
types, ``Retry-After``, ``Date``, GitHub's message), ``meter`` (metrics, rate-limit headers,
clock skew of every answer) and ``transports`` (one keep-alive connection per thread).
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from autoscaler.errors import AuthenticationError, RateLimitedError, TransientError
from autoscaler.observe.github.answers import (
    Answer,
    error_message,
    path_of,
    refusal,
    retry_after_seconds,
)
from autoscaler.observe.github.auth import Auth
from autoscaler.observe.github.cache import EtagCache
from autoscaler.observe.github.meter import AnswerMeter
from autoscaler.observe.github.parse import BadPage
from autoscaler.observe.github.ratelimit import RateGate, classify
from autoscaler.observe.github.records import PageRecord
from autoscaler.observe.github.transports import ThreadTransports
from autoscaler.observe.github.wire import (
    MAX_PAGE_BYTES,
    REQUEST_HEADERS,
    read_body,
    response_headers,
)
from autoscaler.secrets import SecretUrl
from autoscaler.telemetry import Metrics

log = logging.getLogger("autoscaler.observe.github")

#: Time a call outside a poll (a runner DELETE, a token exchange) may wait on a rate limit.
CALL_WAIT = 10.0

__all__ = ["MAX_PAGE_BYTES", "BadPage", "GitHubHttp", "PageResult", "next_link"]


@dataclass(frozen=True, slots=True)
class PageResult:
    record: PageRecord
    next_url: str | None
    status: int

    @property
    def counted(self) -> bool:
        """True when this page cost a request of the primary rate limit (not a 304)."""
        return self.status != 304


def next_link(header: str | None) -> str | None:
    """The ``rel="next"`` URL of a ``Link`` header."""
    for part in (header or "").split(","):
        url, _, params = part.partition(";")
        if 'rel="next"' in params.replace(" ", ""):
            return url.strip().strip("<>")
    return None


class GitHubHttp:
    def __init__(  # noqa: PLR0917
        self,
        api_url: str,
        timeout: float,
        metrics: Metrics,
        transport: httpx.BaseTransport | None,
        sleep: Callable[[float], None],
        wall_clock: Callable[[], float],
        *,
        max_attempts: int = 3,
        rng: random.Random | None = None,
        cache: EtagCache | None = None,
        proxy: SecretUrl | None = None,
    ) -> None:
        self.base = api_url.rstrip("/")
        self._origin = urlsplit(self.base)[:2]
        self.metrics = metrics
        self.sleep = sleep
        self.wall_clock = wall_clock
        self.max_attempts = max_attempts
        self.auth: Auth | None = None
        self.gate = RateGate(metrics, wall_clock, sleep)
        self.cache = cache if cache is not None else EtagCache()
        self._rng = rng or random.Random()  # noqa: S311 - backoff jitter, not crypto
        self._transports = ThreadTransports(
            transport, None if proxy is None else httpx.Proxy(proxy.reveal())
        )
        self._counted_lock = threading.Lock()
        self._timeout = httpx.Timeout(timeout).as_dict()
        self._meter = AnswerMeter(metrics, self.gate, wall_clock)
        self._transports.here()  # httpx's transport imports httpcore: before the first poll
        #: Requests answered so far that count against the primary rate limit (not a 304,
        #: not ``GET /rate_limit``): what the poll's budget spends.
        self.counted = 0
        #: GitHub's clock minus ours, in seconds, from the last answer with a ``Date``
        #: header (None until one arrives; the source resets it each poll).
        self.clock_skew: float | None = None

    def close(self) -> None:
        self._transports.close()

    def url(self, path_or_url: str) -> str:
        return path_or_url if "://" in path_or_url else self.base + path_or_url

    def get_page(
        self,
        path_or_url: str,
        endpoint: str,
        compact: Callable[[Any], PageRecord],
        deadline: float,
    ) -> PageResult:
        """GET one listing page (conditional when cached) as a compact record.

        Raises BadPage on a body too large, not JSON, or not the shape ``compact`` wants.
        """
        url = self.url(path_or_url)
        cached = self.cache.get(url, self.wall_clock())
        headers = {"If-None-Match": cached.etag} if cached else {}
        answer = self.send("GET", url, endpoint, headers=headers, deadline=deadline)
        if answer.status == 304 and cached is not None:
            # The ETag covers the body, not the Link: prefer the 304's (a page added after).
            link = answer.headers.get("link", cached.link)
            return PageResult(cached.record, self._next(link), 304)
        try:
            body = json.loads(answer.content)
        except (ValueError, RecursionError) as exc:
            self.cache.discard(url)
            raise BadPage(
                f"GET {path_of(url)}: the body is not JSON ({type(exc).__name__})"
            ) from None
        try:
            record = compact(body)
        except BadPage as exc:
            self.cache.discard(url)
            raise BadPage(f"GET {path_of(url)}: {exc}") from None
        link = answer.headers.get("link")
        etag = answer.headers.get("etag")
        if etag:
            self.cache.put(url, etag, link, record, self.wall_clock())
        return PageResult(record, self._next(link), answer.status)

    def next_url(self, link: str | None) -> str | None:
        """The ``rel="next"`` URL of a ``Link`` header, only on ``github.api_url``'s origin
        (a credential is never sent anywhere else)."""
        return self._next(link)

    def _next(self, link: str | None) -> str | None:
        url = next_link(link)
        if url is not None and urlsplit(url)[:2] != self._origin:
            log.warning("ignoring a Link to another origin than github.api_url")
            return None
        return url

    def send(
        self,
        method: str,
        url: str,
        endpoint: str,
        *,
        headers: dict[str, str] | None = None,
        authorization: str | None = None,
        deadline: float | None = None,
        exempt: bool = False,
        body: bytes | None = None,
    ) -> Answer:
        """One call with retries; returns a 2xx or 304 answer, else raises our errors.

        ``deadline``: ``time.monotonic()`` after which no rate-limit wait may end (default
        :data:`CALL_WAIT` from now); ``exempt``: the call does not count against the rate limit
        (``GET /rate_limit``), so it goes out even while the gate is closed; ``body``: a
        JSON request body (sent with ``Content-Type: application/json``).
        """
        url = self.url(url)
        where = f"{method} {path_of(url)}"
        deadline = time.monotonic() + CALL_WAIT if deadline is None else deadline
        attempt, rate_waits, refreshed = 0, 0, False
        while True:
            attempt += 1
            if not exempt:
                self.gate.before(where, max(0.0, deadline - time.monotonic()))
            request_headers = dict(headers or {})
            if body is not None:
                request_headers["Content-Type"] = "application/json"
            if authorization is not None:
                request_headers["Authorization"] = authorization
            elif self.auth is not None:
                request_headers["Authorization"] = self.auth.authorization()
            started = time.perf_counter()
            try:
                answer = self._request(method, url, request_headers, body)
            except BadPage:
                self._meter.child("requests", endpoint, "too_large").inc()
                raise
            except httpx.HTTPError as exc:
                self._meter.child("requests", endpoint, "error").inc()
                if attempt < self.max_attempts:
                    self._backoff(attempt, None)
                    continue
                raise TransientError(
                    f"GitHub {where}: {type(exc).__name__} after {attempt} attempts",
                    code="error",
                ) from None
            finally:
                self._meter.child("duration", endpoint).observe(time.perf_counter() - started)
            status = answer.status
            self._meter.child("requests", endpoint, str(status)).inc()
            if status != 304 and not exempt:
                with self._counted_lock:
                    self.counted += 1
            self._meter.rate_limit(answer.headers)
            skew = self._meter.clock(answer.headers)
            if skew is not None:
                self.clock_skew = skew  # a float store is atomic; the last answer wins
            if status < 300 or status == 304:
                self.gate.succeeded()
                return answer
            code = str(status)
            message = error_message(answer)
            if status == 401:
                sent = request_headers.get("Authorization", "")
                if (
                    not refreshed
                    and authorization is None
                    and self.auth
                    and self.auth.invalidate(sent)
                ):
                    refreshed = True
                    continue
                raise AuthenticationError(
                    f"GitHub {where}: 401 Bad credentials (check github.token or github.app)",
                    code=code,
                )
            kind = classify(status, answer.headers, message)
            if kind is not None:
                pause = self.gate.hit(kind, answer.headers, where)
                if rate_waits < 2:
                    rate_waits += 1
                    continue  # the gate sleeps out a pause that fits, or raises
                raise RateLimitedError(
                    f"GitHub {where}: {kind} rate limit", code=code, retry_after=pause
                )
            if status >= 500:
                if attempt < self.max_attempts:
                    self._backoff(attempt, retry_after_seconds(answer))
                    continue
                raise TransientError(
                    f"GitHub {where}: {status} after {attempt} attempts",
                    code=code,
                    retry_after=retry_after_seconds(answer),
                )
            raise refusal(answer, where, message)

    def _request(
        self, method: str, url: str, headers: dict[str, str], body: bytes | None = None
    ) -> Answer:
        """Send and read the body, refusing one over MAX_PAGE_BYTES before parsing it.

        Straight to httpx's transport (``httpx.HTTPTransport``, or the injected one):
        ``httpx.Client`` adds nothing this helper uses (no cookies, redirects, auth flows,
        event hooks) and costs about 0.4 ms of CPU a request on top (its cookie jar alone
        copies every response header into an ``email.message.Message``), a third of what
        a GET costs; the controller is CPU-bound at 16 requests in flight.
        """
        request = httpx.Request(
            method,
            url,
            headers={**REQUEST_HEADERS, **headers},
            content=body,
            extensions={"timeout": self._timeout},
        )
        response = self._transports.here().handle_request(request)
        try:
            found = response_headers(response.headers.raw)
            declared = found.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > MAX_PAGE_BYTES:
                raise BadPage(f"{method} {path_of(url)}: {declared} bytes is over the page limit")
            content = read_body(response.stream, found.get("content-encoding"))
            if content is None:
                raise BadPage(f"{method} {path_of(url)}: the body is over the page limit")
        finally:
            response.close()
        return Answer(response.status_code, found, content, response.reason_phrase)

    def _backoff(self, attempt: int, retry_after: float | None) -> None:
        if retry_after is not None and retry_after <= 60.0:
            self.sleep(retry_after)
            return
        self.sleep(self._rng.uniform(0.0, min(8.0, 0.5 * 2 ** (attempt - 1))))

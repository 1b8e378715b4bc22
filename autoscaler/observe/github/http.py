"""One instrumented HTTP helper for every GitHub call: auth, rate gate, retries, ETag cache.

- Requests go below httpx's client, one connection per worker thread (:mod:`.wire`, where
  ``bench/github_poll.py`` says why); ``github.proxy`` is the proxy, the environment's
  proxy variables are ignored (the config says where GitHub is reached).
- Every request is counted in ``github_requests_total{endpoint,status}`` and timed.
- A GET of a listing page is conditional when its URL is cached: a ``304`` reuses the
  compact record (a 304 costs no rate limit) and the 304's ``Link``, else the cached one.
  A 200 is parsed once into a record; the body is dropped.
- A body over :data:`MAX_PAGE_BYTES` is refused before it is parsed (by ``Content-Length``,
  or while it is read and inflated: a gzip bomb stops at the limit); an encoding we did not
  ask for (anything but one gzip) is refused unread.
- Retries: the one policy (:mod:`autoscaler.retrying`) with GitHub's rules as its wait
  (:meth:`RateGate.hint`): 5xx, timeouts and connection errors are retried with
  full-jitter backoff, then :class:`TransientError`; a rate limit pauses every worker;
  a 5xx's ``Retry-After`` closes the endpoint until then, across ticks, never slept.
  401 -> AuthenticationError (after one token refresh), 404 -> NotFoundError,
  422 -> RejectedError, 409 -> ConflictError; messages name the method and URL path,
  never a credential.
- Every answer's ``Date`` header gives GitHub's clock against ours (the injected wall
  clock): :attr:`GitHubHttp.clock_skew` and ``ci_autoscaler_clock_skew_seconds{peer="github"}``.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from autoscaler.config import RetryConfig
from autoscaler.errors import AuthenticationError, RateLimitedError, TransientError
from autoscaler.observe.github.answers import (
    Answer,
    error_message,
    number,
    path_of,
    peer_time,
    refusal,
    retry_after_seconds,
)
from autoscaler.observe.github.auth import Auth
from autoscaler.observe.github.cache import EtagCache
from autoscaler.observe.github.parse import BadPage
from autoscaler.observe.github.ratelimit import RateGate, classify
from autoscaler.observe.github.records import PageRecord
from autoscaler.observe.github.wire import (
    MAX_PAGE_BYTES,
    REQUEST_HEADERS,
    ThreadTransports,
    read_body,
    response_headers,
)
from autoscaler.retrying import RetryPolicy
from autoscaler.secrets import SecretUrl
from autoscaler.telemetry import Metrics

log = logging.getLogger("autoscaler.observe.github")

#: Time a call outside a poll (a runner DELETE, a token exchange) may wait on a rate limit.
CALL_WAIT = 10.0
#: 5xx, timeouts and connection errors: three attempts, full-jitter backoff from 0.5 s.
RETRY = RetryConfig(max_attempts=3, deadline=CALL_WAIT, initial_backoff=0.5, max_backoff=8.0)

__all__ = ["MAX_PAGE_BYTES", "GitHubHttp", "PageResult", "next_link"]


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
        self.wall_clock = wall_clock
        self.max_attempts = max_attempts
        self.auth: Auth | None = None
        self.gate = RateGate(metrics, wall_clock, sleep)
        self.cache = cache if cache is not None else EtagCache()
        self.retry = RetryPolicy(RETRY, sleep=self.gate.sleep, rng=rng, hint=self.gate.hint)
        self._transports = ThreadTransports(
            transport, None if proxy is None else httpx.Proxy(proxy.reveal())
        )
        self._timeout = httpx.Timeout(timeout).as_dict()
        self._transports.here()  # httpx's transport imports httpcore: before the first poll
        self._counted_lock = threading.Lock()
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
        compact: Callable[[bytes], PageRecord],
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
            record = compact(answer.content)
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
        headers: Mapping[str, str] | None = None,
        authorization: str | None = None,
        deadline: float | None = None,
        exempt: bool = False,
        body: bytes | None = None,
        once: bool = False,
    ) -> Answer:
        """One call with retries; returns a 2xx or 304 answer, else raises our errors.

        ``deadline``: ``time.monotonic()`` after which no wait may end (default
        :data:`CALL_WAIT` from now); ``exempt``: the call does not count against the rate
        limit (``GET /rate_limit``), so it goes out even while the gate is closed; ``body``:
        a JSON request body (sent with ``Content-Type: application/json``); ``once``: the
        request must not be sent twice (a timed-out one may have taken effect), so a
        TransientError goes to the caller, who reads the world before asking again.
        """
        url = self.url(url)
        where = f"{method} {path_of(url)}"
        attempts = [0]
        refreshed = [False]

        def attempt() -> Answer:
            attempts[0] += 1
            self.gate.before(where, endpoint, exempt=exempt)
            sent = dict(headers or {})
            if body is not None:
                sent["Content-Type"] = "application/json"
            if authorization is not None:
                sent["Authorization"] = authorization
            elif self.auth is not None:
                sent["Authorization"] = self.auth.authorization()
            answer = self._exchange(method, url, endpoint, sent, body, exempt, attempts[0])
            if answer.status != 401 or refreshed[0] or authorization is not None:
                return self._meaning(answer, where, endpoint, attempts[0])
            refreshed[0] = True
            if self.auth is not None and self.auth.invalidate(sent.get("Authorization", "")):
                return attempt()  # one new token, not a retry
            return self._meaning(answer, where, endpoint, attempts[0])

        return self.retry.call(
            attempt,
            deadline_at=time.monotonic() + CALL_WAIT if deadline is None else deadline,
            attempts=1 if once else self.max_attempts,
        )

    def _exchange(  # noqa: PLR0917
        self,
        method: str,
        url: str,
        endpoint: str,
        headers: dict[str, str],
        body: bytes | None,
        exempt: bool,
        attempt: int,
    ) -> Answer:
        """One request, metered; TransientError when no answer came (timeout, connection)."""
        started = time.perf_counter()
        try:
            answer = self._request(method, url, endpoint, headers, body)
        except httpx.HTTPError as exc:
            self.metrics.github_requests.labels(endpoint, "error").inc()
            raise TransientError(
                f"GitHub {method} {path_of(url)}: {type(exc).__name__} after {attempt} attempts",
                code="error",
            ) from None
        finally:
            self.metrics.github_request_duration.labels(endpoint).observe(
                time.perf_counter() - started
            )
        self.metrics.github_requests.labels(endpoint, str(answer.status)).inc()
        if answer.status != 304 and not exempt:
            with self._counted_lock:
                self.counted += 1
        self._observe(answer.headers)
        return answer

    def _meaning(self, answer: Answer, where: str, endpoint: str, attempt: int) -> Answer:
        """A 2xx or 304 answer, else the error it means (the policy retries the transient)."""
        status = answer.status
        if status < 300 or status == 304:
            self.gate.succeeded()
            return answer
        code = str(status)
        if status == 401:
            raise AuthenticationError(
                f"GitHub {where}: 401 Bad credentials (check github.token or github.app)",
                code=code,
            )
        message = error_message(answer)
        kind = classify(status, answer.headers, message)
        if kind is not None:
            pause = self.gate.hit(kind, answer.headers, where)
            raise RateLimitedError(
                f"GitHub {where}: {kind} rate limit", code=code, retry_after=pause
            )
        if status >= 500:
            retry_after = retry_after_seconds(answer)
            if retry_after is not None:
                self.gate.close_endpoint(endpoint, retry_after, where)
            raise TransientError(
                f"GitHub {where}: {status} after {attempt} attempts",
                code=code,
                retry_after=retry_after,
            )
        raise refusal(answer, where, message)

    def _request(
        self, method: str, url: str, endpoint: str, headers: dict[str, str], body: bytes | None
    ) -> Answer:
        """Send and read the body, refusing one over MAX_PAGE_BYTES (counted as
        ``too_large``) or in an encoding we did not ask for (``bad_encoding``) unparsed."""
        where = f"{method} {path_of(url)}"
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
            encoding = found.get("content-encoding", "identity").strip().lower()
            if encoding not in ("identity", "gzip"):
                self.metrics.github_requests.labels(endpoint, "bad_encoding").inc()
                raise BadPage(f"{where}: a {encoding!r} body was not asked for")
            declared = found.get("content-length")
            content = None
            if not (declared and declared.isdigit() and int(declared) > MAX_PAGE_BYTES):
                content = read_body(response.stream, encoding)
            if content is None:
                self.metrics.github_requests.labels(endpoint, "too_large").inc()
                raise BadPage(f"{where}: the body is over the page limit")
        finally:
            response.close()
        return Answer(response.status_code, found, content, response.reason_phrase)

    def _observe(self, headers: Mapping[str, str]) -> None:
        """What every answer tells: the rate-limit headers (to the gate and the metrics, by
        resource) and GitHub's clock against ours."""
        self.gate.observe(headers)
        resource = headers.get("x-ratelimit-resource", "core")
        for name, gauge in (
            ("remaining", self.metrics.github_rate_limit_remaining),
            ("limit", self.metrics.github_rate_limit_limit),
            ("reset", self.metrics.github_rate_limit_reset),
        ):
            value = number(headers.get(f"x-ratelimit-{name}"))
            if value is not None:
                gauge.labels(resource).set(value)
        peer = peer_time(headers.get("date", ""))
        if peer is not None:
            # One-second resolution, and a little behind by the answer's travel time: fine
            # against a threshold of a minute. A float store is atomic; the last answer wins.
            self.clock_skew = peer - self.wall_clock()
            self.metrics.clock_skew.labels("github").set(self.clock_skew)

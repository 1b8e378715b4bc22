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
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

from autoscaler import __version__
from autoscaler.config.secrets import SecretUrl
from autoscaler.errors import (
    AuthenticationError,
    ConflictError,
    NotFoundError,
    PermanentError,
    RateLimitedError,
    RejectedError,
    TransientError,
)
from autoscaler.observe.github.auth import Auth
from autoscaler.observe.github.cache import EtagCache
from autoscaler.observe.github.parse import BadPage
from autoscaler.observe.github.ratelimit import RateGate, classify
from autoscaler.observe.github.records import PageRecord
from autoscaler.telemetry import Metrics

log = logging.getLogger("autoscaler.observe.github")

#: A page larger than this is refused unparsed (100 jobs with their steps are ~100 KB).
MAX_PAGE_BYTES = 8 * 1024 * 1024
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


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: Mapping[str, str]
    """Lower-case names; a repeated header's values joined with ``", "`` (as httpx does)."""
    content: bytes
    reason: str


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
        self._proxy = None if proxy is None else httpx.Proxy(proxy.reveal())
        self._origin = urlsplit(self.base)[:2]
        self.metrics = metrics
        self.sleep = sleep
        self.wall_clock = wall_clock
        self.max_attempts = max_attempts
        self.auth: Auth | None = None
        self.gate = RateGate(metrics, wall_clock, sleep)
        self.cache = cache if cache is not None else EtagCache()
        self._rng = rng or random.Random()  # noqa: S311 - backoff jitter, not crypto
        self._transport = transport
        self._local = threading.local()
        #: One TLS context for every thread's transport (loading the CA bundle costs ~0.1 s
        #: of CPU each time).
        self._ssl = httpx.create_ssl_context()
        self._transports: list[httpx.BaseTransport] = []
        self._clients_lock = threading.Lock()
        self._timeout = httpx.Timeout(timeout).as_dict()
        #: Metric children by label values: ``labels()`` takes a lock and builds a key
        #: on every call; a request needs four of them.
        self._children: dict[tuple[str, ...], Any] = {}
        #: The last ``Date`` header and its time: it changes once a second, not per answer.
        self._date: tuple[str, float | None] = ("", None)
        self._transport_here()  # httpx's transport imports httpcore: before the first poll
        #: Requests answered so far that count against the primary rate limit (not a 304,
        #: not ``GET /rate_limit``): what the poll's budget spends.
        self.counted = 0
        #: GitHub's clock minus ours, in seconds, from the last answer with a ``Date``
        #: header (None until one arrives; the source resets it each poll).
        self.clock_skew: float | None = None

    def _transport_here(self) -> httpx.BaseTransport:
        """This thread's transport: one keep-alive connection per worker thread.

        One shared pool of ``max_concurrency`` connections serialises every request on
        httpcore's pool lock and rescans the pool at each: that cost grows with the
        requests in flight. A connection per thread needs no coordination at all. An
        injected transport (tests: ``httpx.MockTransport``) is shared by every thread.
        """
        transport: httpx.BaseTransport | None = getattr(self._local, "transport", None)
        if transport is None:
            transport = self._transport or httpx.HTTPTransport(
                verify=self._ssl,
                limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
                proxy=self._proxy,
            )
            self._local.transport = transport
            if self._transport is None:
                with self._clients_lock:
                    self._transports.append(transport)
        return transport

    def close(self) -> None:
        with self._clients_lock:
            transports, self._transports = self._transports, []
        for transport in transports:
            transport.close()

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
                f"GET {_path(url)}: the body is not JSON ({type(exc).__name__})"
            ) from None
        try:
            record = compact(body)
        except BadPage as exc:
            self.cache.discard(url)
            raise BadPage(f"GET {_path(url)}: {exc}") from None
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
        where = f"{method} {_path(url)}"
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
                self._child("requests", endpoint, "too_large").inc()
                raise
            except httpx.HTTPError as exc:
                self._child("requests", endpoint, "error").inc()
                if attempt < self.max_attempts:
                    self._backoff(attempt, None)
                    continue
                raise TransientError(
                    f"GitHub {where}: {type(exc).__name__} after {attempt} attempts",
                    code="error",
                ) from None
            finally:
                self._child("duration", endpoint).observe(time.perf_counter() - started)
            status = answer.status
            self._child("requests", endpoint, str(status)).inc()
            if status != 304 and not exempt:
                with self._clients_lock:
                    self.counted += 1
            self._track_rate_limit(answer.headers)
            self._track_clock(answer.headers)
            if status < 300 or status == 304:
                self.gate.succeeded()
                return answer
            code = str(status)
            message = _message(answer)
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
                    self._backoff(attempt, _retry_after(answer))
                    continue
                raise TransientError(
                    f"GitHub {where}: {status} after {attempt} attempts",
                    code=code,
                    retry_after=_retry_after(answer),
                )
            if status == 403:
                raise AuthenticationError(
                    f"GitHub {where}: 403 Forbidden, the credentials lack a permission ({message})",
                    code=code,
                )
            if status == 404:
                raise NotFoundError(
                    f"GitHub {where}: 404 Not Found (wrong github.owner/repos, or the "
                    "credentials cannot see it)",
                    code=code,
                )
            if status == 422:
                raise RejectedError(f"GitHub {where}: 422 {message}", code=code)
            if status == 409:
                raise ConflictError(f"GitHub {where}: 409 {message}", code=code)
            raise PermanentError(f"GitHub {where}: {status} {message}", code=code)

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
            headers={**_HEADERS, **headers},
            content=body,
            extensions={"timeout": self._timeout},
        )
        response = self._transport_here().handle_request(request)
        try:
            found = _headers(response.headers.raw)
            declared = found.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > MAX_PAGE_BYTES:
                raise BadPage(f"{method} {_path(url)}: {declared} bytes is over the page limit")
            content = _read(response.stream, found.get("content-encoding"))
            if content is None:
                raise BadPage(f"{method} {_path(url)}: the body is over the page limit")
        finally:
            response.close()
        return Answer(response.status_code, found, content, response.reason_phrase)

    def _child(self, metric: str, *labels: str) -> Any:
        """The metric child for these labels, looked up once (bounded: endpoints x statuses)."""
        key = (metric, *labels)
        child = self._children.get(key)
        if child is None:
            family = {
                "requests": self.metrics.github_requests,
                "duration": self.metrics.github_request_duration,
                "remaining": self.metrics.github_rate_limit_remaining,
                "limit": self.metrics.github_rate_limit_limit,
                "reset": self.metrics.github_rate_limit_reset,
            }[metric]
            child = self._children[key] = family.labels(*labels)
        return child

    def _backoff(self, attempt: int, retry_after: float | None) -> None:
        if retry_after is not None and retry_after <= 60.0:
            self.sleep(retry_after)
            return
        self.sleep(self._rng.uniform(0.0, min(8.0, 0.5 * 2 ** (attempt - 1))))

    def _track_clock(self, headers: Mapping[str, str]) -> None:
        """GitHub's clock from the answer's ``Date`` (one-second resolution, and a little
        behind by the answer's travel time: fine against a threshold of a minute)."""
        text = headers.get("date", "")
        last, peer = self._date
        if text != last:
            peer = _date(text)
            self._date = (text, peer)  # a tuple store is atomic: a race re-parses, no more
        if peer is None:
            return
        skew = peer - self.wall_clock()
        self.clock_skew = skew  # a float store is atomic; the last answer wins
        self.metrics.clock_skew.labels("github").set(skew)

    def _track_rate_limit(self, headers: Mapping[str, str]) -> None:
        self.gate.observe(headers)
        resource = headers.get("x-ratelimit-resource", "core")
        for name in ("remaining", "limit", "reset"):
            value = _float(headers.get(f"x-ratelimit-{name}"))
            if value is not None:
                self._child(name, resource).set(value)


#: Sent with every request. ``gzip`` only: :func:`_read` inflates it within the page limit.
_HEADERS = {
    "Accept": "application/vnd.github+json",
    "Accept-Encoding": "gzip",
    "X-GitHub-Api-Version": "2022-11-28",
    "User-Agent": f"ci-autoscaler/{__version__}",
}


def _headers(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """Response headers as a plain dict, read once (``httpx.Headers`` rescans every
    header on each lookup, and an answer is looked up a dozen times)."""
    found: dict[str, str] = {}
    for key, value in raw:
        name, text = key.decode("latin-1").lower(), value.decode("latin-1")
        found[name] = f"{found[name]}, {text}" if name in found else text
    return found


def _read(stream: Any, encoding: str | None) -> bytes | None:
    """The whole body, inflated when gzipped; None once it passes MAX_PAGE_BYTES (read
    or inflated: a small gzip bomb is refused as early as a large page)."""
    chunks: list[bytes] = []
    size = 0
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if encoding == "gzip" else None
    for received in stream:
        chunk = received
        if inflate is not None:
            chunk = inflate.decompress(received, MAX_PAGE_BYTES + 1 - size)
            if inflate.unconsumed_tail:
                return None
        size += len(chunk)
        if size > MAX_PAGE_BYTES:
            return None
        chunks.append(chunk)
    if inflate is not None:
        chunks.append(inflate.flush())
        if size + len(chunks[-1]) > MAX_PAGE_BYTES:
            return None
    return b"".join(chunks)


def _date(text: str) -> float | None:
    try:
        peer = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return None if peer.tzinfo is None else peer.timestamp()


def _path(url: str) -> str:
    return urlsplit(url).path


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _retry_after(answer: Answer) -> float | None:
    value = _float(answer.headers.get("retry-after"))
    return None if value is None else max(0.0, value)


def _message(answer: Answer) -> str:
    """GitHub's ``message`` of an error body; never fails (HTML pages, deep JSON)."""
    try:
        body = json.loads(answer.content)
        message = body.get("message", "") if isinstance(body, dict) else ""
    except (ValueError, RecursionError):
        message = ""
    return str(message)[:200] or answer.reason

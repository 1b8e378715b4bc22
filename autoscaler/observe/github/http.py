"""One instrumented HTTP helper for every GitHub call: auth, ETag cache, retries, errors.

- Every request is counted in ``github_requests_total{endpoint,status}`` and timed.
- Each GET URL's ``ETag`` is remembered; the next GET sends ``If-None-Match`` and a ``304``
  reuses the cached body (a 304 costs no rate limit) and the 304's ``Link``, else the cached.
- 403 with ``x-ratelimit-remaining: 0``, a rate-limit message or ``Retry-After``, and 429:
  wait ``Retry-After``, else until ``x-ratelimit-reset``, through the injected sleep; a
  wait longer than ``rate_limit_cap`` raises :class:`RateLimitedError` instead.
- 5xx, timeouts and connection errors: retried with full-jitter backoff, then
  :class:`TransientError`. 401 -> AuthenticationError, 404 -> NotFoundError,
  422 -> RejectedError; messages name the method and URL path, never a credential.
- Every answer's ``Date`` header gives GitHub's clock against ours (the injected wall
  clock): :attr:`GitHubHttp.clock_skew` and ``ci_autoscaler_clock_skew_seconds{peer="github"}``.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

from autoscaler import __version__
from autoscaler.errors import (
    AuthenticationError,
    NotFoundError,
    PermanentError,
    RateLimitedError,
    RejectedError,
    TransientError,
)
from autoscaler.observe.github.auth import Auth
from autoscaler.telemetry import Metrics

log = logging.getLogger("autoscaler.observe.github")


class BadPage(Exception):
    """A 2xx body that is not the JSON we expect (the caller decides: skip or fail)."""


@dataclass(frozen=True)
class Page:
    body: Any
    next_url: str | None
    status: int


@dataclass(frozen=True)
class _Cached:
    etag: str
    body: Any
    link: str | None


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
        max_concurrency: int,
        metrics: Metrics,
        transport: httpx.BaseTransport | None,
        sleep: Callable[[float], None],
        wall_clock: Callable[[], float],
        *,
        max_attempts: int = 3,
        rate_limit_cap: float = 60.0,
        rng: random.Random | None = None,
    ) -> None:
        self.base = api_url.rstrip("/")
        self._origin = urlsplit(self.base)[:2]
        self.metrics = metrics
        self.sleep = sleep
        self.wall_clock = wall_clock
        self.max_attempts = max_attempts
        self.rate_limit_cap = rate_limit_cap
        self.auth: Auth | None = None
        self._rng = rng or random.Random()  # noqa: S311 - backoff jitter, not crypto
        self._lock = threading.Lock()
        self._cache: dict[str, _Cached] = {}
        self._used: set[str] = set()
        #: GitHub's clock minus ours, in seconds, from the last answer with a ``Date``
        #: header (None until one arrives).
        self.clock_skew: float | None = None
        limits = httpx.Limits(
            max_connections=max_concurrency, max_keepalive_connections=max_concurrency
        )
        self.client = httpx.Client(
            timeout=httpx.Timeout(timeout),
            limits=limits,
            transport=transport,
            headers={
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28",
                "User-Agent": f"ci-autoscaler/{__version__}",
            },
        )

    def close(self) -> None:
        self.client.close()

    # --- the ETag cache lives as long as its URLs are still asked for
    def begin_tick(self) -> None:
        with self._lock:
            self._used = set()
            self.clock_skew = None

    def end_tick(self) -> None:
        """Forget cached pages no request of this tick asked for (bounded memory)."""
        with self._lock:
            self._cache = {u: c for u, c in self._cache.items() if u in self._used}

    def get(self, path_or_url: str, endpoint: str) -> Page:
        """GET one page (conditional when cached). Raises BadPage on an unparsable body."""
        url = path_or_url if "://" in path_or_url else self.base + path_or_url
        with self._lock:
            cached = self._cache.get(url)
            self._used.add(url)
        headers = {"If-None-Match": cached.etag} if cached else {}
        response = self.send("GET", url, endpoint, headers=headers)
        if response.status_code == 304 and cached is not None:
            # The ETag covers the body, not the Link: prefer the 304's (a page added after).
            return Page(cached.body, self._next(response.headers.get("link", cached.link)), 304)
        try:
            body = json.loads(response.content)
        except ValueError:
            raise BadPage(f"GET {_path(url)}: the body is not JSON") from None
        link = response.headers.get("link")
        etag = response.headers.get("etag")
        if etag:
            with self._lock:
                self._cache[url] = _Cached(etag, body, link)
        return Page(body, self._next(link), response.status_code)

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
    ) -> httpx.Response:
        """One call with retries; returns a 2xx or 304 response, else raises our errors."""
        url = url if "://" in url else self.base + url
        where = f"{method} {_path(url)}"
        attempt, rate_waits, refreshed = 0, 0, False
        while True:
            attempt += 1
            request_headers = dict(headers or {})
            if authorization is not None:
                request_headers["Authorization"] = authorization
            elif self.auth is not None:
                request_headers["Authorization"] = self.auth.authorization()
            try:
                with self.metrics.timed_github(endpoint):
                    response = self.client.request(method, url, headers=request_headers)
            except httpx.HTTPError as exc:
                self.metrics.github_requests.labels(endpoint, "error").inc()
                if attempt < self.max_attempts:
                    self._backoff(attempt, None)
                    continue
                raise TransientError(
                    f"GitHub {where}: {type(exc).__name__} after {attempt} attempts",
                    code="error",
                ) from None
            status = response.status_code
            self.metrics.github_requests.labels(endpoint, str(status)).inc()
            self._track_rate_limit(response)
            self._track_clock(response)
            if status < 300 or status == 304:
                return response
            code = str(status)
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
            if _rate_limited(response):
                wait = self._rate_limit_wait(response)
                if wait > self.rate_limit_cap or rate_waits >= 2:
                    raise RateLimitedError(
                        f"GitHub {where}: rate limited for {wait:.0f}s", code=code, retry_after=wait
                    )
                rate_waits += 1
                log.warning("GitHub %s: rate limited, waiting %.1fs", where, wait)
                self.sleep(wait)
                continue
            if status >= 500:
                if attempt < self.max_attempts:
                    self._backoff(attempt, _retry_after(response))
                    continue
                raise TransientError(
                    f"GitHub {where}: {status} after {attempt} attempts",
                    code=code,
                    retry_after=_retry_after(response),
                )
            message = _message(response)
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
            raise PermanentError(f"GitHub {where}: {status} {message}", code=code)

    def _backoff(self, attempt: int, retry_after: float | None) -> None:
        if retry_after is not None and retry_after <= self.rate_limit_cap:
            self.sleep(retry_after)
            return
        self.sleep(self._rng.uniform(0.0, min(8.0, 0.5 * 2 ** (attempt - 1))))

    def _rate_limit_wait(self, response: httpx.Response) -> float:
        retry_after = _retry_after(response)
        if retry_after is not None:
            return retry_after
        reset = _float(response.headers.get("x-ratelimit-reset"))
        if response.headers.get("x-ratelimit-remaining") == "0" and reset is not None:
            return max(0.0, reset - self.wall_clock())
        return 60.0  # GitHub: "otherwise, wait for at least one minute"

    def _track_clock(self, response: httpx.Response) -> None:
        """GitHub's clock from the answer's ``Date`` (one-second resolution, and a little
        behind by the answer's travel time: fine against a threshold of a minute)."""
        try:
            peer = parsedate_to_datetime(response.headers.get("date", ""))
        except (TypeError, ValueError):
            return
        if peer.tzinfo is None:
            return
        skew = peer.timestamp() - self.wall_clock()
        with self._lock:
            self.clock_skew = skew
        self.metrics.clock_skew.labels("github").set(skew)

    def _track_rate_limit(self, response: httpx.Response) -> None:
        h = response.headers
        resource = h.get("x-ratelimit-resource", "core")
        for header, gauge in (
            ("x-ratelimit-remaining", self.metrics.github_rate_limit_remaining),
            ("x-ratelimit-limit", self.metrics.github_rate_limit_limit),
            ("x-ratelimit-reset", self.metrics.github_rate_limit_reset),
        ):
            value = _float(h.get(header))
            if value is not None:
                gauge.labels(resource).set(value)


def _path(url: str) -> str:
    return urlsplit(url).path


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _retry_after(response: httpx.Response) -> float | None:
    value = _float(response.headers.get("retry-after"))
    return None if value is None else max(0.0, value)


def _message(response: httpx.Response) -> str:
    try:
        message = response.json().get("message", "")
    except (ValueError, AttributeError):
        message = ""
    return str(message)[:200] or response.reason_phrase


def _rate_limited(response: httpx.Response) -> bool:
    if response.status_code == 429:
        return True
    if response.status_code != 403:
        return False
    h = response.headers
    return (
        h.get("x-ratelimit-remaining") == "0"
        or "retry-after" in h
        or "rate limit" in _message(response).lower()
    )

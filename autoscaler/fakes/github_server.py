"""The fake GitHub's HTTP side: routing, auth, rate limits, ETag/304, Link pagination, faults."""

from __future__ import annotations

import hashlib
import logging
import math
import re
import sys
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from autoscaler.fakes.github_app import app_token, authorized, installation_token
from autoscaler.fakes.github_deliveries import ATTEMPTS, DELIVERIES, list_deliveries, redeliver
from autoscaler.fakes.github_jit import (
    ORG_JIT,
    ORG_TOKEN,
    REPO_JIT,
    REPO_TOKEN,
    generate,
    registration_token,
)
from autoscaler.fakes.github_listing import (
    RUN,
    BadQuery,
    Forbidden,
    Listing,
    listing,
    one_run,
    owner_serves,
    repo_of,
)
from autoscaler.fakes.github_records import FakeRequest, Fault
from autoscaler.fakes.github_reruns import RERUN, RERUN_FAILED, rerun, rerun_failed
from autoscaler.fakes.github_shapes import Reply, error_reply, rate_limit_json
from autoscaler.fakes.github_state import GitHubState

_RUNNER = re.compile(r"^/orgs/([^/]+)/actions/runners/(\d+)$")
_REPO_RUNNER = re.compile(r"^/repos/([^/]+)/([^/]+)/actions/runners/(\d+)$")
_APP_TOKEN = re.compile(r"^/app/installations/(\d+)/access_tokens$")
_MALFORMED = b'{"total_count": 3, "items": [{"id": 1, "name": '
_RATE_MESSAGE = "API rate limit exceeded. Check out the documentation for more information."
#: GitHub's secondary-limit message (403 or 429; ``Retry-After`` optional).
SECONDARY_MESSAGE = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try "
    "again. If you reach out to GitHub Support for help, please include the request ID."
)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes
    server: FakeServer
    body: bytes = b""

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the fake logs requests in ``fake.requests`` instead."""

    def date_time_string(self, timestamp: float | None = None) -> str:
        """The ``Date`` header on the fake's own clock, as GitHub's shows GitHub's."""
        if timestamp is None:
            timestamp = self.server.fake.clock().timestamp()
        return super().date_time_string(timestamp)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def _serve(self, method: str) -> None:
        fake = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        self.body = self.rfile.read(length) if length else b""
        if fake.latency > 0:
            time.sleep(fake.latency)
        if fake.before_request is not None:
            fake.before_request(method, self.path)
        try:
            reply = self._reply(method, fake)
        except Exception as exc:  # a bug in the fake must not hang the client
            reply = error_reply(500, f"fake github error: {type(exc).__name__}")
        with fake.lock:
            fake.requests.append(FakeRequest(method, self.path, reply.status))
        if fake.before_reply is not None and fake.before_reply(method, self.path, reply.status):
            self.close_connection = True  # the response is lost
            return
        try:
            self._write(reply)
        except OSError:  # the client is gone (a test may have killed it on purpose)
            self.close_connection = True

    def _rate(self, count: bool) -> dict[str, str]:
        return _rate_headers(self.server.fake, count=count)

    def _write(self, reply: Reply) -> None:
        self.send_response(reply.status)
        reply.headers.setdefault("content-type", reply.content_type)
        reply.headers.setdefault("x-github-api-version-selected", "2022-11-28")
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if reply.status not in (204, 304):
            self.send_header("Content-Length", str(len(reply.raw)))
        self.end_headers()
        if reply.status not in (204, 304):
            self.wfile.write(reply.raw)

    def _reply(self, method: str, fake: GitHubState) -> Reply:
        fault = fake.take_fault(self.path)
        if fault is not None:
            return _fault_reply(fake, fault)
        path = urlsplit(self.path).path
        query = dict(parse_qsl(urlsplit(self.path).query))
        auth = self.headers.get("Authorization", "")
        match = _APP_TOKEN.match(path)
        if method == "POST" and match:
            return app_token(fake, auth)
        if not authorized(fake, auth):
            return error_reply(401, "Bad credentials", _rate_headers(fake, count=False))
        if method == "GET" and path == "/rate_limit":
            # "does not count against your REST API rate limit"
            return _rate_limit(fake, self.headers.get("If-None-Match"))
        with fake.lock:
            if _remaining(fake) <= 0:
                return error_reply(403, _RATE_MESSAGE, _rate_headers(fake, count=False))
            if method == "DELETE" and (m := _RUNNER.match(path)):
                return _delete_runner(fake, m.group(1), None, int(m.group(2)))
            if method == "DELETE" and (m := _REPO_RUNNER.match(path)):
                return _delete_runner(fake, m.group(1), m.group(2), int(m.group(3)))
            if method == "POST" and (m := ORG_JIT.match(path)):
                if not owner_serves(fake, m.group(1), orgs=True):
                    return error_reply(404, "Not Found", _rate_headers(fake, count=True))
                return generate(fake, None, self.body, _rate_headers(fake, count=True))
            if method == "POST" and (m := REPO_JIT.match(path)):
                if not owner_serves(fake, m.group(1), orgs=False) or repo_of(fake, path) is None:
                    return error_reply(404, "Not Found", _rate_headers(fake, count=True))
                return generate(fake, m.group(2), self.body, _rate_headers(fake, count=True))
            if method == "POST" and (m := ORG_TOKEN.match(path)):
                if not owner_serves(fake, m.group(1), orgs=True):
                    return error_reply(404, "Not Found", _rate_headers(fake, count=True))
                return registration_token(fake, None, _rate_headers(fake, count=True))
            if method == "POST" and (m := REPO_TOKEN.match(path)):
                if not owner_serves(fake, m.group(1), orgs=False) or repo_of(fake, path) is None:
                    return error_reply(404, "Not Found", _rate_headers(fake, count=True))
                return registration_token(fake, m.group(2), _rate_headers(fake, count=True))
            if method == "POST" and (m := ATTEMPTS.match(path)):
                return redeliver(fake, m.group(1), m.group(2), m.group(3), self._rate)
            if method == "GET" and (m := DELIVERIES.match(path)):
                return list_deliveries(
                    fake,
                    m.group(1),
                    m.group(2),
                    query,
                    self.headers.get("If-None-Match"),
                    self._rate,
                    _etag_matches,
                )
            if method == "POST" and (m := RERUN.match(path)):
                reran = rerun(fake, m.group(1), m.group(2), int(m.group(3)), fake.clock())
                reran.headers.update(_rate_headers(fake, count=True))
                return reran
            if method == "POST" and (m := RERUN_FAILED.match(path)):
                reran = rerun_failed(fake, m.group(1), m.group(2), int(m.group(3)), fake.clock())
                reran.headers.update(_rate_headers(fake, count=True))
                return reran
            if method in ("POST", "PATCH") and repo_of(fake, path) is not None:
                done = fake.issue_tracker.handle(
                    fake.url, fake.owner, method, path, raw=self.body, now=fake.clock()
                )
                if done is not None:
                    done.headers.update(_rate_headers(fake, count=True))
                    return done
            if method != "GET":
                return error_reply(404, "Not Found", _rate_headers(fake, count=True))
            if m := RUN.match(path):
                run = one_run(fake, m.group(1), m.group(2), int(m.group(3)))
                if run is None:
                    return error_reply(404, "Not Found", _rate_headers(fake, count=True))
                return Reply(200, run, _rate_headers(fake, count=True))
            try:
                found = listing(fake, path, query, installation=installation_token(fake, auth))
            except BadQuery as exc:
                return error_reply(422, str(exc), _rate_headers(fake, count=True))
            except Forbidden as exc:
                return error_reply(403, str(exc), _rate_headers(fake, count=True))
            if found is None:
                return error_reply(404, "Not Found", _rate_headers(fake, count=True))
            return _page(fake, self.path, found, query, self.headers.get("If-None-Match"))


def _remaining(fake: GitHubState) -> int:
    now = fake.clock().timestamp()
    if fake._rate_reset is None or now >= fake._rate_reset:
        fake._rate_reset, fake._rate_used = float(int(now) + 3600), 0
    return fake.RATE_LIMIT - fake._rate_used


def _rate_headers(fake: GitHubState, *, count: bool) -> dict[str, str]:
    """x-ratelimit-* headers; ``count`` spends one request first (not for 304s)."""
    with fake.lock:
        _remaining(fake)
        if count:
            fake._rate_used += 1
        return {
            "x-ratelimit-limit": str(fake.RATE_LIMIT),
            "x-ratelimit-remaining": str(max(0, fake.RATE_LIMIT - fake._rate_used)),
            "x-ratelimit-reset": str(int(fake._rate_reset or 0)),
            "x-ratelimit-used": str(fake._rate_used),
            "x-ratelimit-resource": "core",
        }


def _rate_limit(fake: GitHubState, if_none_match: str | None) -> Reply:
    """``GET /rate_limit``: the budget left; asking costs nothing, even when it is spent."""
    headers = _rate_headers(fake, count=False)
    used, reset = int(headers["x-ratelimit-used"]), int(headers["x-ratelimit-reset"])
    reply = Reply(200, rate_limit_json(fake.RATE_LIMIT, used, reset), headers)
    reply.headers["etag"] = 'W/"' + hashlib.sha256(reply.raw).hexdigest()[:40] + '"'
    if if_none_match and _etag_matches(if_none_match, reply.headers["etag"]):
        return Reply(304, None, reply.headers)
    return reply


def _fault_reply(fake: GitHubState, fault: Fault) -> Reply:
    if fault.status is None:
        return Reply(200, _MALFORMED, _rate_headers(fake, count=True))
    if fault.body is not None:
        reply = Reply(fault.status, fault.body, _rate_headers(fake, count=True))
        reply.content_type = fault.content_type
        return reply
    headers = _rate_headers(fake, count=False)
    if fault.retry_after is not None:
        headers["retry-after"] = str(math.ceil(fault.retry_after))
    if fault.secondary:
        return error_reply(fault.status, SECONDARY_MESSAGE, headers)
    if fault.ratelimit_reset is not None:
        reset = fault.ratelimit_reset
        if reset < 1e9:
            reset += fake.clock().timestamp()
        headers["x-ratelimit-remaining"] = "0"
        headers["x-ratelimit-reset"] = str(math.ceil(reset))
    rate_limited = fault.status == 429 or (
        fault.status == 403 and (fault.retry_after is not None or fault.ratelimit_reset is not None)
    )
    if rate_limited:
        return error_reply(fault.status, _RATE_MESSAGE, headers)
    return error_reply(fault.status, HTTPStatus(fault.status).phrase, headers)


def _delete_runner(fake: GitHubState, owner: str, repo: str | None, runner_id: int) -> Reply:
    """DELETE an org runner (``repo`` None) or a repository's runner: 204, 404 or 422."""
    headers = _rate_headers(fake, count=True)
    runner = fake._runners.get(runner_id)
    if (
        not owner_serves(fake, owner, orgs=repo is None)
        or runner is None
        or (bool(runner.repos) if repo is None else repo not in runner.repos)
    ):
        return error_reply(404, "Not Found", headers)
    if runner.busy:
        return error_reply(
            422, f'Bad request - Runner "{runner.name}" is still running a job"', headers
        )
    del fake._runners[runner_id]
    return Reply(204, None, headers)


def _page(
    fake: GitHubState,
    raw_path: str,
    found: Listing,
    query: dict[str, str],
    if_none_match: str | None,
) -> Reply:
    """One page of a listing: only its slice is rendered; ETag over the body; Link."""
    per_page = _int(query.get("per_page"), 30, 1, 100)
    last = max(1, math.ceil(len(found.items) / per_page))
    page = _int(query.get("page"), 1, 1, 1_000_000)
    chunk = [found.render(item) for item in found.items[(page - 1) * per_page : page * per_page]]
    total = len(found.items) if found.total is None else found.total
    body: Any = chunk if found.key is None else {"total_count": total, found.key: chunk}
    reply = Reply(200, body)
    etag = 'W/"' + hashlib.sha256(reply.raw).hexdigest()[:40] + '"'
    headers = {"etag": etag}
    link = _link(fake.url, raw_path, query, page, last)
    if link:
        headers["link"] = link
    if if_none_match and _etag_matches(if_none_match, etag):
        headers.update(_rate_headers(fake, count=False))
        return Reply(304, None, headers)
    headers.update(_rate_headers(fake, count=True))
    reply.headers = headers
    return reply


def _int(text: str | None, default: int, low: int, high: int) -> int:
    try:
        return min(high, max(low, int(text))) if text is not None else default
    except ValueError:
        return default


def _etag_matches(header: str, etag: str) -> bool:
    def strip(tag: str) -> str:
        tag = tag.strip()
        return tag[2:] if tag.startswith("W/") else tag

    return any(t.strip() == "*" or strip(t) == strip(etag) for t in header.split(","))


def _link(base: str, raw_path: str, query: dict[str, str], page: int, last: int) -> str:
    path = urlsplit(raw_path).path

    def url(n: int) -> str:
        return f"{base}{path}?{urlencode({**query, 'page': str(n)})}"

    parts = []
    if page > 1:
        parts.append(f'<{url(min(page - 1, last))}>; rel="prev"')
    if page < last:
        parts.append(f'<{url(page + 1)}>; rel="next"')
        parts.append(f'<{url(last)}>; rel="last"')
    if page > 1:
        parts.append(f'<{url(1)}>; rel="first"')
    return ", ".join(parts)


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, fake: GitHubState) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.fake = fake

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client closing its keep-alive connection mid-read is normal (httpx does on
        close): not a traceback on stderr. Anything else is logged, not printed."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
            return
        logging.getLogger(__name__).exception("fake GitHub: error serving %s", client_address)


def make_server(fake: GitHubState) -> FakeServer:
    return FakeServer(fake)

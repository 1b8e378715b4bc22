"""The controller's HTTP face: /metrics for Prometheus, /healthz, /readyz and the status page
at / (rendered by :mod:`autoscaler.app.status_page`: HTML for people, ``?format=text`` or
``Accept: text/plain`` for a terminal, ``?format=json``), served so that no client can cost
the controller a thread or the tick its time.

``/healthz`` answers 200 while the process serves; ``/readyz`` answers 503, one line per
reason, while the last successful poll is older than three poll intervals or a stage
reports a problem (the state store cannot be written).

Why not ``http.server.ThreadingHTTPServer`` (what this was): one thread per connection
and no timeout, so 300 idle connections held 308 threads. Why not waitress or uvicorn:
their timeouts are per read, so a client sending a byte every few seconds holds its
connection forever, and they would be a new dependency in the image. Here one asyncio
event loop, in one thread, owns every connection; each is a coroutine, not a thread:

- the request head must arrive whole within ``header_timeout`` (default 10 s) and within
  8 KiB: a slow, idle or byte-by-byte client is closed and counted;
- at most ``max_connections`` (default 64) are open: at the limit, the connection that
  has waited longest for its request head is closed to make room, so a flood of idle
  connections cannot lock out a scraper, which sends its request at once;
- handlers run on ``workers`` threads (default 2), so rendering /metrics never stalls
  the loop; the answer must be taken within ``write_timeout``;
- one request per connection (``Connection: close``); GET and HEAD.

Threads: one for the loop and ``workers`` for handlers, whatever the clients do.
Closed connections are counted in ``ci_autoscaler_http_connections_dropped_total{reason}``
and logged (a summary warning at most once a minute).

Routes are a table: :meth:`StatusServer.route` adds a page (a handler takes a
:class:`Request` and returns a :class:`Response`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from autoscaler.app import status_page
from autoscaler.controller import Controller
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)

MAX_HEAD = 8192
"""Bytes a request line and headers may take."""
TEXT = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class Request:
    method: str
    """``GET`` or ``HEAD``."""
    path: str
    """The path without its query string."""
    query: str
    headers: dict[str, str]
    """Header names lower-cased."""


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = TEXT
    headers: dict[str, str] = field(default_factory=dict)

    def encode(self, *, head_only: bool) -> bytes:
        lines = [
            f"HTTP/1.1 {self.status} {HTTPStatus(self.status).phrase}",
            f"Content-Type: {self.content_type}",
            f"Content-Length: {len(self.body)}",
            "Connection: close",
            *(f"{name}: {value}" for name, value in self.headers.items()),
        ]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head if head_only else head + self.body


Handler = Callable[[Request], Response]


def parse_head(head: bytes) -> Request | None:
    """The request in a request head, or None when it is not HTTP/1.x."""
    try:
        text = head.decode("latin-1")
        request_line, *header_lines = text.split("\r\n")
        method, target, version = request_line.split(" ")
    except ValueError:
        return None
    if not version.startswith("HTTP/1.") or not target.startswith("/"):
        return None
    headers = {}
    for line in header_lines:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    path, _, query = target.partition("?")
    return Request(method, path, query, headers)


class _Summary:
    """Counts closed connections and logs a warning about them at most once a minute."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._since: dict[str, int] = {}
        self._last = 0.0

    def dropped(self, reason: str) -> None:
        self._metrics.http_connections_dropped.labels(reason).inc()
        self._since[reason] = self._since.get(reason, 0) + 1
        log.debug("status server closed a connection: %s", reason)
        now = time.monotonic()
        if now - self._last >= 60.0:
            what = ", ".join(f"{n} {r}" for r, n in sorted(self._since.items()))
            log.warning("status server closed connections (%s) to protect itself", what)
            self._since, self._last = {}, now


@dataclass(eq=False)  # identity: kept in sets
class _Conn:
    writer: asyncio.StreamWriter
    evicted: bool = False


class StatusServer:
    """Serves the routes on ``host:port`` (port 0 picks a free one) from one event loop."""

    def __init__(
        self,
        controller: Controller,
        metrics: Metrics,
        host: str,
        port: int,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        max_connections: int = 64,
        header_timeout: float = 10.0,
        write_timeout: float = 10.0,
        workers: int = 2,
    ) -> None:
        self.controller = controller
        self.metrics = metrics
        self.clock = clock
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.write_timeout = write_timeout
        self._sock = socket.create_server((host, port), backlog=128)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="status-http")
        self._thread = threading.Thread(target=self._run, name="status-http", daemon=True)
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._waiting: dict[int, _Conn] = {}  # awaiting their request head, oldest first
        self._open: set[_Conn] = set()
        self._summary = _Summary(metrics)
        self.routes: dict[str, Handler] = {
            "/metrics": self._metrics,
            "/healthz": lambda _: Response(200, b"ok\n"),
            "/readyz": self._readyz,
            "/": self._status,
        }

    def route(self, path: str, handler: Handler) -> None:
        """Serve ``handler`` at ``path`` (replacing what was there)."""
        self.routes[path] = handler

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("status server did not start")
        log.info("serving /metrics, /healthz, /readyz on port %d", self.port)

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(10)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._sock.close()

    # --- the routes (run on a worker thread)

    def _metrics(self, _: Request) -> Response:
        return Response(200, generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST)

    def _readyz(self, _: Request) -> Response:
        reasons = self.controller.not_ready_reasons(self.clock())
        if not reasons:
            return Response(200, b"ready\n")
        return Response(503, "".join(f"not ready: {why}\n" for why in reasons).encode())

    def _status(self, request: Request) -> Response:
        """The status page (:mod:`autoscaler.app.status_page`): HTML with its CSP header,
        text or JSON by ``?format=`` or the Accept header."""
        target = f"{request.path}?{request.query}" if request.query else request.path
        page = status_page.respond(
            self.controller, self.clock(), target, request.headers.get("accept", "")
        )
        return Response(200, page.body, page.content_type, dict(page.headers))

    def _dispatch(self, request: Request) -> Response:
        if request.method not in ("GET", "HEAD"):
            return Response(405, b"method not allowed\n", headers={"Allow": "GET, HEAD"})
        handler = self.routes.get(request.path)
        if handler is None:
            return Response(404, b"not found\n")
        try:
            return handler(request)
        except Exception:
            log.exception("status page %s failed", request.path)
            return Response(500, b"internal error\n")

    # --- the event loop (its own thread)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._serve, sock=self._sock, limit=MAX_HEAD)
        self._ready.set()
        async with server:
            await self._stopping.wait()
            for conn in list(self._open):
                conn.writer.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Conn(writer)
        self._open.add(conn)
        self.metrics.http_connections_open.set(len(self._open))
        try:
            if len(self._open) > self.max_connections and not self._evict():
                self._summary.dropped("over_limit")
                return
            request = await self._read(conn, reader)
            if request is None:
                return
            loop = asyncio.get_running_loop()
            response = await loop.run_in_executor(self._pool, self._dispatch, request)
            writer.write(response.encode(head_only=request.method == "HEAD"))
            try:
                await asyncio.wait_for(writer.drain(), self.write_timeout)
            except TimeoutError:
                self._summary.dropped("write_timeout")
        except (ConnectionError, OSError):
            pass  # the client went away
        finally:
            self._open.discard(conn)
            self.metrics.http_connections_open.set(len(self._open))
            writer.close()

    async def _read(self, conn: _Conn, reader: asyncio.StreamReader) -> Request | None:
        """The request head within the deadline, or None (the connection is done)."""
        self._waiting[id(conn)] = conn
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.header_timeout)
        except TimeoutError:
            self._summary.dropped("header_timeout")
            return None
        except asyncio.LimitOverrunError:
            self._summary.dropped("too_large")
            await self._answer(conn, Response(431, b"request header too large\n"))
            return None
        except (asyncio.IncompleteReadError, ConnectionError):
            if conn.evicted:
                self._summary.dropped("evicted")
            return None
        finally:
            self._waiting.pop(id(conn), None)
        request = parse_head(head)
        if request is None:
            self._summary.dropped("bad_request")
            await self._answer(conn, Response(400, b"bad request\n"))
        return request

    def _evict(self) -> bool:
        """Close the connection waiting longest for its request head; False when none is."""
        for key, oldest in self._waiting.items():
            oldest.evicted = True
            oldest.writer.transport.abort()
            del self._waiting[key]
            return True
        return False

    async def _answer(self, conn: _Conn, response: Response) -> None:
        conn.writer.write(response.encode(head_only=False))
        with contextlib.suppress(TimeoutError, ConnectionError, OSError):
            await asyncio.wait_for(conn.writer.drain(), self.write_timeout)

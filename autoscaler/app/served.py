"""The served application: the status listener (the on-call page at ``/``, ``/metrics``,
``/healthz``, ``/readyz``), a Starlette app, and the webhook listener (``POST
/github/webhook``), a plain ASGI app of one route; each on uvicorn (httptools' parser,
uvloop's loop) in a thread of its own.

Why these: uvicorn takes the HTTP protocol as a class (``Config(http=...)``), so the
deadlines below are a subclass of its own protocol, on its parser's callbacks; httptools
(llhttp, in C) parses; Starlette routes the status listener and answers its 404/405.
aiohttp's server documents no way to replace its protocol, and the pure-Python parser
(h11, hypercorn's) costs more CPU a request (``bench/listener.py`` measures the
listener). The webhook route is one path and one method: a router, a request and a
response object a delivery would cost more than they give (``bench/ingest.py``).

The webhook has a listener of its own so that the one port exposed to GitHub (through a
load balancer) serves no /metrics, page or readiness, and a flood of deliveries never
crowds out a Prometheus scrape. Both listeners share everything else here.

No client can cost the controller a thread or the tick its time. uvicorn's timeouts are
per read (a client sending a byte every few seconds would hold its connection forever),
so each connection is guarded by deadlines kept in a protocol subclass
(:class:`_Guard`), on uvicorn's own parser callbacks, per listener:

- the request head must arrive whole within ``header_timeout`` and within 8 KiB (431
  past that): a slow, idle or byte-by-byte client is closed; a kept-alive connection
  waits for its next head under the same deadline;
- a body must arrive within ``body_timeout``; an answer the client does not read within
  ``write_timeout`` closes the connection;
- at most ``max_connections`` are open: at the limit the connection that has waited
  longest for its client (a request head or a body) is closed to make room, so a flood
  of idle or half-sent connections cannot lock out a scraper or GitHub, which send their
  request at once;
- handlers run on ``workers`` threads (default 2), never on the event loop.

Threads: per listener one for the loop and ``workers`` for handlers, whatever the
clients do. Closed connections are counted in
``ci_autoscaler_http_connections_dropped_total{reason}`` (the webhook listener's reasons
start with ``webhook_``) and logged (a summary warning at most once a minute).

The webhook listener checks what needs no body first: a ``Content-Length`` is required
(411 without, or with ``Transfer-Encoding``) and a body over the limit is refused unread
(413); the rest is :meth:`WebhookReceiver.accept`'s, on the event loop (a body over
:data:`INLINE_BODY` on a worker thread). A delivery the store must take first is answered
when the committer thread has made its batch durable; the batch's answers reach the loop
in one wake-up. With two controllers (``state.backend: dynamodb``) both serve
deliveries: the job index lives in the state table and the leader's next tick (woken by
its watch) reads it. A ``GET`` of
the path answers 405 (POST only): the terraform module's ALB health check expects it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, Gauge, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from autoscaler.app import status_page
from autoscaler.controller import Controller
from autoscaler.observe.github.webhook_receiver import PATH, Answer
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)
T = TypeVar("T")
#: uvicorn's own lines (its banners, one warning per bad request) give way to ours.
logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
_protocol_log = logging.getLogger(__name__ + ".protocol")
_protocol_log.setLevel(logging.ERROR)

MAX_HEAD = 8192
"""Bytes a request line and headers may take."""
TEXT = "text/plain; charset=utf-8"
#: Connections the kernel holds until the loop accepts them: past it a connection's SYN is
#: dropped and retried a second later, so a flood must not fill it before a scrape arrives.
BACKLOG = 1024
#: Seconds a stop waits for answers in flight before closing their connections.
GRACE = 2


@dataclass(frozen=True)
class Limits:
    """What one listener grants its clients."""

    max_connections: int = 64
    header_timeout: float = 10.0
    body_timeout: float = 10.0
    write_timeout: float = 10.0
    workers: int = 2


def text(status: int, body: str, headers: dict[str, str] | None = None) -> Response:
    return Response(body.encode(), status, headers, TEXT)


class _Summary:
    """Counts closed connections and logs a warning about them at most once a minute."""

    def __init__(self, metrics: Metrics, name: str, prefix: str) -> None:
        self._metrics = metrics
        self._name = name
        self._prefix = prefix
        self._since: dict[str, int] = {}
        self._last = 0.0

    def dropped(self, reason: str) -> None:
        self._metrics.http_connections_dropped.labels(self._prefix + reason).inc()
        self._since[reason] = self._since.get(reason, 0) + 1
        log.debug("%s closed a connection: %s", self._name, reason)
        now = time.monotonic()
        if now - self._last >= 60.0:
            what = ", ".join(f"{n} {r}" for r, n in sorted(self._since.items()))
            log.warning("%s closed connections (%s) to protect itself", self._name, what)
            self._since, self._last = {}, now


class _HeadTooLarge(Exception):
    """Raised from a parser callback: the head passed :data:`MAX_HEAD`."""


class _Guard:
    """One listener's connections: those open, those waiting for their client (a request
    head or a body, oldest first), and the protocol class that keeps their deadlines."""

    def __init__(self, limits: Limits, summary: _Summary, gauge: Gauge | None) -> None:
        self.limits = limits
        self.summary = summary
        self.gauge = gauge
        self.open: set[HttpToolsProtocol] = set()
        self.waiting: dict[HttpToolsProtocol, None] = {}
        self.protocol = self._protocol_class()

    def count(self) -> None:
        if self.gauge is not None:
            self.gauge.set(len(self.open))

    def make_room(self) -> bool:
        """Close the connection waiting longest for its client (for a request head or a
        body); False when none is."""
        for oldest in self.waiting:
            del self.waiting[oldest]
            self.open.discard(oldest)
            self.summary.dropped("evicted")
            oldest.transport.abort()
            return True
        return False

    def abort_all(self) -> None:
        for conn in list(self.open):
            conn.transport.abort()

    def _protocol_class(self) -> type[HttpToolsProtocol]:
        guard = self

        class Guarded(HttpToolsProtocol):
            """uvicorn's httptools protocol with this listener's deadlines and limits."""

            _timer: asyncio.TimerHandle | None = None  # waiting on the client to send
            _write_timer: asyncio.TimerHandle | None = None  # waiting on it to read
            _head = 0  # bytes received while a request head is awaited
            _head_parsed = 0  # bytes of this request's target and headers
            _in_body = False
            _too_large = False

            def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
                super().connection_made(transport)
                self.logger = _protocol_log
                guard.open.add(self)
                guard.count()
                if len(guard.open) > guard.limits.max_connections and not guard.make_room():
                    guard.summary.dropped("over_limit")
                    transport.abort()
                    return
                self._await_head()

            def connection_lost(self, exc: Exception | None) -> None:
                self._disarm()
                if self._write_timer is not None:
                    self._write_timer.cancel()
                guard.waiting.pop(self, None)
                guard.open.discard(self)
                guard.count()
                super().connection_lost(exc)

            # --- the deadlines

            def _arm(self, seconds: float, reason: str) -> None:
                self._disarm()
                self._timer = self.loop.call_later(seconds, self._expire, reason)

            def _disarm(self) -> None:
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None

            def _expire(self, reason: str) -> None:
                guard.waiting.pop(self, None)
                guard.summary.dropped(reason)
                self.transport.abort()

            def _await_head(self) -> None:
                self._head = 0
                guard.waiting[self] = None
                self._arm(guard.limits.header_timeout, "header_timeout")

            # --- uvicorn's and httptools' callbacks

            def data_received(self, data: bytes) -> None:
                if self._awaiting_head():
                    self._head += len(data)
                super().data_received(data)
                if self._awaiting_head() and self._head > MAX_HEAD:
                    self._refuse_head()  # a head trickled past the limit, still unfinished

            def _awaiting_head(self) -> bool:
                return self in guard.waiting and not self._in_body

            def on_url(self, url: bytes) -> None:
                self._grow(len(url))
                super().on_url(url)

            def on_header(self, name: bytes, value: bytes) -> None:
                self._grow(len(name) + len(value))
                super().on_header(name, value)

            def _grow(self, size: int) -> None:
                self._head_parsed += size
                if self._head_parsed > MAX_HEAD:
                    self._too_large = True
                    raise _HeadTooLarge

            def on_message_begin(self) -> None:
                self._head_parsed = 0
                super().on_message_begin()

            def on_headers_complete(self) -> None:
                self._in_body = True  # still waiting on the client, for its body
                self._arm(guard.limits.body_timeout, "body_timeout")
                super().on_headers_complete()

            def on_message_complete(self) -> None:
                self._in_body = False
                guard.waiting.pop(self, None)
                self._disarm()
                super().on_message_complete()
                if self.cycle.response_complete:  # answered before its body was in
                    self._next()

            def on_response_complete(self) -> None:
                super().on_response_complete()
                if not self._in_body:
                    self._next()

            def _next(self) -> None:
                """Kept alive: the next request head has the same deadline."""
                if not self.transport.is_closing():
                    self._await_head()

            def send_400_response(self, msg: str) -> None:
                if self._too_large:
                    self._refuse_head()
                    return
                guard.summary.dropped("bad_request")
                self._disarm()
                guard.waiting.pop(self, None)
                super().send_400_response(msg)

            def _refuse_head(self) -> None:
                guard.summary.dropped("too_large")
                self._disarm()
                guard.waiting.pop(self, None)
                body = b"request header too large\n"
                self.transport.write(
                    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                    b"content-type: text/plain; charset=utf-8\r\n"
                    b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
                )
                self.transport.close()

            def pause_writing(self) -> None:
                super().pause_writing()
                if self._write_timer is None:
                    self._write_timer = self.loop.call_later(
                        guard.limits.write_timeout, self._expire, "write_timeout"
                    )

            def resume_writing(self) -> None:
                super().resume_writing()
                if self._write_timer is not None:
                    self._write_timer.cancel()
                    self._write_timer = None

        return Guarded


class Listener:
    """One ASGI app served on ``host:port`` (port 0 picks a free one) from its own thread.

    The socket is bound here, so a taken port raises :class:`OSError` at construction and
    the caller can say so in one line."""

    def __init__(
        self,
        app: ASGIApp,
        metrics: Metrics,
        host: str,
        port: int,
        *,
        name: str,
        limits: Limits,
        prefix: str = "",
        gauge: Gauge | None = None,
    ) -> None:
        self.name = name
        self._sock = socket.create_server((host, port), backlog=BACKLOG)
        self.pool = ThreadPoolExecutor(max_workers=limits.workers, thread_name_prefix=name)
        self._guard = _Guard(limits, _Summary(metrics, name, prefix), gauge)
        self._config = uvicorn.Config(
            app,
            http=self._guard.protocol,
            loop="uvloop",
            lifespan="off",
            ws="none",  # no upgrade to a protocol the deadlines do not cover
            proxy_headers=False,
            access_log=False,
            log_config=None,
            server_header=False,
            backlog=BACKLOG,
            timeout_graceful_shutdown=GRACE,
        )
        self._server = uvicorn.Server(self._config)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not start")
            time.sleep(0.005)

    def stop(self) -> None:
        """Stop taking connections; answers in flight get :data:`GRACE` to finish."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(GRACE + 5)
        self.pool.shutdown(wait=False, cancel_futures=True)
        self._sock.close()

    def _run(self) -> None:
        with asyncio.Runner(loop_factory=self._config.get_loop_factory()) as runner:
            runner.run(self._serve())

    async def _serve(self) -> None:
        try:
            await self._server.serve(sockets=[self._sock])
        finally:
            self._guard.abort_all()

    async def off_loop_value(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a worker thread (what it raises, raised here)."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def off_loop(self, handler: Callable[..., Response], *args: Any) -> Response:
        """``handler(*args)`` on a worker thread; a failure is logged and answers 500."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self.pool, handler, *args)
        except Exception:
            log.exception("%s: %s failed", self.name, getattr(handler, "__name__", handler))
            return text(500, "internal error\n")


async def _not_found(_: Request, __: Exception) -> Response:
    return text(404, "not found\n")


async def _not_allowed(_: Request, exc: Exception) -> Response:
    allow = exc.headers.get("Allow", "") if isinstance(exc, HTTPException) and exc.headers else ""
    methods = sorted(m.strip() for m in allow.split(",") if m.strip())
    return text(405, "method not allowed\n", {"Allow": ", ".join(methods)})


def _app(routes: list[Route]) -> Starlette:
    return Starlette(routes=routes, exception_handlers={404: _not_found, 405: _not_allowed})


Endpoint = Callable[[Request], Awaitable[Response]]


class StatusServer:
    """``/metrics``, ``/healthz``, ``/readyz`` and the page at ``/``, GET and HEAD."""

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

        def serve(handler: Callable[[Request], Response]) -> Endpoint:
            async def endpoint(request: Request) -> Response:
                return await self.listener.off_loop(handler, request)

            return endpoint

        app = _app(
            [
                Route("/metrics", serve(self._metrics), methods=["GET"]),
                Route("/healthz", serve(lambda _: text(200, "ok\n")), methods=["GET"]),
                Route("/readyz", serve(self._readyz), methods=["GET"]),
                Route("/", serve(self._status), methods=["GET"]),
            ]
        )
        limits = Limits(
            max_connections=max_connections,
            header_timeout=header_timeout,
            body_timeout=header_timeout,
            write_timeout=write_timeout,
            workers=workers,
        )
        self.listener = Listener(
            app,
            metrics,
            host,
            port,
            name="status-http",
            limits=limits,
            gauge=metrics.http_connections_open,
        )

    @property
    def port(self) -> int:
        return self.listener.port

    def start(self) -> None:
        self.listener.start()
        log.info("serving /metrics, /healthz, /readyz on port %d", self.port)

    def stop(self) -> None:
        self.listener.stop()

    # --- the routes (run on a worker thread)

    def _metrics(self, _: Request) -> Response:
        return Response(generate_latest(self.metrics.registry), 200, media_type=CONTENT_TYPE_LATEST)

    def _readyz(self, _: Request) -> Response:
        reasons = self.controller.not_ready_reasons(self.clock())
        if not reasons:
            return text(200, "ready\n")
        return text(503, "".join(f"not ready: {why}\n" for why in reasons))

    def _status(self, request: Request) -> Response:
        """The status page (:mod:`autoscaler.app.status_page`): HTML with its CSP header,
        text or JSON by ``?format=`` or the Accept header."""
        query = request.url.query
        target = f"{request.url.path}?{query}" if query else request.url.path
        page = status_page.respond(
            self.controller, self.clock(), target, request.headers.get("accept", "")
        )
        return Response(page.body, 200, dict(page.headers), page.content_type)


class Receiver(Protocol):
    """What the webhook listener hands deliveries to (a
    :class:`~autoscaler.observe.github.webhook_receiver.WebhookReceiver`)."""

    @property
    def max_body(self) -> int: ...

    def too_large(self, headers: Mapping[str, str]) -> Answer: ...

    def accept(self, headers: Mapping[str, str], body: bytes) -> Answer | Future[Answer]: ...


#: A body up to this size is checked (signature, parse) on the event loop: a few tens of
#: microseconds, less than the hop to a worker thread would cost. A larger one (a
#: signed body of up to ``max_body_bytes``) is checked on a worker.
INLINE_BODY = 64 * 1024
_TEXT = TEXT.encode()
#: Connections the webhook listener holds open. GitHub sends each delivery on a connection
#: of its own, answered once durable: at 1,000 deliveries a second and a commit stalled
#: 50 ms by a busy disk, 100 wait at once, and 64 would refuse a burst.
WEBHOOK_CONNECTIONS = 512


class _Landing:
    """Answers the committer thread completes, brought onto the event loop one wake-up a
    batch: the committer completes a batch's futures in a row, the first schedules
    :meth:`_land` and the rest join its list (a wake-up a delivery would cost the loop a
    self-pipe write and read each)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._done: list[tuple[Future[Answer], asyncio.Future[Answer]]] = []
        self._lock = threading.Lock()
        self._scheduled = False

    def wait(self, step: Future[Answer]) -> asyncio.Future[Answer]:
        waiter: asyncio.Future[Answer] = self._loop.create_future()
        step.add_done_callback(lambda done: self._arrived(done, waiter))
        return waiter

    def _arrived(self, done: Future[Answer], waiter: asyncio.Future[Answer]) -> None:
        with self._lock:
            self._done.append((done, waiter))
            if self._scheduled:
                return
            self._scheduled = True
        self._loop.call_soon_threadsafe(self._land)

    def _land(self) -> None:
        with self._lock:
            landed, self._done, self._scheduled = self._done, [], False
        for done, waiter in landed:
            if waiter.done():
                continue  # its connection went away
            error = done.exception()
            if error is None:
                waiter.set_result(done.result())
            else:
                waiter.set_exception(error)


class WebhookServer:
    """``POST /github/webhook`` and nothing else, as a plain ASGI app (:meth:`__call__`):
    the one route needs no router, request or response objects, so none is built per
    delivery (``bench/ingest.py`` measures it against the Starlette route it replaced)."""

    def __init__(
        self,
        receiver: Receiver,
        metrics: Metrics,
        host: str,
        port: int,
        *,
        max_connections: int = WEBHOOK_CONNECTIONS,
        header_timeout: float = 10.0,
        body_timeout: float = 10.0,
        workers: int = 2,
    ) -> None:
        self.receiver = receiver
        limits = Limits(
            max_connections=max_connections,
            header_timeout=header_timeout,
            body_timeout=body_timeout,
            write_timeout=body_timeout,
            workers=workers,
        )
        self._landing: _Landing | None = None
        self.listener = Listener(
            self, metrics, host, port, name="webhook-http", limits=limits, prefix="webhook_"
        )

    @property
    def port(self) -> int:
        return self.listener.port

    def start(self) -> None:
        self.listener.start()
        log.info("serving POST %s on port %d", PATH, self.port)

    def stop(self) -> None:
        self.listener.stop()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # no lifespan (off), no websocket (none)
        if scope["path"] != PATH:
            await _answer(send, 404, b"not found\n")
            return
        if scope["method"] != "POST":
            await _answer(send, 405, b"method not allowed\n", [(b"allow", b"POST")])
            return
        headers: dict[str, str] = {}
        for name, value in scope["headers"]:  # lower-cased by the parser; the first counts
            headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
        status, body = await self._deliver(headers, receive)
        await _answer(send, status, body, _CLOSE if status in (411, 413) else ())

    async def _deliver(self, headers: dict[str, str], receive: Receive) -> tuple[int, bytes]:
        length = headers.get("content-length", "")
        if not length.isdigit() or "transfer-encoding" in headers:
            return 411, b"Content-Length required\n"  # the body is not read: closed after
        if int(length) > self.receiver.max_body:
            answer = self.receiver.too_large(headers)
            return answer.status, answer.body
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return 400, b"bad request\n"  # never sent: the client is gone
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        try:
            if len(body) <= INLINE_BODY:
                step = self.receiver.accept(headers, body)
            else:
                step = await self.listener.off_loop_value(self.receiver.accept, headers, body)
            if not isinstance(step, Answer):
                # The store takes the delivery first: wait for it here, holding no thread.
                if self._landing is None:
                    self._landing = _Landing(asyncio.get_running_loop())
                step = await self._landing.wait(step)
        except Exception:
            log.exception("%s: a delivery failed", self.listener.name)
            return 500, b"internal error\n"
        return step.status, step.body


_CLOSE = ((b"connection", b"close"),)


async def _answer(
    send: Send, status: int, body: bytes, extra: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    headers = [(b"content-type", _TEXT), (b"content-length", b"%d" % len(body)), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

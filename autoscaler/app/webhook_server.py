"""The webhook listener: ``POST /github/webhook`` on its own port, nothing else.

A second listener, not a route of the status server, so that the one port exposed to
GitHub (through a load balancer) serves no /metrics, status page or readiness, and a
flood of deliveries can never crowd out a Prometheus scrape.

Built like :mod:`autoscaler.app.httpserver`: one asyncio loop in one thread owns every
connection, so a slow client costs a coroutine, never a thread. The head must arrive
within ``header_timeout`` and 8 KiB; the body must announce its ``Content-Length``
(411 without), is refused unread when larger than the limit (413) and must arrive within
``body_timeout``. The request is then handed to :meth:`WebhookReceiver.handle` on a
worker thread (HMAC and JSON parsing stay off the loop); that call only queues, so the
answer goes out in milliseconds whatever the tick is doing. At most ``max_connections``
are open; past that a new connection is closed at once (GitHub retries nothing, the
reconcile counts the job).

A ``GET`` of the path answers 405 (POST only): the terraform module's ALB health check
expects it. With two controllers (``state.backend: dynamodb``) both serve: the job index
lives in the state table, a delivery that reaches a follower is written there and the
leader's next tick (woken at once by its watch) reads it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

from autoscaler.app.httpserver import MAX_HEAD, Response, parse_head
from autoscaler.observe.github.webhook_receiver import PATH, WebhookReceiver
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)


class WebhookServer:
    """Serves ``POST /github/webhook`` on ``host:port`` (port 0 picks a free one)."""

    def __init__(
        self,
        receiver: WebhookReceiver,
        metrics: Metrics,
        host: str,
        port: int,
        *,
        max_connections: int = 64,
        header_timeout: float = 10.0,
        body_timeout: float = 10.0,
        workers: int = 2,
    ) -> None:
        self.receiver = receiver
        self.metrics = metrics
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self._sock = socket.create_server((host, port), backlog=128)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="webhook-http")
        self._thread = threading.Thread(target=self._run, name="webhook-http", daemon=True)
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._open = 0

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("webhook listener did not start")
        log.info("serving POST %s on port %d", PATH, self.port)

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(10)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._sock.close()

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._serve, sock=self._sock, limit=MAX_HEAD)
        self._ready.set()
        async with server:
            await self._stopping.wait()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open += 1
        try:
            if self._open > self.max_connections:
                self.metrics.http_connections_dropped.labels("webhook_over_limit").inc()
                return
            response = await self._respond(reader)
            if response is not None:
                writer.write(response.encode(head_only=False))
                await asyncio.wait_for(writer.drain(), self.body_timeout)
        except (ConnectionError, OSError, TimeoutError):
            pass  # the client went away or stalled
        finally:
            self._open -= 1
            writer.close()

    async def _respond(self, reader: asyncio.StreamReader) -> Response | None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.header_timeout)
        except (TimeoutError, asyncio.IncompleteReadError):
            return None
        except asyncio.LimitOverrunError:
            return Response(431, b"request header too large\n")
        request = parse_head(head)
        if request is None:
            return Response(400, b"bad request\n")
        if request.path != PATH:
            return Response(404, b"not found\n")
        if request.method != "POST":
            return Response(405, b"method not allowed\n", headers={"Allow": "POST"})
        length = request.headers.get("content-length", "")
        if not length.isdigit() or "transfer-encoding" in request.headers:
            return Response(411, b"Content-Length required\n")
        size = int(length)
        if size > self.receiver.max_body:
            answer = self.receiver.too_large(request.headers)  # refused unread
            return Response(answer.status, answer.body)
        try:
            body = await asyncio.wait_for(reader.readexactly(size), self.body_timeout)
        except (TimeoutError, asyncio.IncompleteReadError):
            return None
        loop = asyncio.get_running_loop()
        try:
            answer = await loop.run_in_executor(
                self._pool, self.receiver.handle, request.headers, body
            )
        except Exception:
            log.exception("webhook delivery handling failed")
            return Response(500, b"internal error\n")
        return Response(answer.status, answer.body)

"""The webhook listener as it was before the served application moved to a server
library: raw asyncio with its own request-head parser, one request per connection.

Kept here, outside the package, only as the baseline ``bench/listener.py`` measures the
served application against, side by side in one run. Nothing in ``autoscaler`` imports it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Protocol

from autoscaler.observe.github.webhook_receiver import PATH, Answer
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)


class Receiver(Protocol):
    """What this listener hands deliveries to, on a worker thread: a blocking ``handle``."""

    @property
    def max_body(self) -> int: ...

    def too_large(self, headers: Mapping[str, str]) -> Answer: ...

    def handle(self, headers: Mapping[str, str], body: bytes) -> Answer: ...


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


class AsyncioListener:
    """The pre-library listener: ``POST /github/webhook`` on ``host:port``."""

    def __init__(
        self,
        receiver: Receiver,
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

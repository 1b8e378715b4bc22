"""The controller's HTTP face: /metrics for Prometheus, /healthz, /readyz and a status page.

``/healthz`` answers 200 while the process serves; ``/readyz`` answers 503 once the last
successful poll is older than three poll intervals (the picture is stale).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from autoscaler.app.report import format_table
from autoscaler.controller import Controller

log = logging.getLogger(__name__)


class StatusServer:
    """A small threaded HTTP server bound to ``host:port`` (port 0 picks a free one)."""

    def __init__(
        self,
        controller: Controller,
        registry: CollectorRegistry,
        host: str,
        port: int,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.controller = controller
        self.registry = registry
        self.clock = clock
        handler = _make_handler(self)
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="status-http", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()
        log.info("serving /metrics, /healthz, /readyz on port %d", self.port)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _make_handler(owner: StatusServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                body = generate_latest(owner.registry)
                self._send(200, body, CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._send(200, b"ok\n")
            elif path == "/readyz":
                reasons = owner.controller.not_ready_reasons(owner.clock())
                if not reasons:
                    self._send(200, b"ready\n")
                else:
                    text = "".join(f"not ready: {why}\n" for why in reasons)
                    self._send(503, text.encode())
            elif path == "/":
                result = owner.controller.last_result
                text = format_table(result) if result else "no tick yet\n"
                self._send(200, text.encode())
            else:
                self._send(404, b"not found\n")

        def _send(self, status: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("http %s", format % args)

    return Handler

"""The webhook route as it was served before the plain ASGI endpoint, kept as a baseline of
``bench/ingest.py`` (nothing in ``autoscaler`` uses it): a Starlette route with a
``Request`` and a ``Response`` a delivery, and each answer brought from the committer
thread to the event loop by a wake-up of its own (``asyncio.wrap_future``). The same
listener (uvicorn, httptools, uvloop, the deadlines), receiver and group commit as
:class:`~autoscaler.app.served.WebhookServer`, so the two differ in the route alone.
"""

from __future__ import annotations

import asyncio
import logging

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from autoscaler.app.served import INLINE_BODY, TEXT, Limits, Listener, Receiver, _app, text
from autoscaler.observe.github.webhook_receiver import PATH, Answer
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)


class RoutedWebhookServer:
    """``POST /github/webhook`` as a Starlette route (the baseline)."""

    def __init__(
        self, receiver: Receiver, metrics: Metrics, host: str, port: int, *, max_connections: int
    ) -> None:
        self.receiver = receiver
        app = _app([Route(PATH, self._deliver, methods=["POST"])])
        limits = Limits(max_connections=max_connections)
        self.listener = Listener(
            app, metrics, host, port, name="webhook-http", limits=limits, prefix="webhook_"
        )

    @property
    def port(self) -> int:
        return self.listener.port

    def start(self) -> None:
        self.listener.start()

    def stop(self) -> None:
        self.listener.stop()

    async def _deliver(self, request: Request) -> Response:
        headers = request.headers
        length = headers.get("content-length", "")
        close = {"Connection": "close"}
        if not length.isdigit() or "transfer-encoding" in headers:
            return text(411, "Content-Length required\n", close)
        if int(length) > self.receiver.max_body:
            answer = self.receiver.too_large(headers)
            return Response(answer.body, answer.status, close, TEXT)
        try:
            body = await request.body()
        except ClientDisconnect:
            return text(400, "bad request\n")
        try:
            if len(body) <= INLINE_BODY:
                step = self.receiver.accept(headers, body)
            else:
                step = await self.listener.off_loop_value(self.receiver.accept, headers, body)
            if not isinstance(step, Answer):
                step = await asyncio.wrap_future(step)
        except Exception:
            log.exception("a delivery failed")
            return text(500, "internal error\n")
        return Response(step.body, step.status, media_type=TEXT)

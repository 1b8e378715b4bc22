"""Receiver requests never reach httpx's or httpcore's own logs, at any level.

httpx logs every request with its full URL (``HTTP Request: POST https://user:pass@host/
services/T0/B0/XXXX``) and ``--log-level debug`` brings that line back; a receiver URL is
a secret (a Slack webhook's path is its key). So while a thread sends to a receiver
(:func:`receiver_requests`), a filter on the ``httpx`` and ``httpcore.*`` loggers drops
every record that thread makes. Other clients (the GitHub poll) keep their request log.

A logger filter, not a handler's: it holds for every handler anyone attaches, at every
level. Our own lines about deliveries name the receiver, never its URL.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: Loggers httpx 0.2x and httpcore 1.x log requests and connections on.
HTTP_LOGGERS = (
    "httpx",
    "httpcore.connection",
    "httpcore.connection_pool",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore.socks",
)

_sending = threading.local()
_lock = threading.Lock()


class _DropReceiverRequests(logging.Filter):
    """Drops records made by a thread that is sending to a receiver."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_sending, "depth", 0)


_FILTER = _DropReceiverRequests()


def install() -> None:
    """Attach the filter to every httpx/httpcore logger (idempotent, thread-safe)."""
    with _lock:
        names = set(HTTP_LOGGERS) | {
            name for name in logging.root.manager.loggerDict if name.startswith("httpcore.")
        }
        for name in sorted(names):
            logger = logging.getLogger(name)
            if _FILTER not in logger.filters:
                logger.addFilter(_FILTER)


@contextmanager
def receiver_requests() -> Iterator[None]:
    """Within this block, this thread's httpx/httpcore log records are dropped."""
    install()
    _sending.depth = getattr(_sending, "depth", 0) + 1
    try:
        yield
    finally:
        _sending.depth -= 1

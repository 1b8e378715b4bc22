"""GitHub's bytes on the wire, below httpx's client: a connection per worker thread, the
response headers read once, a body read (and inflated) within the page limit.

Why not ``httpx.Client``: ``bench/github_poll.py`` measures the poll's CPU per request at
four org sizes, and a client shared by the 16 workers costs over half as much CPU again a
request (its pool's lock and scan at every request, its cookie jar, its URL and header
merging) on a controller that is CPU-bound at 16 requests in flight; the docs' benchmark
page (``github_poll``) has the figures. So :class:`GitHubHttp` hands each worker thread its
own keep-alive ``httpx.HTTPTransport`` (one connection, no coordination between threads;
an injected transport, ``httpx.MockTransport`` in tests, is shared) and does here what the
client would: the proxy (``github.proxy``, never the environment's), the timeout of each
request, gzip. This is also where a hostile or broken answer is stopped: a body over
:data:`MAX_PAGE_BYTES` is refused while it is read, and a gzipped one while it is
inflated (a small gzip bomb is refused as early as a large page), before anything parses it.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterable
from typing import Any

import httpx

from autoscaler import __version__

#: A page larger than this is refused unparsed (100 jobs with their steps are ~100 KB).
MAX_PAGE_BYTES = 8 * 1024 * 1024

#: Sent with every request. ``gzip`` only: :func:`read_body` inflates it within the page limit.
REQUEST_HEADERS = {
    "Accept": "application/vnd.github+json",
    "Accept-Encoding": "gzip",
    "X-GitHub-Api-Version": "2022-11-28",
    "User-Agent": f"ci-autoscaler/{__version__}",
}


class ThreadTransports:
    """One keep-alive connection per worker thread (an injected transport is shared)."""

    def __init__(self, injected: httpx.BaseTransport | None, proxy: httpx.Proxy | None) -> None:
        self._injected = injected
        self._proxy = proxy
        self._local = threading.local()
        #: One TLS context for every thread's transport (loading the CA bundle costs ~0.1 s
        #: of CPU each time).
        self._ssl = httpx.create_ssl_context()
        self._transports: list[httpx.BaseTransport] = []
        self._lock = threading.Lock()

    def here(self) -> httpx.BaseTransport:
        """This thread's transport (the injected one, else one of its own)."""
        transport: httpx.BaseTransport | None = getattr(self._local, "transport", None)
        if transport is None:
            transport = self._injected or httpx.HTTPTransport(
                verify=self._ssl,
                limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
                proxy=self._proxy,
            )
            self._local.transport = transport
            if self._injected is None:
                with self._lock:
                    self._transports.append(transport)
        return transport

    def close(self) -> None:
        """Close every transport this made (an injected one is its owner's to close)."""
        with self._lock:
            transports, self._transports = self._transports, []
        for transport in transports:
            transport.close()


def response_headers(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """Response headers as a plain dict, read once (``httpx.Headers`` rescans every
    header on each lookup, and an answer is looked up a dozen times)."""
    found: dict[str, str] = {}
    for key, value in raw:
        name, text = key.decode("latin-1").lower(), value.decode("latin-1")
        found[name] = f"{found[name]}, {text}" if name in found else text
    return found


def read_body(stream: Any, encoding: str | None) -> bytes | None:
    """The whole body, inflated when gzipped; None once it passes MAX_PAGE_BYTES (read
    or inflated: a small gzip bomb is refused as early as a large page). ``stream``: the
    response's byte stream (typed ``Any``: httpx types it sync-or-async)."""
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

"""The bytes of a GitHub answer: request headers, response headers, a bounded body.

Kept apart from GitHubHttp's retry loop because this is where a hostile or broken
answer is stopped: a body over :data:`MAX_PAGE_BYTES` is refused while it is read (and a
gzipped one while it is inflated: a small gzip bomb is refused as early as a large page),
before anything parses it. No httpx here: the transport hands over raw header pairs and
an iterable of chunks.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import Any

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

"""The ETag cache: URL -> (ETag, Link, compact record), bounded, and persisted through a port.

A GET whose URL is cached sends ``If-None-Match``; a ``304`` (free against the rate limit)
reuses the record. Entries not asked for within :data:`TTL_SECONDS` (runs that finished,
repositories no longer watched) are dropped, and at most ``max_entries`` are kept (the
least recently used go first), so memory stays bounded by the org's size.

**A restart is not a cold start**: the cache loads from a :class:`PollCacheStore` when the
source starts and writes the entries that changed after each poll, so the first tick
after a restart is mostly 304s. The port is two calls over a bounded string mapping; the
SQLite state store implements it today (``state/sqlite.py``), and any key-value backend
can.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from autoscaler.observe.github.records import Interner, PageRecord, decode, encode

log = logging.getLogger("autoscaler.observe.github")

#: Entries unused this long are dropped (a finished run's jobs pages, a deleted repository).
TTL_SECONDS = 2 * 3600.0
#: At most this many entries (about 1 KB each in memory: a job page record is shared).
MAX_ENTRIES = 200_000


class PollCacheStore(Protocol):
    """Where the ETag cache survives a restart: a bounded mapping of string to string."""

    def load_poll_cache(self) -> dict[str, str]:
        """Every stored entry (key -> value)."""
        ...

    def save_poll_cache(self, put: Mapping[str, str], drop: Collection[str]) -> None:
        """Store ``put`` (insert or replace) and delete ``drop``, in one transaction."""
        ...


@dataclass(slots=True)
class Entry:
    etag: str
    link: str | None
    record: PageRecord
    used: float
    """Wall time of the last request for this URL (not persisted: a load counts as use)."""


class EtagCache:
    """Thread-safe: workers read and fill it; the poll persists what changed."""

    def __init__(self, *, max_entries: int = MAX_ENTRIES, ttl: float = TTL_SECONDS) -> None:
        self._entries: dict[str, Entry] = {}
        #: URL -> its encoded entry, written at the next flush. Encoded in :meth:`put`, on
        #: the worker that fetched the page (while other requests are in flight), not
        #: all at once after the poll, when the tick waits on it.
        self._dirty: dict[str, str] = {}
        self._dropped: set[str] = set()
        self._lock = threading.Lock()
        self._max = max_entries
        self._ttl = ttl
        self.interner = Interner()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, url: str, now: float) -> Entry | None:
        with self._lock:
            entry = self._entries.get(url)
            if entry is not None:
                entry.used = now
            return entry

    def put(self, url: str, etag: str, link: str | None, record: PageRecord, now: float) -> None:
        text = encode(record, etag, link)
        with self._lock:
            self._entries[url] = Entry(etag, link, record, now)
            self._dirty[url] = text
            self._dropped.discard(url)

    def discard(self, url: str) -> None:
        """Forget a URL whose answer is no longer cacheable (a malformed page)."""
        with self._lock:
            if self._entries.pop(url, None) is not None:
                self._dropped.add(url)
            self._dirty.pop(url, None)

    def drop(self, urls: Iterable[str]) -> None:
        with self._lock:
            for url in urls:
                if self._entries.pop(url, None) is not None:
                    self._dropped.add(url)
                self._dirty.pop(url, None)

    def sweep(self, now: float) -> int:
        """Drop entries unused for the TTL, then the least recently used over the bound."""
        with self._lock:
            stale = [u for u, e in self._entries.items() if now - e.used > self._ttl]
            excess = len(self._entries) - len(stale) - self._max
            if excess > 0:
                fresh = sorted(
                    (e.used, u) for u, e in self._entries.items() if now - e.used <= self._ttl
                )
                stale += [u for _, u in fresh[:excess]]
            for url in stale:
                del self._entries[url]
                self._dirty.pop(url, None)
                self._dropped.add(url)
            return len(stale)

    def load(self, store: PollCacheStore, now: float) -> int:
        """Fill from the store; returns how many entries loaded (bad ones are dropped)."""
        raw = store.load_poll_cache()
        bad: list[str] = []
        with self._lock:
            for url, text in raw.items():
                try:
                    record, etag, link = decode(text, self.interner)
                except ValueError:
                    bad.append(url)
                    continue
                self._entries[url] = Entry(etag, link, record, now)
            self._dropped.update(bad)
        if bad:
            log.warning("dropped %d unreadable GitHub cache entries from the state store", len(bad))
        return len(raw) - len(bad)

    def flush(self, store: PollCacheStore) -> int:
        """Write what changed since the last flush; returns how many entries were written."""
        with self._lock:
            encoded = self._dirty
            drop = set(self._dropped)
            self._dirty = {}
            self._dropped.clear()
        if encoded or drop:
            try:
                store.save_poll_cache(encoded, drop)
            except BaseException:
                with self._lock:  # written next time (unless replaced or dropped meanwhile)
                    for url, text in encoded.items():
                        if url in self._entries:
                            self._dirty.setdefault(url, text)
                    self._dropped.update(drop)
                raise
        return len(encoded)

"""One keep-alive connection per worker thread for GitHubHttp.

One shared pool of ``max_concurrency`` connections serialises every request on
httpcore's pool lock and rescans the pool at each: that cost grows with the requests in
flight. A connection per thread needs no coordination at all. An injected transport
(tests: ``httpx.MockTransport``) is shared by every thread. Kept apart from GitHubHttp
because it is about connections, not about what a request means.
"""

from __future__ import annotations

import threading

import httpx


class ThreadTransports:
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

"""A load generator for one HTTP listener, run in a process of its own (so that it does not
share the listener's interpreter lock): signed ``POST /github/webhook`` deliveries, built
and signed before the clock starts, at a fixed offered rate (open loop: a late answer
never delays the next request, so a stall shows in the latencies), or a fixed number in
flight (closed loop).

Two ways to connect, both measured: a new connection a delivery, as GitHub sends them,
or kept-alive connections (a pool that grows only while every connection is busy), which
leaves the listener only its per-request work.

Latency is from the moment a request was due to the end of its answer. The client is an
asyncio protocol on uvloop, not streams: it reads only what it needs to know the answer
is whole (status line, Content-Length, body), so it takes as little of the machine's two
cores as it can; the CPU it took is in the result. A benchmark tool: nothing in
``autoscaler`` uses it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import cast

import uvloop


@dataclass(frozen=True)
class Result:
    offered: float
    """Requests per second asked for."""
    sent: int
    answered: int
    """Answers with a 2xx status."""
    failed: int
    """Errors, timeouts and other statuses."""
    seconds: float
    """From the first request due to the last answer."""
    latencies: tuple[float, ...]
    """Seconds, of the answered requests."""
    ok: tuple[bool, ...] = ()
    """Whether each request (in the order given) was answered with a 2xx status."""
    cpu: float = 0.0
    """CPU seconds the load process took sending them."""
    connections: int = 0
    """Connections opened."""

    @property
    def rate(self) -> float:
        return self.answered / self.seconds if self.seconds else 0.0


class _Connection(asyncio.Protocol):
    """One connection: a request written, its answer read, then the next."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[int] | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0 or self.waiter is None:
            return
        head = bytes(self.buffer[:end]).lower()
        length = 0
        for line in head.split(b"\r\n")[1:]:
            if line.startswith(b"content-length:"):
                length = int(line[15:])
        if len(self.buffer) < end + 4 + length:
            return
        del self.buffer[: end + 4 + length]
        waiter, self.waiter = self.waiter, None
        if not waiter.done():
            waiter.set_result(int(head[9:12]))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("closed"))

    async def exchange(self, request: bytes) -> int:
        assert self.transport is not None
        self.waiter = self.loop.create_future()
        self.transport.write(request)
        return await self.waiter

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class _Client:
    """Connections to one listener: a new one a request, or a pool kept alive."""

    def __init__(self, host: str, port: int, keep_alive: bool, timeout: float) -> None:
        self.host = host
        self.port = port
        self.keep_alive = keep_alive
        self.timeout = timeout
        self.idle: list[_Connection] = []
        self.opened = 0

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(lambda: _Connection(loop), self.host, self.port)
        self.opened += 1
        return conn

    async def one(self, request: bytes, due: float) -> tuple[bool, float]:
        conn: _Connection | None = None
        try:
            while self.idle and conn is None:
                conn = self.idle.pop()
                if conn.closed:
                    conn = None
            if conn is None:
                conn = await self._connect()
            status = await asyncio.wait_for(conn.exchange(request), self.timeout)
            ok = 200 <= status < 300
        except (OSError, TimeoutError, RuntimeError):  # RuntimeError: closed under us
            ok = False
        if conn is not None:
            if self.keep_alive and ok and not conn.closed:
                self.idle.append(conn)
            else:
                conn.close()
        return ok, time.monotonic() - due

    def close(self) -> None:
        for conn in self.idle:
            conn.close()


def _result(
    rate: float, client: _Client, done: list[tuple[bool, float]], seconds: float, cpu: float
) -> Result:
    latencies = tuple(lat for ok, lat in done if ok)
    return Result(
        rate,
        len(done),
        len(latencies),
        len(done) - len(latencies),
        seconds,
        latencies,
        tuple(ok for ok, _ in done),
        cpu,
        client.opened,
    )


async def _run(
    host: str, port: int, requests: list[bytes], rate: float, timeout: float, keep_alive: bool
) -> Result:
    loop = asyncio.get_running_loop()
    client = _Client(host, port, keep_alive, timeout)
    cpu = time.process_time()
    start = time.monotonic() + 0.05
    tasks = []
    for i, request in enumerate(requests):
        due = start + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(loop.create_task(client.one(request, due)))
    done = await asyncio.gather(*tasks)
    seconds = time.monotonic() - start
    client.close()
    return _result(rate, client, list(done), seconds, time.process_time() - cpu)


def offer(
    port: int, requests: list[bytes], rate: float, timeout: float = 5.0, keep_alive: bool = False
) -> Result:
    """Send ``requests`` to ``127.0.0.1:port`` at ``rate`` a second; what came back."""
    return uvloop.run(_run("127.0.0.1", port, requests, rate, timeout, keep_alive))


async def _closed(
    host: str, port: int, requests: list[bytes], concurrency: int, timeout: float, keep_alive: bool
) -> Result:
    client = _Client(host, port, keep_alive, timeout)
    pending = list(reversed(list(enumerate(requests))))
    done: list[tuple[bool, float]] = [(False, 0.0)] * len(requests)

    async def worker() -> None:
        while pending:
            i, request = pending.pop()
            done[i] = await client.one(request, time.monotonic())

    cpu = time.process_time()
    start = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    seconds = time.monotonic() - start
    client.close()
    return _result(0.0, client, done, seconds, time.process_time() - cpu)


def saturate(
    port: int,
    requests: list[bytes],
    concurrency: int,
    timeout: float = 5.0,
    keep_alive: bool = False,
) -> Result:
    """Send ``requests`` with ``concurrency`` in flight (closed loop): the most it takes."""
    return uvloop.run(_closed("127.0.0.1", port, requests, concurrency, timeout, keep_alive))

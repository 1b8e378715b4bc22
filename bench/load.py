"""A load generator for one HTTP listener, run in a process of its own (so that it does not
share the listener's interpreter lock): signed ``POST /github/webhook`` deliveries, each on
a new connection as GitHub sends them, at a fixed offered rate (open loop: a late answer
never delays the next request, so a stall shows in the latencies).

Latency is from the moment a request was due to the end of its answer. The client reads
only what it needs to know the answer is whole (status line, Content-Length, body); it
is a benchmark tool, nothing in ``autoscaler`` uses it. It runs on uvloop, the cheaper
loop, so that the client takes as little of the machine's two cores as it can.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

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

    @property
    def rate(self) -> float:
        return self.answered / self.seconds if self.seconds else 0.0


async def _one(
    host: str, port: int, request: bytes, due: float, timeout: float
) -> tuple[bool, float]:
    async def exchange() -> bool:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            return 200 <= status < 300
        finally:
            writer.close()

    try:
        ok = await asyncio.wait_for(exchange(), timeout)
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
        ok = False
    return ok, time.monotonic() - due


async def _run(host: str, port: int, requests: list[bytes], rate: float, timeout: float) -> Result:
    loop = asyncio.get_running_loop()
    start = time.monotonic() + 0.05
    tasks = []
    for i, request in enumerate(requests):
        due = start + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(loop.create_task(_one(host, port, request, due, timeout)))
    done = await asyncio.gather(*tasks)
    seconds = time.monotonic() - start
    latencies = tuple(lat for ok, lat in done if ok)
    return Result(
        rate,
        len(requests),
        len(latencies),
        len(done) - len(latencies),
        seconds,
        latencies,
        tuple(ok for ok, _ in done),
    )


def offer(port: int, requests: list[bytes], rate: float, timeout: float = 5.0) -> Result:
    """Send ``requests`` to ``127.0.0.1:port`` at ``rate`` a second; what came back."""
    return uvloop.run(_run("127.0.0.1", port, requests, rate, timeout))


async def _closed(
    host: str, port: int, requests: list[bytes], concurrency: int, timeout: float
) -> Result:
    pending = list(reversed(list(enumerate(requests))))
    done: list[tuple[bool, float]] = [(False, 0.0)] * len(requests)

    async def worker() -> None:
        while pending:
            i, request = pending.pop()
            done[i] = await _one(host, port, request, time.monotonic(), timeout)

    start = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    seconds = time.monotonic() - start
    latencies = tuple(lat for ok, lat in done if ok)
    return Result(
        0.0,
        len(requests),
        len(latencies),
        len(done) - len(latencies),
        seconds,
        latencies,
        tuple(ok for ok, _ in done),
    )


def saturate(port: int, requests: list[bytes], concurrency: int, timeout: float = 5.0) -> Result:
    """Send ``requests`` with ``concurrency`` in flight (closed loop): the most it takes."""
    return uvloop.run(_closed("127.0.0.1", port, requests, concurrency, timeout))

"""300 slow clients on either port of the served application, over real sockets.

The story: both listeners were asyncio servers written here, with their own request
parser, because library servers time out per read, not per request (a client sending a
byte every few seconds holds its connection forever). They now run on uvicorn, and the
deadlines and the connection limit live in a subclass of its protocol. This is the test
that they still hold: whichever port is flooded (connections that send nothing, heads
trickled a byte at a time, bodies half sent), the tick keeps its interval, the threads
stay the listeners' own, memory stays bounded, Prometheus's scrape is answered and a
delivery is taken.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from autoscaler.app.served import StatusServer, WebhookServer
from autoscaler.app.service import run_loop
from autoscaler.controller import Controller
from autoscaler.observe.github.webhook_receiver import WebhookReceiver
from autoscaler.telemetry import Metrics
from tests.adapters.webhook_support import headers, hook_config
from tests.unit.test_controller import FakeSource, config, observation
from tests.unit.webhook_payloads import body

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
FLOOD = 300
LIMIT = 64
#: What a half-sent body announces, and sends half of.
BODY = 200_000


def rss() -> int:
    """This process's resident memory, bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def dropped(metrics: Metrics, reason: str) -> float:
    value = metrics.registry.get_sample_value(
        "ci_autoscaler_http_connections_dropped_total", {"reason": reason}
    )
    return value or 0.0


@pytest.fixture
def served() -> Iterator[tuple[StatusServer, WebhookServer, WebhookReceiver, Metrics]]:
    metrics = Metrics()
    controller = Controller(config(), FakeSource([observation(3, T0)]), metrics)
    receiver = WebhookReceiver(hook_config(queue_size=1000, max_body_bytes=1 << 20), metrics)
    status = StatusServer(
        controller, metrics, "127.0.0.1", 0, header_timeout=2.0, max_connections=LIMIT
    )
    hooks = WebhookServer(
        receiver,
        metrics,
        "127.0.0.1",
        0,
        header_timeout=2.0,
        body_timeout=2.0,
        max_connections=LIMIT,
    )
    status.start()
    hooks.start()
    try:
        yield status, hooks, receiver, metrics
    finally:
        hooks.stop()
        status.stop()


def _flood(port: int, path: str) -> tuple[list[socket.socket], list[socket.socket], bytes]:
    """A third idle, a third trickling a head, a third with half a body sent."""
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(FLOOD // 3)]
    trickle = [socket.create_connection(("127.0.0.1", port)) for _ in range(FLOOD // 3)]
    half = []
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {BODY}\r\n\r\n"
    ).encode()
    for _ in range(FLOOD - 2 * (FLOOD // 3)):
        sock = socket.create_connection(("127.0.0.1", port))
        with contextlib.suppress(OSError):
            sock.sendall(head + b"{" * (BODY // 2))
        half.append(sock)
    return idle + half, trickle, f"GET {path} HTTP/1.1\r\nHost: x\r\nX-Pad: aaaa\r\n\r\n".encode()


@pytest.mark.parametrize("flooded", ["status", "webhook"])
def test_300_slow_clients_on_either_port_leave_the_tick_the_scrape_and_deliveries_alone(
    served: tuple[StatusServer, WebhookServer, WebhookReceiver, Metrics], flooded: str
) -> None:
    status, hooks, receiver, metrics = served
    scrape_url = f"http://127.0.0.1:{status.port}/metrics"
    hook_url = f"http://127.0.0.1:{hooks.port}/github/webhook"
    # a worker thread on each listener exists now
    assert httpx.get(scrape_url, timeout=5).status_code == 200
    raw = body("queued", 1)
    assert httpx.post(hook_url, content=raw, headers=headers(raw), timeout=5).status_code == 202
    threads_before, memory_before = threading.active_count(), rss()

    ticks: list[float] = []
    stop = threading.Event()
    ticker = threading.Thread(
        target=run_loop,
        args=(status.controller, 0.1, stop),
        kwargs={
            "clock": lambda: T0 + timedelta(seconds=len(ticks)),
            "on_tick": lambda: ticks.append(time.monotonic()),
        },
        daemon=True,
    )
    ticker.start()
    port, path = (
        (status.port, "/metrics") if flooded == "status" else (hooks.port, "/github/webhook")
    )
    flood_started = time.monotonic()
    quiet, trickle, request = _flood(port, path)
    peak_threads, scrapes, deliveries = threading.active_count(), [], []
    try:
        for i in range(30):  # 3 s of trickling: a byte every 0.1 s on each trickling socket
            for sock in trickle:
                with contextlib.suppress(OSError):  # closed to make room: as it should
                    sock.send(request[i : i + 1])
            peak_threads = max(peak_threads, threading.active_count())
            if i % 5 == 0:
                started = time.monotonic()
                scrape = httpx.get(scrape_url, timeout=5)
                scrapes.append(time.monotonic() - started)
                assert scrape.status_code == 200
                assert "ci_autoscaler_http_connections_open" in scrape.text
                raw = body("queued", 100 + i)
                started = time.monotonic()
                answer = httpx.post(hook_url, content=raw, headers=headers(raw), timeout=5)
                deliveries.append(time.monotonic() - started)
                assert answer.status_code == 202
            threading.Event().wait(0.1)
        flood_ticks = [t for t in ticks if t >= flood_started]
        memory_peak = rss()
    finally:
        stop.set()
        ticker.join(5)

    # before: this thread, each listener's loop and one worker; since then the ticker,
    # and at most each listener's second worker. Not one thread per connection.
    assert peak_threads <= threads_before + 3, f"{peak_threads} threads, {threads_before} before"
    assert max(scrapes) < 2.0, f"scrapes took {scrapes}"
    assert max(deliveries) < 2.0, f"deliveries took {deliveries}"
    gaps = [b - a for a, b in itertools.pairwise(flood_ticks)]
    assert len(flood_ticks) >= 10 and max(gaps) < 0.6, f"tick gaps {gaps}"
    # at most LIMIT connections are ever held, each with less than one body of buffers:
    # the flood's 300 cost no more than what the limit allows
    grown = memory_peak - memory_before
    assert grown < LIMIT * BODY + (32 << 20), f"{grown / 2**20:.0f} MiB more"
    assert len(receiver.drain()) == 1 + 6
    prefix = "" if flooded == "status" else "webhook_"
    assert dropped(metrics, prefix + "evicted") >= FLOOD - LIMIT
    # whatever is left of the flood is closed once its deadline passes
    deadline = time.monotonic() + 10
    for sock in quiet + trickle:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        with contextlib.suppress(OSError):
            while sock.recv(65536):
                pass  # an answer (431, or nothing) and then the close
        sock.close()
    assert time.monotonic() < deadline, "the flood was not closed in time"
    reasons = ("evicted", "over_limit", "header_timeout", "body_timeout", "too_large")
    closed = sum(dropped(metrics, prefix + reason) for reason in reasons)
    assert closed >= FLOOD, f"{closed} of the {FLOOD} closed and counted"

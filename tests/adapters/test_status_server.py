"""The status server under slow and idle clients, over real sockets.

The story: the status server was ``http.server.ThreadingHTTPServer``, one thread per
connection and no timeout. 300 connections that sent nothing held 308 threads for as long
as their peers liked; a client trickling its request a byte at a time held its thread
forever. Then one hand-written asyncio loop owned every connection; now uvicorn does,
whose timeouts are per read, so the deadlines live in a protocol subclass: the request
head has an overall deadline (a kept-alive connection's next head too), and at the
connection limit the longest-waiting connection makes room.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from prometheus_client import Gauge

from autoscaler.app.served import StatusServer
from autoscaler.app.service import run_loop
from autoscaler.controller import Controller
from autoscaler.telemetry import Metrics
from tests.unit.test_controller import FakeSource, config, observation

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


def controller(metrics: Metrics) -> Controller:
    return Controller(config(), FakeSource([observation(3, T0)]), metrics)


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def make_server(metrics: Metrics) -> Iterator[Callable[..., StatusServer]]:
    started: list[StatusServer] = []

    def make(**limits: float) -> StatusServer:
        server = StatusServer(controller(metrics), metrics, "127.0.0.1", 0, **limits)  # type: ignore[arg-type]
        server.start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


def dropped(metrics: Metrics, reason: str) -> float:
    value = metrics.registry.get_sample_value(
        "ci_autoscaler_http_connections_dropped_total", {"reason": reason}
    )
    return value or 0.0


def wait_until(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds}s waiting for {what}")
        threading.Event().wait(0.02)


def closed_by_server(sock: socket.socket) -> bool:
    """True once the server closed the connection (EOF or reset), without blocking."""
    sock.setblocking(False)
    try:
        return sock.recv(1024) == b""
    except BlockingIOError:
        return False
    except ConnectionError:
        return True


def test_a_slow_client_flood_costs_no_threads_and_the_scraper_still_gets_metrics(
    make_server: Callable[..., StatusServer], metrics: Metrics
) -> None:
    """150 connections that send nothing and 150 that trickle ``GET /metrics`` a byte at a
    time, while the controller ticks every 0.1 s: the server's threads stay at the loop
    plus its two workers, a normal scrape of /metrics answers every time, and the tick
    keeps its interval."""
    server = make_server(header_timeout=2.0, max_connections=64)
    url = f"http://127.0.0.1:{server.port}"
    assert httpx.get(f"{url}/healthz").status_code == 200  # a worker thread exists now
    baseline = threading.active_count()

    ticks: list[float] = []
    stop = threading.Event()
    ticker = threading.Thread(
        target=run_loop,
        args=(server.controller, 0.1, stop),
        kwargs={
            "clock": lambda: T0 + timedelta(seconds=len(ticks)),
            "on_tick": lambda: ticks.append(time.monotonic()),
        },
        daemon=True,
    )
    ticker.start()
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(150)]
    slow = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(150)]
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    peak_threads = threading.active_count()
    scrapes: list[float] = []
    try:
        flood_started = time.monotonic()
        for i in range(30):  # 3 s of trickling, a byte every 0.1 s on each slow connection
            for sock in slow:
                with contextlib.suppress(OSError):  # closed to make room: as it should
                    sock.send(request[i : i + 1])
            peak_threads = max(peak_threads, threading.active_count())
            if i % 5 == 0:
                started = time.monotonic()
                scrape = httpx.get(f"{url}/metrics", timeout=5)
                scrapes.append(time.monotonic() - started)
                assert scrape.status_code == 200
                assert "ci_autoscaler_http_connections_open" in scrape.text
            threading.Event().wait(0.1)
        flood_ticks = [t for t in ticks if t >= flood_started]
    finally:
        stop.set()
        ticker.join(5)

    # baseline: this thread, the server's loop and one worker; since then: the ticker, and
    # at most the server's second worker. Not one thread per connection.
    assert peak_threads <= baseline + 2, f"{peak_threads} threads, {baseline} before"
    assert max(scrapes) < 2.0, f"scrapes took {scrapes}"
    gaps = [b - a for a, b in itertools.pairwise(flood_ticks)]
    assert len(flood_ticks) >= 10 and max(gaps) < 0.6, f"tick gaps {gaps}"
    assert dropped(metrics, "evicted") >= 300 - 64

    # whatever is left of the flood is closed once the request-head deadline passes
    wait_until(lambda: all(closed_by_server(s) for s in idle + slow), 10, "the flood closed")
    wait_until(
        lambda: metrics.registry.get_sample_value("ci_autoscaler_http_connections_open") == 0,
        5,
        "no connection left open",
    )
    for sock in idle + slow:
        sock.close()


def trickle_a_head_until_closed(sock: socket.socket) -> None:
    """Send a request head a byte every 50 ms until the server closes the connection
    (each byte well within any per-read timeout; the whole head never in time)."""
    for byte in b"GET /metrics HTTP/1.1\r\nX-Padding: " + b"a" * 200:
        if closed_by_server(sock):
            return
        sock.setblocking(True)
        try:
            sock.send(bytes([byte]))
        except OSError:
            return
        threading.Event().wait(0.05)
    raise AssertionError("the trickling client was never closed")


def test_a_byte_by_byte_client_is_closed_at_the_head_deadline_not_per_read(
    make_server: Callable[..., StatusServer], metrics: Metrics
) -> None:
    """Each byte arrives well within any per-read timeout; the whole head never does."""
    server = make_server(header_timeout=1.0)
    sock = socket.create_connection(("127.0.0.1", server.port))
    started = time.monotonic()
    try:
        trickle_a_head_until_closed(sock)
    finally:
        sock.close()
    assert time.monotonic() - started < 3.0
    assert dropped(metrics, "header_timeout") == 1


def test_unknown_paths_and_other_methods_are_refused(
    make_server: Callable[..., StatusServer],
) -> None:
    server = make_server()
    url = f"http://127.0.0.1:{server.port}"
    assert httpx.get(f"{url}/nope").status_code == 404
    refused = httpx.post(f"{url}/metrics")
    assert (refused.status_code, refused.headers["allow"]) == (405, "GET, HEAD")
    head = httpx.head(f"{url}/readyz")
    assert head.status_code == 503 and head.content == b""
    assert int(head.headers["content-length"]) > 0
    assert httpx.get(f"{url}/readyz").text == "not ready: never polled\n"
    assert httpx.get(f"{url}/healthz").text == "ok\n"
    assert "server" not in head.headers  # the server library does not announce itself


def test_the_page_for_on_call_is_the_route_at_root_with_its_formats(
    make_server: Callable[..., StatusServer],
) -> None:
    """The status page is served from the bounded server's route table: HTML
    under its CSP for a browser, text for curl or ``?format=text``, the explain JSON for
    ``?format=json``; HEAD gets the headers only."""
    server = make_server()
    server.controller.tick(T0)
    url = f"http://127.0.0.1:{server.port}/"
    page = httpx.get(url, headers={"Accept": "text/html,application/xhtml+xml"})
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.headers["content-security-policy"].startswith("default-src 'none'")
    assert page.headers["x-content-type-options"] == "nosniff"
    assert "<html" in page.text and "cpu" in page.text
    text = httpx.get(url, headers={"Accept": "text/plain"})
    assert text.headers["content-type"] == "text/plain; charset=utf-8"
    assert "RUNNER TYPE" in text.text
    assert "RUNNER TYPE" in httpx.get(url + "?format=text").text
    doc = httpx.get(url + "?format=json").json()
    assert [t["name"] for t in doc["runner_types"]] == ["cpu"]
    assert doc["runner_types"][0]["queue_size"] == 3
    head = httpx.head(url, headers={"Accept": "text/html"})
    assert head.status_code == 200 and head.content == b""
    assert "content-security-policy" in head.headers


def test_garbage_and_oversized_heads_are_answered_and_counted(
    make_server: Callable[..., StatusServer], metrics: Metrics
) -> None:
    server = make_server()
    for payload, status, reason in [
        (b"HELLO\r\n\r\n", b"400", "bad_request"),
        (b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 10_000 + b"\r\n\r\n", b"431", "too_large"),
    ]:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(payload)
            assert sock.recv(1024).split(b" ")[1] == status
        assert dropped(metrics, reason) == 1


def test_a_kept_alive_connection_trickling_its_next_request_is_closed_at_the_head_deadline(
    make_server: Callable[..., StatusServer], metrics: Metrics
) -> None:
    """The server library keeps connections alive, and its keep-alive timer stops at the
    first byte of the next request: that request's head has the same deadline."""
    server = make_server(header_timeout=1.0)
    sock = socket.create_connection(("127.0.0.1", server.port))
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while not answer.endswith(b"ok\n"):
            answer += sock.recv(1024)
        assert answer.startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        trickle_a_head_until_closed(sock)
    finally:
        sock.close()
    assert time.monotonic() - started < 3.0
    assert dropped(metrics, "header_timeout") == 1


def test_a_client_that_never_reads_its_answer_is_closed_at_the_write_deadline(
    make_server: Callable[..., StatusServer], metrics: Metrics
) -> None:
    """/metrics grown to megabytes, asked for by a client that reads nothing: once the
    socket buffers are full the answer waits on the client, and the connection is closed
    when ``write_timeout`` has passed without it reading."""
    padding = Gauge("padding", "Makes /metrics large.", ["series"], registry=metrics.registry)
    for n in range(15_000):  # 6 MB: more than both sockets' buffers hold
        padding.labels(f"{n:0>400}").set(n)
    server = make_server(write_timeout=1.0)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", server.port))
    try:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        wait_until(lambda: dropped(metrics, "write_timeout") == 1, 30, "the write deadline")
    finally:
        sock.close()

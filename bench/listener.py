"""Benchmark: the webhook listener's deliveries a second and latency, the served
application (uvicorn, :mod:`autoscaler.app.served`) against the asyncio listener it
replaced (``bench/asyncio_listener.py``), side by side in one run.

Each listener runs in this process as in the controller (its loop thread, two workers)
behind a no-op receiver that answers 202 at once: what is measured is the listener, not
the signature check or the state store. The load comes from a process of its own
(``bench/load.py``): signed ``workflow_job`` deliveries the size GitHub sends (the fake
GitHub's payload, about 7 KB), each on a new connection.

1. **Closed loop**, 8 deliveries in flight, 3,000 deliveries: deliveries a second, and the
   listener's CPU time per delivery (this process's CPU time over the run).
2. **Open loop** at several offered rates for 3 s each: p50 and p99 from when each
   delivery was due to the end of its answer (a stall delays the ones behind it, and
   shows), and how many failed.

Aims, as ratios against the old listener in the same run: the served application takes
at least 90% of its deliveries a second and spends at most 110% of its CPU per delivery.
The 1,000-a-second row is the one a busy org needs (p99 under 50 ms wanted): printed,
not an aim, since it depends on what else the machine runs.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from autoscaler.app.served import WebhookServer
from autoscaler.fakes.github_state import GitHubState
from autoscaler.fakes.github_webhooks import workflow_job_payload
from autoscaler.observe.github.webhook_receiver import Answer
from autoscaler.observe.github.webhooks import sign
from autoscaler.telemetry import Metrics
from bench.asyncio_listener import AsyncioListener
from bench.load import Result, offer, saturate

SECRET = b"bench-listener-secret"
SATURATE = 3000
IN_FLIGHT = 8
RATES = (250, 500, 1000)
SECONDS = 3.0


class NoopReceiver:
    """Takes every delivery at once: the listener is what is measured."""

    max_body = 1 << 20

    def too_large(self, headers: Mapping[str, str]) -> Answer:
        return Answer(413, b"too_large\n")

    def handle(self, headers: Mapping[str, str], body: bytes) -> Answer:
        return Answer(202, b"accepted\n")


def deliveries(count: int) -> list[bytes]:
    """``count`` signed ``queued`` deliveries of distinct jobs, as raw requests."""
    state = GitHubState()
    state.url = "https://api.github.com"
    out = []
    for _ in range(count):
        job = state.queue_job("app", ["self-hosted", "linux.4xlarge"])
        raw = json.dumps(workflow_job_payload(state, job, "queued")).encode()
        head = (
            "POST /github/webhook HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "User-Agent: GitHub-Hookshot/bench\r\nContent-Type: application/json\r\n"
            f"X-GitHub-Event: workflow_job\r\nX-GitHub-Delivery: {uuid.uuid4()}\r\n"
            f"X-Hub-Signature-256: {sign(SECRET, raw)}\r\nContent-Length: {len(raw)}\r\n\r\n"
        )
        out.append(head.encode() + raw)
    return out


@dataclass(frozen=True)
class Figures:
    name: str
    saturated: Result
    cpu_per_delivery: float
    offered: tuple[Result, ...]


def pct(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _measure(name: str, make: Callable[[], tuple[int, Callable[[], None]]]) -> Figures:
    port, stop = make()
    context = multiprocessing.get_context("spawn")
    try:
        with context.Pool(1) as client:
            client.apply(saturate, (port, deliveries(200), IN_FLIGHT))  # warm both ends
            batch = deliveries(SATURATE)
            cpu = time.process_time()
            saturated = client.apply(saturate, (port, batch, IN_FLIGHT))
            cpu = time.process_time() - cpu
            offered = tuple(
                client.apply(offer, (port, deliveries(int(rate * SECONDS)), rate)) for rate in RATES
            )
    finally:
        stop()
    return Figures(name, saturated, cpu / max(1, saturated.answered), offered)


def _old() -> tuple[int, Callable[[], None]]:
    server = AsyncioListener(NoopReceiver(), Metrics(), "127.0.0.1", 0)
    server.start()
    return server.port, server.stop


def _new() -> tuple[int, Callable[[], None]]:
    server = WebhookServer(NoopReceiver(), Metrics(), "127.0.0.1", 0)
    server.start()
    return server.port, server.stop


def _row(figures: Figures) -> list[str]:
    sat = figures.saturated
    lines = [
        f"  {figures.name:<28} closed loop ({IN_FLIGHT} in flight): {sat.rate:6.0f} deliveries/s, "
        f"CPU {figures.cpu_per_delivery * 1e3:.2f} ms/delivery, {sat.failed} failed"
    ]
    for result in figures.offered:
        lines.append(
            f"  {'':<28} offered {result.offered:5.0f}/s: answered {result.rate:6.0f}/s, "
            f"p50 {pct(result.latencies, 0.5) * 1e3:6.1f} ms, "
            f"p99 {pct(result.latencies, 0.99) * 1e3:7.1f} ms, {result.failed} failed"
        )
    return lines


def run() -> bool:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        "listener: signed workflow_job deliveries (~7 KB, a connection each) to a no-op "
        f"receiver (load average {load}, {os.cpu_count()} CPUs)"
    )
    old = _measure("asyncio listener (before)", _old)
    new = _measure("served application (uvicorn)", _new)
    for figures in (old, new):
        for line in _row(figures):
            print(line)
    rate = new.saturated.rate / old.saturated.rate
    cpu = new.cpu_per_delivery / old.cpu_per_delivery
    print(
        f"  served / asyncio: deliveries/s x{rate:.2f} (aim >= 0.90), "
        f"CPU per delivery x{cpu:.2f} (aim <= 1.10)"
    )
    for before, after in zip(old.offered, new.offered, strict=True):
        print(
            f"  at {after.offered:5.0f}/s: p99 {pct(after.latencies, 0.99) * 1e3:.1f} ms "
            f"vs {pct(before.latencies, 0.99) * 1e3:.1f} ms, failed {after.failed} vs "
            f"{before.failed}"
        )
    return rate >= 0.9 and cpu <= 1.1

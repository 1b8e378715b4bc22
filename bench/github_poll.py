"""Benchmark: two GitHub polls of a large org against the fake GitHub with 50 ms per request.

200 repositories, 2,000 queued jobs (in runs of 1-6 jobs) over 30 runner types, 300 runners.
Reports, per tick: requests, the share answered 304, wall time against the sum of request
latencies (the sequential bound); and the process's peak RSS (fake server included, so an
upper bound for the controller). Aims: >= 90% 304 on tick 2, wall <= 1/8 of the sequential
bound, peak RSS < 150 MB.
"""

from __future__ import annotations

import random
import resource
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx

from autoscaler.config import GitHubConfig
from autoscaler.config.reader import Secret
from autoscaler.fakes.github import FakeGitHub
from autoscaler.observe.github.source import GitHubSource
from autoscaler.telemetry import Metrics

REPOS = 200
JOBS = 2000
TYPES = 30
GPU_TYPES = 6
RUNNERS_PER_TYPE = 10
LATENCY = 0.05
CONCURRENCY = 16


@dataclass
class TickStats:
    requests: int = 0
    not_modified: int = 0
    latency_sum: float = 0.0
    wall: float = 0.0
    jobs: int = 0


@dataclass
class TimingTransport(httpx.BaseTransport):
    """Wraps the real transport; records each request's status and latency."""

    inner: httpx.BaseTransport
    stats: TickStats = field(default_factory=TickStats)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        start = time.perf_counter()
        response = self.inner.handle_request(request)
        response.read()
        elapsed = time.perf_counter() - start
        with self.lock:
            self.stats.requests += 1
            self.stats.not_modified += response.status_code == 304
            self.stats.latency_sum += elapsed
        return response

    def close(self) -> None:
        self.inner.close()


def populate(fake: FakeGitHub, seed: int = 1) -> None:
    rng = random.Random(seed)
    types = [
        (f"linux.g5.{i}xlarge.nvidia.gpu" if i < GPU_TYPES else f"linux.{i}xlarge")
        for i in range(TYPES)
    ]
    for i in range(REPOS):
        fake.add_repo(f"repo-{i:03d}")
    for name in types:
        for j in range(RUNNERS_PER_TYPE):
            fake.register_runner(f"{name}-{j}", ["self-hosted", name])
    queued = 0
    while queued < JOBS:
        size = min(JOBS - queued, rng.randint(1, 6))
        repo, kind = f"repo-{rng.randrange(REPOS):03d}", rng.choice(types)
        run_id = None
        for _ in range(size):
            job = fake.queue_job(repo, ["self-hosted", kind], run_id=run_id)
            run_id = fake.job(job).run_id
        queued += size


def run() -> bool:
    """Print the table; True when every aim is met."""
    fake = FakeGitHub(latency=LATENCY)
    populate(fake)
    fake.start()
    inner = httpx.HTTPTransport(
        limits=httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    )
    transport = TimingTransport(inner)
    config = GitHubConfig(
        owner=fake.owner,
        api_url=fake.url,
        token=Secret(fake.token),
        max_concurrency=CONCURRENCY,
    )
    source = GitHubSource(config, Metrics(), transport=transport)
    ticks: list[TickStats] = []
    try:
        for _ in range(2):
            transport.stats = TickStats()
            start = time.perf_counter()
            observation = source.observe(datetime.now(UTC))
            transport.stats.wall = time.perf_counter() - start
            transport.stats.jobs = len(observation.jobs)
            ticks.append(transport.stats)
    finally:
        source.close()
        fake.stop()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return report(ticks, peak_mb)


def report(ticks: list[TickStats], peak_mb: float) -> bool:
    one, two = ticks
    share = two.not_modified / max(1, two.requests)
    ratios = [t.wall / max(t.latency_sum, 1e-9) for t in ticks]
    checks = {
        "304": share >= 0.90,
        "wall": all(r <= 1 / 8 for r in ratios),
        "rss": peak_mb < 150,
        "jobs": one.jobs == two.jobs == JOBS,
    }

    def pct(t: TickStats) -> str:
        return f"{100 * t.not_modified / max(1, t.requests):.1f}%"

    def verdict(key: str) -> str:
        return "ok" if checks[key] else "MISSED"

    rows = [
        ("jobs observed", str(one.jobs), str(two.jobs), f"= {JOBS}", verdict("jobs")),
        ("requests", str(one.requests), str(two.requests), "", ""),
        ("answered 304", pct(one), pct(two), ">= 90% on tick 2", verdict("304")),
        ("wall time (s)", f"{one.wall:.2f}", f"{two.wall:.2f}", "", ""),
        ("sum of latencies (s)", f"{one.latency_sum:.1f}", f"{two.latency_sum:.1f}", "", ""),
        (
            "wall / sequential",
            f"1/{1 / ratios[0]:.1f}",
            f"1/{1 / ratios[1]:.1f}",
            "<= 1/8",
            verdict("wall"),
        ),
        ("peak RSS (MB)", f"{peak_mb:.0f}", "", "< 150", verdict("rss")),
    ]
    print(
        f"github_poll: {REPOS} repos, {JOBS} queued jobs, {TYPES} runner types, "
        f"{int(LATENCY * 1000)} ms per request, max_concurrency {CONCURRENCY}"
    )
    header = ("metric", "tick 1", "tick 2", "aim", "")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(5)]
    for row in [header, *rows]:
        print("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    sys.stdout.flush()
    return all(checks.values())

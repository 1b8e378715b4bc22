"""Benchmark: whole controller ticks against the fake GitHub at four org sizes.

Sizes (repositories, queued jobs, runner types, runners): (10, 100, 5, 50),
(100, 2,000, 30, 300), (500, 10,000, 100, 1,000), (1,000, 50,000, 200, 3,000). The fake
(50 ms a request) and the controller (``max_concurrency: 16``) run in separate processes
(:mod:`bench.proc`), so the controller's CPU and peak RSS are its own. Per size, three
whole ticks (poll, queue math, alert rules, scaling decisions, the ETag cache saved in
SQLite): **cold** (nothing cached), **unchanged** (nothing moved on GitHub: all 304s) and
**churn** (the clock moved on: running jobs' steps changed, jobs started, completed and
queued). Time between ticks is one poll interval of a virtual clock; GitHub's rate limit
is off (GitHub Enterprise Server's default), the budget has its own benchmark.

Aims (the exit code says whether they are met):
- CPU per request at 1,000 repositories <= 1.5x CPU per request at 100 (cold ticks);
- cold tick wall <= 1.3x the ideal (requests x latency / concurrency) at every size;
- controller peak RSS < 150 MB at 50,000 queued jobs;
- every queued job seen, every tick.
The fake's own CPU per request and its busy share (CPU / wall) say whether it, not the
controller, limits the run. Beside the ideal, the **critical path** (:meth:`Result.critical_path`):
the shortest a cold tick can be given which requests wait for which (the repository list
before any runs listing), at 50 ms and at one GET's measured round trip in the same run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import aims
from bench.org import T0, Size

SIZES = (
    Size(10, 100, 5, 50),
    Size(100, 2000, 30, 300),
    Size(500, 10_000, 100, 1000),
    Size(1000, 50_000, 200, 3000),
)
LATENCY = 0.05
CONCURRENCY = 16
#: The poll interval of the runs (a cold 1,000-repository tick takes over a minute at
#: 16 requests in flight; the poll's deadline is 0.8 of this).
INTERVAL = 300.0
#: Plain httpx GETs timed for the HTTP client's own CPU cost.
FLOOR_REQUESTS = 100
#: Sequential GETs timed for one request's round trip on its own.
ROUND_TRIPS = 20
#: Items a listing page holds.
PER_PAGE = 100


class Proc:
    """One benchmark process and its line protocol."""

    def __init__(
        self,
        role: str,
        params: dict[str, Any],
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.role = role
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "bench.proc", role, json.dumps(params)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=cwd,
        )

    def read(self) -> dict[str, Any]:
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline()
        if not line:
            raise RuntimeError(f"benchmark process {self.role} ended")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, **command: Any) -> dict[str, Any]:
        assert self.popen.stdin is not None
        self.popen.stdin.write(json.dumps(command) + "\n")
        self.popen.stdin.flush()
        return self.read()

    def close(self) -> None:
        if self.popen.stdin is not None:
            self.popen.stdin.write('{"op": "quit"}\n')
            self.popen.stdin.close()
        self.popen.wait(timeout=60)


@dataclass
class Tick:
    requests: int
    not_modified: int
    wall: float
    cpu: float
    queued: int
    fake_cpu: float
    error: str | None
    latency_sum: float
    """Seconds the controller's requests took, summed (client-side, parsing included)."""

    @property
    def ideal(self) -> float:
        return self.requests * LATENCY / CONCURRENCY

    @property
    def mean_request_ms(self) -> float:
        return 1000 * self.latency_sum / max(1, self.requests)

    @property
    def cpu_per_request_ms(self) -> float:
        return 1000 * self.cpu / max(1, self.requests)


@dataclass
class Result:
    size: Size
    ticks: dict[str, Tick]
    rss_mb: float
    httpx_ms: float
    """CPU per request of a plain httpx GET in the controller process, same run."""
    round_trip_ms: float
    """Wall time of one GET on its own (nothing else in flight), same run."""

    def critical_path(self, latency: float) -> float:
        """The shortest any cold tick can be at CONCURRENCY requests in flight and
        ``latency`` seconds a request: nothing but the skeleton (``GET /rate_limit``, the
        runner list, the repository list) can go before the repository list is in (its
        pages one after another: each names the next); then every other request, at
        most CONCURRENCY at a time, each taking ``latency``. With the first tick's few
        repositories the formula's ideal (requests x latency / concurrency) counts the
        first round's idle workers as busy: it is below this bound."""
        cold = self.ticks["cold"]
        repo_pages = -(-self.size.repos // PER_PAGE)
        runner_pages = -(-self.size.runners // PER_PAGE)
        skeleton = 1 + repo_pages + min(runner_pages, repo_pages)
        rounds = repo_pages + -(-max(0, cold.requests - skeleton) // CONCURRENCY)
        return rounds * latency


def measure(size: Size) -> Result:
    fake = Proc("fake", {"size": asdict(size), "latency": LATENCY, "rate_limit": 1_000_000_000})
    controller: Proc | None = None
    try:
        where = fake.read()
        controller = Proc(
            "controller",
            {
                "size": asdict(size),
                "url": where["url"],
                "owner": where["owner"],
                "interval": INTERVAL,
                "concurrency": CONCURRENCY,
            },
        )
        ticks: dict[str, Tick] = {}
        now, rss = T0.timestamp(), 0.0
        for name in ("cold", "unchanged", "churn"):
            if name == "churn":
                fake.ask(op="churn", seconds=INTERVAL)
            before = fake.ask(op="stats")
            answer = controller.ask(op="tick", t=now)
            after = fake.ask(op="stats")
            statuses = answer["statuses"]
            ticks[name] = Tick(
                requests=sum(statuses.values()),
                not_modified=statuses.get("304", 0),
                wall=answer["wall"],
                cpu=answer["cpu"],
                queued=answer["queued"],
                fake_cpu=after["cpu"] - before["cpu"],
                error=answer["poll_error"],
                latency_sum=answer["latency_sum"],
            )
            rss = answer["rss_mb"]
            now += INTERVAL
        floor = controller.ask(op="floor", requests=FLOOR_REQUESTS)["cpu_ms"]
        trip = controller.ask(op="round_trip", requests=ROUND_TRIPS)["ms"]
        return Result(size, ticks, rss, floor, trip)
    finally:
        if controller is not None:
            controller.close()
        fake.close()


def run() -> bool:
    """Print the table; True when every aim is met."""
    print(
        f"github_poll: whole ticks, fake GitHub at {int(LATENCY * 1000)} ms a request in its "
        f"own process, max_concurrency {CONCURRENCY}; sizes are repos/queued jobs/types/runners"
    )
    sys.stdout.flush()
    results = []
    for size in SIZES:
        results.append(measure(size))
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"  measured {size.label} (load average {load}, {os.cpu_count()} CPUs)", flush=True)
    return report(results)


def report(results: list[Result]) -> bool:
    by_repos = {r.size.repos: r for r in results}
    cpu_ratio = (
        by_repos[1000].ticks["cold"].cpu_per_request_ms
        / by_repos[100].ticks["cold"].cpu_per_request_ms
    )
    met = {
        "cpu": cpu_ratio <= 1.5,
        "wall": all(r.ticks["cold"].wall <= 1.3 * r.ticks["cold"].ideal for r in results),
        "rss": by_repos[1000].rss_mb < 150,
        "jobs": all(
            t.queued == r.size.jobs and t.error is None for r in results for t in r.ticks.values()
        ),
    }
    checks = {
        "cpu": aims.timed("CPU per request 1,000 / 100 repos <= 1.5", met["cpu"]),
        "wall": aims.timed("cold wall <= 1.3 x ideal", met["wall"]),
        "rss": aims.count("controller peak RSS < 150 MB", met["rss"]),
        "jobs": aims.count("every queued job seen", met["jobs"]),
    }

    def verdict(key: str) -> str:
        return "ok" if met[key] else ("MISSED" if not checks[key] else "not judged here")

    def row(name: str, cell: Any, aim: str = "", key: str = "") -> list[str]:
        return [name, *(cell(r) for r in results), aim, verdict(key) if key else ""]

    def pct(t: Tick) -> str:
        return f"{100 * t.not_modified / max(1, t.requests):.0f}%"

    rows = [
        ["", *(r.size.label for r in results), "aim", ""],
        row(
            "queued jobs seen (cold/unchanged/churn)",
            lambda r: "/".join(str(t.queued) for t in r.ticks.values()),
            "all",
            "jobs",
        ),
        row("requests, cold tick", lambda r: f"{r.ticks['cold'].requests:,}"),
        row("cold wall (s)", lambda r: f"{r.ticks['cold'].wall:.1f}"),
        row(
            "cold wall / ideal",
            lambda r: f"{r.ticks['cold'].wall / r.ticks['cold'].ideal:.2f}",
            "<= 1.3",
            "wall",
        ),
        row(
            "critical path at 50 ms (s) / ideal",
            lambda r: f"{r.critical_path(LATENCY):.2f} / {r.ticks['cold'].ideal:.2f}",
        ),
        row("one GET on its own, same run (ms)", lambda r: f"{r.round_trip_ms:.1f}"),
        row(
            "cold wall / critical path at that",
            lambda r: f"{r.ticks['cold'].wall / r.critical_path(r.round_trip_ms / 1000):.2f}",
        ),
        row("CPU per request, cold (ms)", lambda r: f"{r.ticks['cold'].cpu_per_request_ms:.2f}"),
        row("  a plain httpx GET alone (ms)", lambda r: f"{r.httpx_ms:.2f}"),
        row(
            "controller busy (CPU / wall), cold",
            lambda r: f"{r.ticks['cold'].cpu / r.ticks['cold'].wall:.0%}",
        ),
        row(
            "mean request time seen by the controller (ms)",
            lambda r: f"{r.ticks['cold'].mean_request_ms:.0f}",
        ),
        row(
            "requests in flight on average, cold",
            lambda r: f"{r.ticks['cold'].latency_sum / r.ticks['cold'].wall:.1f}",
        ),
        [
            "CPU per request 1,000 / 100 repos",
            "",
            f"{cpu_ratio:.2f}",
            "",
            "",
            "<= 1.5",
            verdict("cpu"),
        ],
        row(
            "unchanged tick: requests, 304",
            lambda r: f"{r.ticks['unchanged'].requests:,}, {pct(r.ticks['unchanged'])}",
        ),
        row(
            "unchanged wall / ideal",
            lambda r: f"{r.ticks['unchanged'].wall / max(r.ticks['unchanged'].ideal, 1e-9):.2f}",
        ),
        row(
            "churn tick: requests, 304",
            lambda r: f"{r.ticks['churn'].requests:,}, {pct(r.ticks['churn'])}",
        ),
        row(
            "churn wall / ideal",
            lambda r: f"{r.ticks['churn'].wall / max(r.ticks['churn'].ideal, 1e-9):.2f}",
        ),
        row("CPU per request, churn (ms)", lambda r: f"{r.ticks['churn'].cpu_per_request_ms:.2f}"),
        row("controller peak RSS (MB)", lambda r: f"{r.rss_mb:.0f}", "< 150 at 50,000", "rss"),
        row(
            "fake CPU per request (ms)",
            lambda r: f"{1000 * r.ticks['cold'].fake_cpu / max(1, r.ticks['cold'].requests):.2f}",
        ),
        row(
            "fake busy (CPU / wall), cold",
            lambda r: f"{r.ticks['cold'].fake_cpu / r.ticks['cold'].wall:.0%}",
        ),
    ]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for line in rows:
        print("  " + "  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)))
    sys.stdout.flush()
    return all(checks.values())

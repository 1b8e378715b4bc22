"""Benchmark: webhook ingestion at a busy org's rate, and the tick beside it, side by side
with the paths before in one run.

1. **Commit modes** (the SQLite file alone, 32 writers, a ~600-byte row each): rows a
   second and CPU a row, for a transaction a row with the rollback journal (before), with
   the write-ahead log synced at every commit (``synchronous=FULL``) and unsynced
   (``NORMAL``), and one transaction a batch of what waits (group commit) with each.
2. **Deliveries** (real time): the webhook listener, the receiver, group commit and a
   state file as ``run`` has them, the tick running beside them (a controller over the
   webhook source, ``poll_interval`` 30 s), loaded from a process of its own
   (:mod:`bench.load`) with signed ~7 KB ``workflow_job`` deliveries (a third
   ``queued``, a third ``in_progress``, a third ``completed``, as a busy org sends them).
   Two routes: the Starlette route it was (``route``, :mod:`bench.ingest_route`) and the
   plain ASGI endpoint (``after``); two ways to connect: a connection a delivery
   (``fresh``, as GitHub sends them) and kept alive (``kept``). Each: 3,000 deliveries
   with 32 in flight (closed loop: the most it takes and its CPU a delivery), then 1,000
   a second offered for 30 s (open loop). From when each was due to its answer: p50,
   p99, failed; the server process's CPU a delivery and its share of a CPU, the client's
   CPU a delivery; the ticks meanwhile (how many, the longest wait between two, their
   CPU). After: the file reopened, every job with an acknowledged delivery has its row.
3. **Tick CPU against the index's size** (a virtual clock, no listener): a controller
   over the webhook source and a state file holding 100 live jobs and 0, 1,000, 5,000 or
   20,000 completed ones (a busy org keeps ~20,000: six hours of tombstones), today's
   store against the one before group commit (``bench/ingest_before.py``: the index
   read whole at every tick); 30 deliveries written between two ticks; the median
   thread CPU of 40 ticks.

Aims (:mod:`bench.aims`): counted, judged anywhere: every acknowledged delivery is in the
file; the index is read whole once over the 40 ticks. Timed, judged on a quiet machine
only: at 1,000 a second for 30 s, a connection each, every delivery answered 2xx with p99
< 50 ms; no wait between two ticks longer than the poll interval meanwhile; tick CPU at
20,000 rows within 10% of that at none. The rate needs the CPU the machine gives this
process: the lines say how much of a CPU it had and what its CPU a delivery allows.
"""

from __future__ import annotations

import itertools
import json
import logging
import multiprocessing
import os
import random
import sqlite3
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from autoscaler.app.served import WebhookServer
from autoscaler.app.service import Wakeup, run_loop
from autoscaler.config import Config, parse_config
from autoscaler.controller import Controller
from autoscaler.domain import Job, JobStatus, Observation, Runner
from autoscaler.fakes.github_state import GitHubState
from autoscaler.fakes.github_webhooks import workflow_job_payload
from autoscaler.observe.github.webhook_receiver import WebhookReceiver
from autoscaler.observe.github.webhook_rows import DONE, EVENT, IndexRow
from autoscaler.observe.github.webhook_source import WebhookSource
from autoscaler.observe.github.webhooks import sign
from autoscaler.state.sqlite import SqliteStore
from autoscaler.telemetry import Metrics
from bench import aims
from bench.ingest_before import BeforeStore
from bench.ingest_route import RoutedWebhookServer
from bench.load import Result, offer, saturate

SECRET = "bench-ingest-secret"
LABELS = ("self-hosted", "linux.4xlarge")
RATES = ((1000, 30.0),)
#: The closed-loop round before them: this many deliveries, this many in flight (the
#: most the listener takes, and its CPU a delivery, without an overload's retries).
CLOSED, IN_FLIGHT = 3000, 32
AIM_RATE, AIM_P99 = 1000, 0.050
POLL = 30.0
SIZES = (0, 1_000, 5_000, 20_000)
LIVE = 100
TICKS = 40
SIDES = ("before", "after")
#: The webhook route: the Starlette route it was (``bench/ingest_route.py``) and now.
LISTENERS = ("route", "after")
#: A connection a delivery (GitHub's way) and kept-alive connections.
MODES = ("fresh", "kept")
PER_TICK = 30
ROOT = Path(__file__).resolve().parent.parent / ".bench"


def load_average() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def pct(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# --- 1. commit modes


def _commit_mode(path: Path, journal: str, sync: str, group: bool, seconds: float) -> str:
    """Rows a second from 32 writer threads on one connection (as the listener's
    handlers share the store's), a transaction a row or a batch of what waits."""
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA locking_mode = EXCLUSIVE")
    db.execute(f"PRAGMA journal_mode = {journal}")
    db.execute(f"PRAGMA synchronous = {sync}")
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, data TEXT)")
    lock = threading.Lock()
    ready = threading.Condition()
    waiting: list[tuple[int, threading.Event]] = []
    stop = time.monotonic() + seconds
    counter = iter(range(10**9))
    data = "x" * 600
    done = [0]

    def write(ids: list[int]) -> None:
        with lock:
            db.execute("BEGIN")
            db.executemany("INSERT OR REPLACE INTO t VALUES (?, ?)", [(i, data) for i in ids])
            db.execute("COMMIT")
            done[0] += len(ids)

    def committer() -> None:
        while time.monotonic() < stop or waiting:
            with ready:
                while not waiting and time.monotonic() < stop:
                    ready.wait(0.05)
                batch, waiting[:] = list(waiting), []
            if batch:
                write([i for i, _ in batch])
                for _, event in batch:
                    event.set()

    def writer() -> None:
        while time.monotonic() < stop:
            if not group:
                write([next(counter)])
                continue
            event = threading.Event()
            with ready:
                waiting.append((next(counter), event))
                ready.notify()
            event.wait()

    threads = [threading.Thread(target=writer) for _ in range(32)]
    if group:
        threads.append(threading.Thread(target=committer))
    cpu, began = time.process_time(), time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall, cpu = time.monotonic() - began, time.process_time() - cpu
    db.close()
    rate = done[0] / wall
    return f"{rate:8,.0f} rows/s, CPU {cpu / max(1, done[0]) * 1e3:5.2f} ms a row"


def commit_modes(directory: Path) -> None:
    modes = [
        ("a transaction a row, rollback journal (before)", "DELETE", "FULL", False),
        ("a transaction a row, WAL, synchronous=FULL", "WAL", "FULL", False),
        ("a transaction a row, WAL, synchronous=NORMAL", "WAL", "NORMAL", False),
        ("group commit, WAL, synchronous=FULL (now)", "WAL", "FULL", True),
        ("group commit, WAL, synchronous=NORMAL", "WAL", "NORMAL", True),
    ]
    print(f"  1. commit modes, the state file alone, 32 writers (load average {load_average()}):")
    for i, (name, journal, sync, group) in enumerate(modes):
        figures = _commit_mode(directory / f"mode-{i}.db", journal, sync, group, 2.0)
        print(f"     {name:<48} {figures}", flush=True)


# --- 2. deliveries


def _templates() -> dict[str, dict[str, object]]:
    """One job's three payloads from the fake GitHub (queued, in progress, completed)."""
    state = GitHubState()
    state.url = "https://api.github.com"
    runner = state.register_runner("runner-1", list(LABELS))
    job = state.queue_job("app", list(LABELS))
    out: dict[str, dict[str, object]] = {"queued": workflow_job_payload(state, job, "queued")}
    state.assign_job(job, runner)
    out["in_progress"] = workflow_job_payload(state, job, "in_progress")
    state.complete_job(job)
    out["completed"] = workflow_job_payload(state, job, "completed")
    return out


def plan(count: int, first_job: int) -> list[tuple[int, str]]:
    """(job id, action) of each delivery: job k queued, in progress 33 jobs later,
    completed 100 jobs later (about 100 live jobs at a time)."""
    out: list[tuple[int, str]] = []
    for i in range(count):
        k = i // 3
        step = ("queued", "in_progress", "completed")[i % 3]
        job = first_job + k - {"queued": 0, "in_progress": 33, "completed": 100}[step]
        out.append((job, step))
    return [(job, step) for job, step in out if job >= first_job]


def requests(count: int, first_job: int) -> list[bytes]:
    """Signed raw requests for :func:`plan` (built in the load process)."""
    templates = _templates()
    out = []
    for job_id, action in plan(count, first_job):
        payload = json.loads(json.dumps(templates[action]))
        item = payload["workflow_job"]
        assert isinstance(item, dict)
        item["id"], item["run_id"] = job_id, job_id // 10
        raw = json.dumps(payload).encode()
        head = (
            "POST /github/webhook HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "User-Agent: GitHub-Hookshot/bench\r\nContent-Type: application/json\r\n"
            f"X-GitHub-Event: workflow_job\r\nX-GitHub-Delivery: {uuid.uuid4()}\r\n"
            f"X-Hub-Signature-256: {sign(SECRET.encode(), raw)}\r\n"
            f"Content-Length: {len(raw)}\r\n\r\n"
        )
        out.append(head.encode() + raw)
    return out


def offer_planned(port: int, count: int, first_job: int, rate: float, keep_alive: bool) -> Result:
    """In the load process: build the requests, then offer them."""
    return offer(port, requests(count, first_job), rate, keep_alive=keep_alive)


def saturate_planned(
    port: int, count: int, first_job: int, in_flight: int, keep_alive: bool
) -> Result:
    """In the load process: build the requests, then send them ``in_flight`` at a time."""
    return saturate(port, requests(count, first_job), in_flight, keep_alive=keep_alive)


class Empty:
    """The wrapped poll: GitHub lists nothing (the first tick's reconcile)."""

    def __init__(self, jobs: Sequence[Job] = ()) -> None:
        self.jobs = tuple(jobs)

    def observe(self, now: datetime) -> Observation:
        return Observation(observed_at=now, jobs=self.jobs, runners=())

    def remove_runner(self, runner_id: int) -> None:
        pass

    def find_runner(self, name: str) -> Runner | None:
        return None


def config() -> Config:
    return parse_config(
        {
            "poll_interval": f"{POLL:g}s",
            "github": {"owner": "bench-org", "token": "fake-token"},
            "runner_types": {"linux.4xlarge": {"labels": list(LABELS)}},
            "state": {"path": ":memory:"},
            # No reconcile but the first while the bench runs: its GitHub lists nothing, so a
            # reconcile would drop the live jobs from the file and the count of acknowledged
            # deliveries kept would count them as lost.
            "webhook": {"listen": "127.0.0.1:0", "secret": SECRET, "reconcile_interval": "6h"},
        },
        env={},
    )


@dataclass
class Ticks:
    """When each tick started and ended, and its thread CPU."""

    starts: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    _cpu0: float = 0.0

    def began(self) -> None:
        self.starts.append(time.monotonic())
        self._cpu0 = time.thread_time()

    def ended(self) -> None:
        self.cpu.append(time.thread_time() - self._cpu0)

    def between(self, a: float, b: float) -> tuple[int, float, float]:
        """Ticks started in [a, b], the longest wait between two (from ``a`` and to
        ``b`` included), and their median CPU."""
        inside = [i for i, t in enumerate(self.starts) if a <= t <= b]
        marks = [a, *(self.starts[i] for i in inside), b]
        gap = max(y - x for x, y in itertools.pairwise(marks))
        cpu = [self.cpu[i] for i in inside if i < len(self.cpu)]
        return len(inside), gap, statistics.median(cpu) if cpu else 0.0


class Timed:
    """The webhook source, timing each tick from its observe (the tick's first step)."""

    def __init__(self, inner: WebhookSource, ticks: Ticks) -> None:
        self.inner = inner
        self.ticks = ticks

    def observe(self, now: datetime) -> Observation:
        self.ticks.began()
        return self.inner.observe(now)

    def remove_runner(self, runner_id: int) -> None:
        self.inner.remove_runner(runner_id)

    def find_runner(self, name: str) -> Runner | None:
        return self.inner.find_runner(name)


@dataclass
class Run:
    name: str
    mode: str
    """``fresh`` (a connection a delivery, as GitHub sends them) or ``kept`` (kept alive)."""
    rate: float
    result: Result
    cpu: float
    """Process CPU seconds over the run."""
    wall: float
    ticks: tuple[int, float, float]
    load: str
    lost: int = 0
    """Jobs with an acknowledged delivery and no row after reopening the file."""

    def cpu_each(self) -> float:
        """The server process's CPU seconds a delivery answered."""
        return self.cpu / max(1, self.result.answered)

    def offered(self) -> str:
        return f"{IN_FLIGHT} in flight " if self.rate == 0 else f"offered {self.rate:5.0f}/s"

    def line(self) -> str:
        r = self.result
        count, gap, tick_cpu = self.ticks
        return (
            f"     {self.name:<5} {self.mode:<5} {self.offered()}: answered {r.rate:6.0f}/s, "
            f"p50 {pct(r.latencies, 0.5) * 1e3:6.1f} ms, p99 {pct(r.latencies, 0.99) * 1e3:7.1f} "
            f"ms, {r.failed} failed; CPU {self.cpu_each() * 1e3:.2f} ms a delivery, "
            f"{self.cpu / self.wall:.0%} of a CPU (client {r.cpu / max(1, r.sent) * 1e3:.2f} ms, "
            f"{r.connections} connections); {count} ticks, longest wait {gap:.1f} s, tick CPU "
            f"{tick_cpu * 1e3:.1f} ms; load average {self.load}"
        )


def _deliveries(
    name: str, mode: str, directory: Path, client: multiprocessing.pool.Pool
) -> list[Run]:
    """One side's runs in one connection mode: a fresh state file, listener, receiver and
    loop as ``run`` has them; ``route`` serves the Starlette route (the baseline)."""
    path = directory / f"{name}-{mode}.db"
    metrics = Metrics()
    cfg = config()
    assert cfg.webhook is not None
    ticks = Ticks()
    stop = threading.Event()
    store = SqliteStore(path)
    wake = Wakeup(cfg.webhook.debounce)
    receiver = WebhookReceiver(cfg.webhook, metrics, store=store, on_event=wake.notify)
    source = WebhookSource(Empty(), receiver, cfg.webhook, metrics, poll_interval=POLL, store=store)
    controller = Controller(cfg, Timed(source, ticks), metrics)
    loop = threading.Thread(
        target=run_loop,
        args=(controller, POLL, stop),
        kwargs={"wake": wake, "on_tick": ticks.ended, "due_in": source.due_in},
        daemon=True,
    )
    server: RoutedWebhookServer | WebhookServer
    if name == "route":
        server = RoutedWebhookServer(receiver, metrics, "127.0.0.1", 0, max_connections=1024)
    else:
        server = WebhookServer(receiver, metrics, "127.0.0.1", 0, max_connections=1024)
    server.start()
    loop.start()
    runs: list[Run] = []
    first = 1_000_000
    acked: set[int] = set()
    kept = mode == "kept"
    try:
        for rate, seconds in ((0, 0.0), *RATES):
            count = CLOSED if rate == 0 else int(rate * seconds)
            load = load_average()
            cpu, began = time.process_time(), time.monotonic()
            if rate == 0:
                args = (server.port, count, first, IN_FLIGHT, kept)
                result = client.apply(saturate_planned, args)
            else:
                result = client.apply(offer_planned, (server.port, count, first, rate, kept))
            cpu, ended = time.process_time() - cpu, time.monotonic()
            ids = [job for job, _ in plan(count, first)]
            acked |= {job for job, ok in zip(ids, result.ok, strict=True) if ok}
            between = ticks.between(began, ended)
            runs.append(Run(name, mode, rate, result, cpu, ended - began, between, load))
            first += count
            time.sleep(1.0)
    finally:
        server.stop()
        stop.set()
        receiver.close()
        loop.join(30)
        store.close()
    reopened = sqlite3.connect(path)
    stored = {int(i) for (i,) in reopened.execute("SELECT job_id FROM job_index")}
    reopened.close()
    runs[-1].lost = len(acked - stored)
    return runs


def deliveries(directory: Path) -> list[Run]:
    print(
        f"  2. deliveries through the listener, the tick beside (load average {load_average()}):",
        flush=True,
    )
    context = multiprocessing.get_context("spawn")
    runs: list[Run] = []
    with context.Pool(1) as client:
        client.apply(requests, (10, 1))  # the load process warm
        for mode in MODES:
            for name in LISTENERS:
                side = _deliveries(name, mode, directory, client)
                for run in side:
                    print(run.line(), flush=True)
                print(
                    f"     {name:<5} {mode:<5} acknowledged but not in the file after "
                    f"reopening: {side[-1].lost}"
                )
                runs += side
    return runs


# --- 3. tick CPU against the index's size


def _rows(count: int, now: float, first: int) -> list[IndexRow]:
    """``count`` completed rows (tombstones), as deliveries write them."""
    out = []
    for k in range(count):
        job_id = first + k
        data = json.dumps(
            {
                "job_id": job_id,
                "run_id": job_id // 10,
                "repo": f"repo-{job_id % 50}",
                "name": "build",
                "labels": sorted(LABELS),
                "conclusion": "success",
                "runner_name": f"runner-{job_id % 300}",
                "run_attempt": 1,
                "completed_at": datetime.fromtimestamp(now, UTC).isoformat(),
                "started_at": datetime.fromtimestamp(now - 60, UTC).isoformat(),
                "failed_step": None,
            },
            sort_keys=True,
        )
        out.append(IndexRow(job_id, DONE, data, now - 3600 * random.random(), EVENT))
    return out


def _live(count: int, now: datetime, first: int) -> list[Job]:
    return [
        Job(first + k, (first + k) // 10, "app", "build", frozenset(LABELS), JobStatus.QUEUED, now)
        for k in range(count)
    ]


class TickRig:
    """A controller over the webhook source and a state file holding ``size`` completed
    rows and :data:`LIVE` live ones, ticked on a virtual clock one second apart."""

    T0 = datetime(2026, 12, 1, 6, tzinfo=UTC)

    def __init__(self, name: str, directory: Path, size: int) -> None:
        path = directory / f"tick-{name}-{size}.db"
        self.store: BeforeStore | SqliteStore = (
            BeforeStore(str(path)) if name == "before" else SqliteStore(path)
        )
        cfg = config()
        assert cfg.webhook is not None
        metrics = Metrics()
        for start in range(0, size, 500):
            self.store.record_job_events(
                _rows(min(500, size - start), self.T0.timestamp(), 10_000 + start)
            )
        self.receiver = WebhookReceiver(cfg.webhook, metrics, store=self.store)
        self.source = WebhookSource(
            Empty(_live(LIVE, self.T0, 1)),
            self.receiver,
            cfg.webhook,
            metrics,
            poll_interval=POLL,
            store=self.store,
        )
        self.controller = Controller(cfg, self.source, metrics)
        self.controller.tick(self.T0)  # the start reconcile: the live jobs written back
        self.cpu: list[float] = []
        self._next_job = 10_000_000

    def step(self, k: int) -> None:
        """:data:`PER_TICK` deliveries written, then tick ``k`` (its thread CPU kept)."""
        now = self.T0 + timedelta(seconds=k)
        self.store.record_job_events(_rows(PER_TICK, now.timestamp(), self._next_job))
        self._next_job += PER_TICK
        began = time.thread_time()
        self.controller.tick(now)
        self.cpu.append(time.thread_time() - began)

    def close(self) -> None:
        self.receiver.close()
        self.store.close()


def ticks(directory: Path) -> tuple[dict[tuple[str, int], float], int]:
    """Every (side, size) ticked in turn, tick by tick, so each sees the same machine."""
    print(
        f"  3. tick CPU, {LIVE} live jobs and N completed rows, {PER_TICK} deliveries a tick "
        f"(median of {TICKS}, every size ticked in turn; load average {load_average()}):",
        flush=True,
    )
    rigs = {(name, size): TickRig(name, directory, size) for size in SIZES for name in SIDES}
    for k in range(1, TICKS + 1):
        for rig in rigs.values():
            rig.step(k)
    for rig in rigs.values():
        rig.close()
    out = {key: statistics.median(rig.cpu) for key, rig in rigs.items()}
    whole = max(rig.source.whole_reads for (name, _), rig in rigs.items() if name == "after")
    for size in SIZES:
        before, after = out[("before", size)], out[("after", size)]
        print(
            f"     {size:6,} rows: before {before * 1e3:7.2f} ms, after {after * 1e3:6.2f} ms, "
            f"after/before x{after / before:.2f}",
            flush=True,
        )
    print(f"     load average after: {load_average()}")
    return out, whole


def run() -> bool:
    # The baseline reads the index whole at every tick by saying rows were lost to its
    # reader, which warns each time; the figures below count every failure.
    logging.getLogger("autoscaler.observe.github.webhooks").setLevel(logging.ERROR)
    print(
        f"ingest: webhook deliveries made durable, and the tick beside them ({os.cpu_count()} "
        f"CPUs, load average {load_average()})",
        flush=True,
    )
    ROOT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        directory = Path(tmp)
        commit_modes(directory)
        runs = deliveries(directory)
        cpu, whole_reads = ticks(directory)

    def pick(name: str, mode: str, rate: float) -> Run:
        return next(r for r in runs if (r.name, r.mode, r.rate) == (name, mode, rate))

    for mode in MODES:
        aim_m, route_m = pick("after", mode, AIM_RATE), pick("route", mode, AIM_RATE)
        closed_a, closed_r = pick("after", mode, 0), pick("route", mode, 0)
        print(
            f"  {mode}: at {AIM_RATE:,}/s for {RATES[-1][1]:.0f} s after answered "
            f"{aim_m.result.rate:.0f}/s, p50 {pct(aim_m.result.latencies, 0.5) * 1e3:.1f} ms, "
            f"p99 {pct(aim_m.result.latencies, 0.99) * 1e3:.1f} ms, {aim_m.result.failed} failed "
            f"(route: {route_m.result.rate:.0f}/s, p99 "
            f"{pct(route_m.result.latencies, 0.99) * 1e3:.1f} ms, {route_m.result.failed} failed); "
            f"CPU a delivery after/route x{aim_m.cpu_each() / route_m.cpu_each():.2f} at the "
            f"rate, x{closed_a.cpu_each() / closed_r.cpu_each():.2f} with {IN_FLIGHT} in flight "
            f"({closed_a.cpu_each() * 1e3:.2f} ms: one core's worth is "
            f"{1 / closed_a.cpu_each():,.0f} deliveries a second)"
        )
    aim = pick("after", "fresh", AIM_RATE)
    p99 = pct(aim.result.latencies, 0.99)
    _, gap, _ = aim.ticks
    lost = sum(r.lost for r in runs)
    print(
        f"  the listener's process had {aim.cpu / aim.wall:.0%} of a CPU at {AIM_RATE:,}/s, a "
        f"connection each (load average {aim.load})"
    )
    growth = cpu[("after", SIZES[-1])] / cpu[("after", 0)]
    print(
        f"  tick CPU at {SIZES[-1]:,} rows / at none: after x{growth:.2f}, before "
        f"x{cpu[('before', SIZES[-1])] / cpu[('before', 0)]:.1f}"
    )
    kept = aims.count(
        "every delivery answered 2xx is in the state file reopened (every side and mode)",
        lost == 0,
    )
    read_once = aims.count(
        f"after: the stored index read whole once over {TICKS} ticks", whole_reads == 1
    )
    rate_met = aims.timed(
        f"after: {AIM_RATE:,} deliveries a second for {RATES[-1][1]:.0f} s, a connection each, "
        "every one answered 2xx, p99 < 50 ms",
        aim.result.failed == 0 and aim.result.rate >= 0.97 * AIM_RATE and p99 < AIM_P99,
    )
    on_time = aims.timed(
        f"after: no wait between two ticks longer than the poll interval ({POLL:g} s) meanwhile",
        gap <= POLL,
    )
    flat = aims.timed(f"after: tick CPU at {SIZES[-1]:,} rows / at none <= 1.10", growth <= 1.10)
    return kept and read_once and rate_met and on_time and flat

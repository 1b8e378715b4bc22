"""Benchmark: the steady poll tick of a skewed org, today's code path and ours side by side.

The org is :mod:`bench.skewed` (a few busy repositories and a long quiet tail, runs of
1-140 jobs in stages, waiting, pending, requested and re-run runs, a fleet that churns
every tick) at 10, 100, 500 and 1,000 repositories. The fake GitHub (50 ms a request)
runs in its own process, the controller (``max_concurrency: 16``) in another, ticking
every 30 s of a virtual clock (the default ``poll_interval``; the poll's deadline is 0.8
of it, in real seconds). Each code path gets a fresh fake holding the same seeded org:
one cold tick, then :data:`STEADY` ticks with churn between them.

**Today's code path** is the package as it was before the poll's cadence
(:data:`BASELINE`, a commit of this repository: its ``autoscaler`` is extracted with
``git archive`` and put first on the controller's ``PYTHONPATH``); **ours** is the
working tree. The tick is the real one (:class:`autoscaler.controller.Controller`:
poll, queue math, alert rules, scaling decisions), driven tick by tick. Reported per
size and path: the steady tick's wall time (median and worst) against the interval, its
requests, the controller's and the fake's CPU (the fake must not be the limit), the
load average; and what it saw: the share of the queued jobs seen by the tick right
after they were queued, the **detection delay** of each queued job (from the start of
when the fake queued it to the end of the first tick that saw it, the ticks
spaced as the service loop spaces them: an interval apart, or at once after a tick
longer than that), the jobs that stayed queued two ticks in a row without either tick
seeing them, and jobs counted queued that had started (phantoms, mean a tick). The
cold (first) tick: its wall, requests, and whether it was cut short.

Aims (:mod:`bench.aims`), ours at 1,000 repositories: every steady tick's wall time under
the interval (timed); every job queued during the steady ticks seen by the tick after it
was queued or the one after that, within two intervals (a count), and none unseen two
ticks running (a count).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import asdict, dataclass
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Any

from bench import aims
from bench.github_poll import Proc
from bench.org import T0
from bench.skewed import Shape

SHAPES = (
    Shape(10, 40, 5, 50),
    Shape(100, 400, 20, 500),
    Shape(500, 2000, 60, 2500),
    Shape(1000, 4000, 100, 5000),
)
LATENCY = 0.05
CONCURRENCY = 16
INTERVAL = 30.0
STEADY = 4
#: Today's code path: ``main`` before the poll's per-repository cadence.
BASELINE = "a57e072fc1d012d946b09afaa8793024d1b65704"
ROOT = Path(__file__).resolve().parent.parent


@cache
def baseline_tree(rev: str) -> Path:
    """The ``autoscaler`` package at ``rev``, extracted into a directory of its own."""
    where = Path(tempfile.mkdtemp(prefix="ci-autoscaler-baseline-"))
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev, "autoscaler"],
        check=True,
        capture_output=True,
    ).stdout
    with tempfile.TemporaryFile() as raw:
        raw.write(archive)
        raw.seek(0)
        with tarfile.open(fileobj=raw) as tar:
            tar.extractall(where, filter="data")
    return where


def _where(rev: str | None) -> tuple[dict[str, str], Path]:
    """The environment and working directory of a controller on ``rev`` (None: ours).
    ``python -m`` puts its working directory first on ``sys.path``, before PYTHONPATH
    and the editable install: the baseline's runs in the extracted tree."""
    env = dict(os.environ)
    cwd = ROOT if rev is None else baseline_tree(rev)
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([str(cwd), str(ROOT)]))
    return env, cwd


@dataclass
class Tick:
    wall: float
    cpu: float
    requests: int
    not_modified: int
    seen: set[int]
    queued: set[int]
    error: str | None
    fake_cpu: float = 0.0
    partial: str | None = None
    cut: bool = False
    """The poll ran out of its deadline (its warning said so)."""
    latency_sum: float = 0.0
    """Seconds the controller's requests took, summed (client side)."""


@dataclass
class Path_:
    """One code path's ticks at one size."""

    name: str
    cold: Tick
    steady: list[Tick]

    @property
    def walls(self) -> list[float]:
        return [t.wall for t in self.steady]

    def median(self, attr: str) -> float:
        return float(statistics.median(getattr(t, attr) for t in self.steady))

    def seen_at_once(self) -> float:
        """Of the jobs queued at a steady tick, the share that tick saw."""
        queued = sum(len(t.queued) for t in self.steady)
        seen = sum(len(t.queued & t.seen) for t in self.steady)
        return seen / max(1, queued)

    def unseen_twice(self) -> int:
        """Jobs queued at two ticks in a row that neither saw."""
        ticks = [self.cold, *self.steady]
        return sum(len((a.queued & b.queued) - a.seen - b.seen) for a, b in pairwise(ticks))

    def phantoms(self) -> float:
        """Jobs a steady tick counted queued that were not (started, or ended), mean."""
        return statistics.mean(len(t.seen - t.queued) for t in self.steady)

    def mean_request_ms(self) -> float:
        requests = sum(t.requests for t in self.steady)
        return 1000 * sum(t.latency_sum for t in self.steady) / max(1, requests)

    def starts(self) -> list[float]:
        """When each tick starts, as the service loop spaces them: an interval after the
        last one started, or at once when that one took longer."""
        out = [0.0]
        for tick in [self.cold, *self.steady][:-1]:
            out.append(out[-1] + max(INTERVAL, tick.wall))
        return out

    def delays(self) -> tuple[list[float], list[int]]:
        """Of each job first queued at a steady tick and later seen: seconds from when it
        was queued to the end of the first tick that saw it; and how many ticks after it
        was queued that tick came (0: the first one). The churn queues a tick's arrivals
        at that tick's time on the fake's clock (a real org spreads them over the
        interval before it: add up to one interval for one queued right after a tick)."""
        ticks = [self.cold, *self.steady]
        starts = self.starts()
        first: dict[int, int] = {}
        for i, tick in enumerate(ticks):
            for job in tick.queued:
                first.setdefault(job, i)
        seconds, lags = [], []
        for job, k in first.items():
            if k == 0:
                continue  # queued before the controller started: the cold tick's
            j = next((i for i in range(k, len(ticks)) if job in ticks[i].seen), None)
            if j is not None:
                seconds.append(starts[j] + ticks[j].wall - starts[k])
                lags.append(j - k)
        return seconds, lags

    def late(self) -> int:
        """Jobs queued at a steady tick seen more than one tick after (past two
        intervals), or still queued and unseen at the last tick after two."""
        ticks = [self.cold, *self.steady]
        _, lags = self.delays()
        unseen = sum(
            1
            for job in ticks[-1].queued - ticks[-1].seen
            if job in ticks[-2].queued and job not in ticks[-2].seen and job not in self.cold.queued
        )
        return sum(1 for lag in lags if lag > 1) + unseen


def _tick(fake: Proc, controller: Proc, now: float) -> Tick:
    world = fake.ask(op="queued")
    before = fake.ask(op="stats")["cpu"]
    answer = controller.ask(op="tick", t=now, ids=True)
    statuses = answer["statuses"]
    return Tick(
        wall=answer["wall"],
        cpu=answer["cpu"],
        requests=sum(statuses.values()),
        not_modified=statuses.get("304", 0),
        seen=set(answer["ids"] or ()),
        queued=set(world["ids"]),
        error=answer["poll_error"],
        fake_cpu=fake.ask(op="stats")["cpu"] - before,
        partial=answer.get("partial"),
        cut=bool(answer.get("cut")),
        latency_sum=answer["latency_sum"],
    )


def measure(shape: Shape, name: str, rev: str | None) -> Path_:
    fake = Proc("fake", {"shape": asdict(shape), "latency": LATENCY, "rate_limit": 1_000_000_000})
    controller: Proc | None = None
    try:
        where = fake.read()
        env, cwd = _where(rev)
        controller = Proc(
            "controller",
            {
                "shape": asdict(shape),
                "url": where["url"],
                "owner": where["owner"],
                "interval": INTERVAL,
                "concurrency": CONCURRENCY,
            },
            env=env,
            cwd=cwd,
        )
        now = T0.timestamp()
        cold = _tick(fake, controller, now)
        steady = []
        for _ in range(STEADY):
            now += INTERVAL
            fake.ask(op="churn", seconds=INTERVAL)
            steady.append(_tick(fake, controller, now))
        return Path_(name, cold, steady)
    finally:
        if controller is not None:
            controller.close()
        fake.close()


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def compare(against: str = BASELINE, label: str = "today") -> bool:
    print(
        f"steady_tick: a skewed org (repos/live runs/types/runners), fake GitHub at "
        f"{int(LATENCY * 1000)} ms a request, max_concurrency {CONCURRENCY}, poll_interval "
        f"{INTERVAL:.0f}s, {STEADY} steady ticks with churn; {label} = {against[:10]}",
        flush=True,
    )
    results: list[tuple[Shape, Path_, Path_, str]] = []
    for shape in SHAPES:
        load = _load()
        before = measure(shape, label, against)
        ours = measure(shape, "ours", None)
        load += " -> " + _load()
        results.append((shape, before, ours, load))
        print(f"  measured {shape.label} (load average {load}, {os.cpu_count()} CPUs)", flush=True)
    return report(results, label)


def report(results: list[tuple[Shape, Path_, Path_, str]], label: str) -> bool:
    rows: list[list[str]] = [["", *(s.label for s, *_ in results), "aim"]]

    def both(name: str, cell: Any, aim: str = "") -> None:
        rows.append([name, *(f"{cell(b)} / {cell(o)}" for _, b, o, _ in results), aim])

    both("steady wall, median (s)", lambda p: f"{p.median('wall'):.1f}")
    both("steady wall, worst (s)", lambda p: f"{max(p.walls):.1f}", f"ours < {INTERVAL:.0f}")
    both("steady requests, median", lambda p: f"{p.median('requests'):,.0f}")
    both(
        "  of which 304",
        lambda p: f"{statistics.median(t.not_modified for t in p.steady):,.0f}",
    )
    both("steady controller CPU, median (s)", lambda p: f"{p.median('cpu'):.2f}")
    both("steady fake GitHub CPU, median (s)", lambda p: f"{p.median('fake_cpu'):.2f}")
    both(
        "steady mean request time (ms)",
        lambda p: f"{p.mean_request_ms():.0f}",
    )
    both("cold tick wall (s)", lambda p: f"{p.cold.wall:.1f}")
    both("cold tick requests", lambda p: f"{p.cold.requests:,}")
    both("cold tick cut short", lambda p: "yes" if p.cold.cut or p.cold.partial else "no")
    both(
        "queued jobs at a steady tick, mean",
        lambda p: f"{statistics.mean(len(t.queued) for t in p.steady):,.0f}",
    )
    both("  seen by that tick", lambda p: f"{p.seen_at_once():.1%}")
    both(
        "  detection delay, median / worst (s)",
        lambda p: f"{statistics.median(p.delays()[0] or [0]):.0f}/{max(p.delays()[0] or [0]):.0f}",
    )
    both("  seen after two intervals", lambda p: str(p.late()), "ours 0")
    both("  queued two ticks, seen by neither", lambda p: str(p.unseen_twice()), "ours 0")
    both("  counted queued but started (mean)", lambda p: f"{p.phantoms():.0f}")
    both("polls failed", lambda p: str(sum(1 for t in [p.cold, *p.steady] if t.error)))
    both(
        "steady polls cut short",
        lambda p: str(sum(1 for t in p.steady if t.cut or t.partial)),
    )
    rows.append(["load average (1/5/15 min, before -> after)", *(load for *_, load in results), ""])
    print(f"  cells: {label} / ours")
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    sys.stdout.flush()
    big = next(o for s, _, o, _ in results if s.repos == big_repos(results))
    size = f"{big_repos(results):,} repositories"
    wall = aims.timed(
        f"ours: every steady tick under the {INTERVAL:.0f} s interval at {size} "
        f"(worst {max(big.walls):.1f} s)",
        max(big.walls) < INTERVAL,
    )
    seen = aims.count(
        f"ours: no queued job unseen by two ticks in a row at {size} ({big.unseen_twice()})",
        big.unseen_twice() == 0,
    )
    late = aims.count(
        f"ours: every job queued meanwhile seen within two intervals at {size} "
        f"({big.late()} late; worst {max(big.delays()[0] or [0]):.0f} s)",
        big.late() == 0,
    )
    return wall and seen and late


def big_repos(results: list[tuple[Shape, Path_, Path_, str]]) -> int:
    return max(shape.repos for shape, *_ in results)


def run() -> bool:
    return compare()


if __name__ == "__main__":
    # python -m bench.steady_tick [REV [LABEL]]: ours against another commit
    args = sys.argv[1:]
    met = compare(args[0], args[1] if len(args) > 1 else args[0][:10]) if args else run()
    sys.exit(0 if met else 1)

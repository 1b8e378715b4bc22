"""The floor: the fewest runner-hours any policy could spend on a trace, knowing the future.

The oracle knows every job's arrival and duration and the boot each launch will take. A
job starts the moment it is created (zero wait) on a machine that is either idle (it
ran an earlier job and was kept) or fresh (launched one boot earlier, so it is up just
in time). A machine costs its boot (billed from running), its jobs and the idle gaps it
was kept across. So a freed machine is worth keeping across a gap shorter than the
boot a fresh machine would need, and is stopped otherwise; which freed machine a job
takes decides which gaps are paid.

:func:`zero_wait_hours` solves that exactly per runner type: an assignment of each
job to its predecessor on the same machine (or to a fresh boot), cheapest in total. Every
job ``j`` draws its own boot ``b_j`` (the boot a machine launched for it would take, from
the type's pools' distributions, the fastest pool's draw): a machine freed at ``e`` can
take ``j`` for ``s_j - e`` idle seconds instead of ``b_j``. Jobs are swept in time order
with a max-heap of "options" (the latest free times); taking an option pushes a
regret option ``s_j - b_j`` (a later job takes this machine and ``j`` boots its own),
the exchange that keeps the greedy optimal (successive shortest paths on a line).

What it leaves out makes it lower, never higher, so it stays a floor: no MaxSize, no
outages, no launch throttling, no per-instance billing minimum, launch latency unbilled
(it launches early enough). Jobs go to the runner type the queue math gives them.

:func:`waiting_hours` is the frontier when jobs may wait up to ``w`` seconds: a job
may also wait for a busy machine that frees within ``w`` instead of booting one. It is
found greedily (arrival order, the most recently freed idle machine, else the
soonest-freeing busy one within ``w``, else a fresh boot), so it is what foresight
achieves at that wait, an upper bound on the true minimum there; a schedule feasible at
one wait is feasible at any longer one, so each point is the least found up to its wait.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autoscaler.observe.queue import match_job
from autoscaler.sim.trace import Trace

if TYPE_CHECKING:
    from autoscaler.config import Config
    from autoscaler.config.simulation import BootTime, LaunchTime

#: The waits (seconds) the frontier is reported at, besides zero.
FRONTIER_WAITS = (30.0, 60.0, 120.0, 300.0)

_Z95 = 1.6448536269514722


@dataclass(frozen=True)
class TypeJobs:
    """One runner type's jobs for the oracle: (start, duration, boot) in start order."""

    name: str
    jobs: tuple[tuple[float, float, float], ...]


@dataclass(frozen=True)
class FrontierPoint:
    max_wait_seconds: float
    runner_hours: float


@dataclass(frozen=True)
class TypeFloor:
    name: str
    jobs: int
    busy_hours: float
    zero_wait_hours: float
    """The oracle's runner-hours at zero wait."""
    frontier: tuple[FrontierPoint, ...]

    def as_json(self) -> dict[str, object]:
        return {
            "runner_type": self.name,
            "jobs": self.jobs,
            "busy_hours": round(self.busy_hours, 2),
            "oracle_runner_hours": round(self.zero_wait_hours, 2),
            "frontier": [
                {"max_wait_seconds": p.max_wait_seconds, "runner_hours": round(p.runner_hours, 2)}
                for p in self.frontier
            ],
        }


@dataclass(frozen=True)
class Floor:
    """The oracle for a whole trace: per runner type and overall."""

    types: tuple[TypeFloor, ...]

    @property
    def zero_wait_hours(self) -> float:
        return sum(t.zero_wait_hours for t in self.types)

    def of(self, name: str) -> TypeFloor | None:
        return next((t for t in self.types if t.name == name), None)

    def frontier(self) -> tuple[FrontierPoint, ...]:
        waits = sorted({p.max_wait_seconds for t in self.types for p in t.frontier})
        return tuple(
            FrontierPoint(
                w,
                sum(
                    next(p.runner_hours for p in t.frontier if p.max_wait_seconds == w)
                    for t in self.types
                ),
            )
            for w in waits
        )


def _draw(rng: random.Random, boot: BootTime | LaunchTime) -> float:
    if boot.p95 <= boot.p50:
        return boot.p50
    sigma = math.log(boot.p95 / boot.p50) / _Z95
    return rng.lognormvariate(math.log(boot.p50), sigma)


def type_jobs(config: Config, trace: Trace) -> list[TypeJobs]:
    """Each runner type with pools and the jobs the queue math gives it, each with its
    own boot draw (seeded per type, so every run of the oracle agrees)."""
    sim = config.simulation
    types = [rt.runner_type for rt in config.runner_types]
    homes: dict[frozenset[str], int | None] = {}
    per_type: list[list[tuple[float, float]]] = [[] for _ in types]
    for job in trace.jobs:
        if job.labels not in homes:
            home = match_job(job.labels, types)
            homes[job.labels] = None if home is None else types.index(home)
        index = homes[job.labels]
        if index is not None:
            per_type[index].append((job.created_at, job.duration))
    out = []
    for index, rt in enumerate(config.runner_types):
        if not rt.pools:
            continue
        boots = [sim.pool(p).boot_time or sim.boot_time for p in rt.pools]
        rngs = [random.Random(f"{sim.seed}:oracle:{rt.name}:{p}") for p in rt.pools]  # noqa: S311
        jobs = tuple(
            (start, duration, min(_draw(rng, boot) for rng, boot in zip(rngs, boots, strict=True)))
            for start, duration in per_type[index]
        )
        out.append(TypeJobs(rt.name, jobs))
    return out


def zero_wait_seconds(jobs: Sequence[tuple[float, float, float]]) -> float:
    """The least machine-seconds that start every job on time (see the module docstring).

    ``jobs``: (start, duration, boot) in start order."""
    # Events: a machine frees at each job's end; ends sort before starts at one instant.
    events: list[tuple[float, int, int]] = []
    for index, (start, duration, _) in enumerate(jobs):
        events.append((start, 1, index))
        events.append((start + duration, 0, index))
    events.sort()
    options: list[float] = []  # max-heap (negated) of option values
    cost = sum(duration for _, duration, _ in jobs)
    for when, kind, index in events:
        if kind == 0:
            heapq.heappush(options, -when)
            continue
        boot = jobs[index][2]
        if options and when - (-options[0]) < boot:
            value = -heapq.heappop(options)
            cost += when - value
            heapq.heappush(options, -(when - boot))
        else:
            cost += boot
    return cost


def waiting_seconds(jobs: Sequence[tuple[float, float, float]], max_wait: float) -> float:
    """Machine-seconds of the greedy schedule that lets each job wait up to ``max_wait``
    for a machine that is still busy (see the module docstring)."""
    order = sorted(range(len(jobs)), key=lambda i: jobs[i][0])
    free: list[float] = []  # free times of machines, sorted
    cost = 0.0
    for index in order:
        start, duration, boot = jobs[index]
        at = bisect.bisect_right(free, start)
        begin = start
        if at > 0 and start - free[at - 1] < boot:
            cost += start - free.pop(at - 1)  # the most recently freed idle machine
        elif at < len(free) and free[at] - start <= max_wait:
            begin = free.pop(at)  # the soonest-freeing busy machine: the job waits
        else:
            cost += boot
            if at > 0 and free[0] < start - 7200.0:  # long-stopped machines: forget
                del free[: bisect.bisect_left(free, start - 7200.0)]
        cost += duration
        bisect.insort(free, begin + duration)
    return cost


def floor(config: Config, trace: Trace, waits: Sequence[float] = FRONTIER_WAITS) -> Floor:
    """The oracle's runner-hours per runner type (and its frontier at ``waits``)."""
    out = []
    for tj in type_jobs(config, trace):
        best = zero = zero_wait_seconds(tj.jobs)
        points = [FrontierPoint(0.0, zero / 3600)]
        for w in sorted(waits):
            best = min(best, waiting_seconds(tj.jobs, w))  # feasible at w: at any longer wait
            points.append(FrontierPoint(w, best / 3600))
        busy = sum(d for _, d, _ in tj.jobs)
        out.append(TypeFloor(tj.name, len(tj.jobs), busy / 3600, zero / 3600, tuple(points)))
    return Floor(tuple(out))

"""What a replay measured: queue times and runner-hours, per policy and per runner type.

- **Queue time** of a job: from its creation until a runner took it; a job still queued
  when the replay ends counts its wait so far. Jobs no pool can serve are counted apart
  (``unserved``) and left out of the percentiles.
- **Runner-hours**: what EC2 bills, instance-seconds from running to termination (or the
  end), boot included, at least ``billing_minimum`` per instance. **Idle** runner-hours:
  billed and neither booting nor running a job.
- **Storage hours**: instance-hours stopped in a warm pool, billed for their disks only;
  their own column, never in runner-hours. A warm instance's initialisation (its cold
  boot before it stops) is compute, in runner-hours and boot hours.
- **x oracle**: runner-hours over the oracle's (:mod:`autoscaler.sim.oracle`), the
  fewest any policy could spend starting every job at once with perfect foresight.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from autoscaler.sim.emulator import Emulator
from autoscaler.sim.entities import Sample
from autoscaler.sim.oracle import Floor

WAITED_LONG = 600.0
"""A job that waited longer than this (10 min) is counted in ``waited_over_10m``."""


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between closest ranks."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class TypeResult:
    """One runner type's share of a replay."""

    name: str
    jobs: int
    p95_queue_seconds: float
    runner_hours: float


@dataclass(frozen=True)
class PolicyResult:
    name: str
    jobs: int
    """Jobs some pool can serve."""
    unserved: int
    """Jobs no runner type with pools covers (never run, not in the percentiles)."""
    unfinished: int
    """Servable jobs not started when the replay ended."""
    p50_queue_seconds: float
    p95_queue_seconds: float
    p99_queue_seconds: float
    waited_over_10m: int
    runner_hours: float
    idle_runner_hours: float
    boot_hours: float
    busy_hours: float
    scale_actions: int
    instances_launched: int
    end_seconds: float
    """When the replay ended (the last job completed), from the trace's start."""
    samples: tuple[Sample, ...] = ()
    per_type: tuple[TypeResult, ...] = ()
    storage_hours: float = 0.0
    """Instance-hours stopped in a warm pool (billed for storage only)."""
    warm_starts: int = 0
    """Instances taken from a warm pool."""

    def oracle_ratio(self, floor: Floor | None) -> float | None:
        """Runner-hours over the oracle's (None without one, or when it is zero)."""
        if floor is None or floor.zero_wait_hours <= 0:
            return None
        return self.runner_hours / floor.zero_wait_hours

    def as_json(self, floor: Floor | None = None) -> dict[str, Any]:
        ratio = self.oracle_ratio(floor)
        types = []
        for t in self.per_type:
            row: dict[str, Any] = {
                "runner_type": t.name,
                "jobs": t.jobs,
                "p95_queue_seconds": round(t.p95_queue_seconds, 1),
                "runner_hours": round(t.runner_hours, 2),
            }
            of = floor.of(t.name) if floor is not None else None
            if of is not None and of.zero_wait_hours > 0:
                row["oracle_ratio"] = round(t.runner_hours / of.zero_wait_hours, 3)
            types.append(row)
        return {
            "name": self.name,
            "p50_queue_seconds": round(self.p50_queue_seconds, 1),
            "p95_queue_seconds": round(self.p95_queue_seconds, 1),
            "p99_queue_seconds": round(self.p99_queue_seconds, 1),
            "runner_hours": round(self.runner_hours, 2),
            "idle_runner_hours": round(self.idle_runner_hours, 2),
            "oracle_ratio": None if ratio is None else round(ratio, 3),
            "scale_actions": self.scale_actions,
            "jobs_waited_over_10m": self.waited_over_10m,
            "instances_launched": self.instances_launched,
            "storage_hours": round(self.storage_hours, 2),
            "warm_starts": self.warm_starts,
            "jobs": self.jobs,
            "unserved_jobs": self.unserved,
            "unfinished_jobs": self.unfinished,
            "runner_types": types,
        }


def summarize(name: str, em: Emulator, end: float) -> PolicyResult:
    """Measure one finished replay."""
    minimum = em.config.simulation.billing_minimum
    waits: list[float] = []
    type_waits: list[list[float]] = [[] for _ in em.types]
    unfinished = 0
    for job in em.runnable:
        if job.started is None:
            unfinished += 1
            wait = max(0.0, end - job.created)
        else:
            wait = job.started - job.created
        waits.append(wait)
        if job.home is not None:
            type_waits[job.home].append(wait)
    total = boot = busy = 0.0
    type_hours = [0.0] * len(em.types)
    for inst in em.instances:
        billed = inst.billed(end, minimum)
        total += billed
        type_hours[inst.pool.type_index] += billed
        stop = end if inst.terminated is None else inst.terminated
        boot += inst.prior_boot
        if not inst.parked:
            boot += max(0.0, min(inst.boot, stop - inst.running))
        busy += inst.busy_seconds
        if not inst.parked and inst.job is not None and inst.job.started is not None:
            busy += max(0.0, stop - inst.job.started)  # still running at the end
    storage = sum(inst.stored_until(end) for inst in em.instances)
    for inst in em.warm_launched:
        if inst.counted:
            continue  # billed and stored above
        storage += inst.stored_until(end)
        # initialised (or initialising at the end) and never started: its boot is compute
        billed = inst.prior_compute or max(0.0, min(end, inst.running + inst.boot) - inst.running)
        total += billed
        boot += billed
        type_hours[inst.pool.type_index] += billed
    per_type = tuple(
        TypeResult(rt.name, len(type_waits[t]), percentile(type_waits[t], 95), type_hours[t] / 3600)
        for t, rt in enumerate(em.types)
        if em.pools_of[t]
    )
    return PolicyResult(
        name=name,
        jobs=len(em.runnable),
        unserved=len(em.jobs) - len(em.runnable),
        unfinished=unfinished,
        p50_queue_seconds=percentile(waits, 50),
        p95_queue_seconds=percentile(waits, 95),
        p99_queue_seconds=percentile(waits, 99),
        waited_over_10m=sum(1 for w in waits if w > WAITED_LONG),
        runner_hours=total / 3600,
        idle_runner_hours=max(0.0, total - boot - busy) / 3600,
        boot_hours=boot / 3600,
        busy_hours=busy / 3600,
        scale_actions=em.scale_actions,
        instances_launched=len(em.instances),
        end_seconds=end,
        samples=tuple(em.samples),
        per_type=per_type,
        storage_hours=storage / 3600,
        warm_starts=sum(1 for i in em.instances if i.warm_started),
    )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def format_table(results: Iterable[PolicyResult], floor: Floor | None = None) -> str:
    """A table for a person: one row per policy; ``x oracle`` when ``floor`` is given."""
    header = (
        f"{'policy':<28} {'p50':>6} {'p95':>6} {'p99':>6} {'runner-h':>9} {'idle-h':>8}"
        f" {'x oracle':>8} {'actions':>8} {'>10m':>5} {'storage-h':>9}"
    )
    lines = [header, "-" * len(header)]
    for r in results:
        ratio = r.oracle_ratio(floor)
        shown = "-" if ratio is None else f"{ratio:.2f}"
        lines.append(
            f"{r.name:<28} {_duration(r.p50_queue_seconds):>6} {_duration(r.p95_queue_seconds):>6}"
            f" {_duration(r.p99_queue_seconds):>6} {r.runner_hours:>9.1f}"
            f" {r.idle_runner_hours:>8.1f} {shown:>8} {r.scale_actions:>8}"
            f" {r.waited_over_10m:>5} {r.storage_hours:>9.1f}"
        )
    return "\n".join(lines) + "\n"

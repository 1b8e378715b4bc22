"""What a replay measured: queue times, runner-hours and their lower bound, per policy.

- **Queue time** of a job: from its creation until a runner took it; a job still queued
  when the replay ends counts its wait so far. Jobs no pool can serve are counted apart
  (``unserved``) and left out of the percentiles.
- **Runner-hours**: instance-seconds from launch to termination (or the end), boot
  included. **Idle** runner-hours: registered and not running a job.
- **Lower bound**: the sum of the job durations plus one boot per instance launched (the
  boot each instance really had, cut short when it was terminated while booting): what
  the same launches would cost with no idle second.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from autoscaler.sim.emulator import Emulator
from autoscaler.sim.entities import Sample

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

    @property
    def lower_bound_hours(self) -> float:
        return self.busy_hours + self.boot_hours

    @property
    def cost_ratio(self) -> float:
        """Runner-hours over their lower bound (1.0: not one idle second)."""
        bound = self.lower_bound_hours
        return self.runner_hours / bound if bound > 0 else 1.0

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "p50_queue_seconds": round(self.p50_queue_seconds, 1),
            "p95_queue_seconds": round(self.p95_queue_seconds, 1),
            "p99_queue_seconds": round(self.p99_queue_seconds, 1),
            "runner_hours": round(self.runner_hours, 2),
            "idle_runner_hours": round(self.idle_runner_hours, 2),
            "scale_actions": self.scale_actions,
            "jobs_waited_over_10m": self.waited_over_10m,
            "lower_bound_runner_hours": round(self.lower_bound_hours, 2),
            "instances_launched": self.instances_launched,
            "jobs": self.jobs,
            "unserved_jobs": self.unserved,
            "unfinished_jobs": self.unfinished,
        }


def summarize(name: str, em: Emulator, end: float) -> PolicyResult:
    """Measure one finished replay."""
    waits = []
    unfinished = 0
    for job in em.runnable:
        if job.started is None:
            unfinished += 1
            waits.append(max(0.0, end - job.created))
        else:
            waits.append(job.started - job.created)
    total = boot = busy = 0.0
    for inst in em.instances:
        stop = end if inst.terminated is None else inst.terminated
        life = max(0.0, stop - inst.launched)
        total += life
        boot += min(inst.boot, life)
        busy += inst.busy_seconds
        if inst.job is not None and inst.job.started is not None:
            busy += max(0.0, stop - inst.job.started)  # still running at the end
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
    )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def format_table(results: Iterable[PolicyResult]) -> str:
    """A table for a person: one row per policy."""
    header = (
        f"{'policy':<22} {'p50':>6} {'p95':>6} {'p99':>6} {'runner-h':>9} {'idle-h':>8}"
        f" {'x bound':>7} {'actions':>8} {'>10m':>5}"
    )
    lines = [header, "-" * len(header)]
    for r in results:
        lines.append(
            f"{r.name:<22} {_duration(r.p50_queue_seconds):>6} {_duration(r.p95_queue_seconds):>6}"
            f" {_duration(r.p99_queue_seconds):>6} {r.runner_hours:>9.1f}"
            f" {r.idle_runner_hours:>8.1f} {r.cost_ratio:>7.2f} {r.scale_actions:>8}"
            f" {r.waited_over_10m:>5}"
        )
    return "\n".join(lines) + "\n"

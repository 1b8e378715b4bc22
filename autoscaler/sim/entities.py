"""What the emulated world is made of (pure), and how the controller's adapters see it.

:class:`~autoscaler.sim.emulator.Emulator` moves jobs, instances and pools through time;
these records live apart because the replay's drivers (:mod:`autoscaler.sim.project`,
:mod:`autoscaler.sim.drivers`) and its metrics read them without the event loop. The
records are ``slots`` with identity equality (``eq=False``): a replay holds a million
jobs. Each pool draws its boot times from its own seeded stream, so every policy sees
the same sequence (common random numbers).

:class:`EmulatorView` is the other side of the seam: the world translated into the
domain's records (queued jobs, registered runners, pool states) as the GitHub and Auto
Scaling adapters would report them; the emulator inherits it and only reads through it.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from autoscaler.domain import (
    ActivityStatus,
    Instance,
    InstanceLifecycle,
    Job,
    JobStatus,
    PoolState,
    Runner,
    ScalingActivity,
)
from autoscaler.sim.trace import Trace

if TYPE_CHECKING:
    from autoscaler.config.simulation import BootTime

_Z95 = 1.6448536269514722


def lognormal(boot: BootTime) -> tuple[float, float]:
    """(mu, sigma) of the lognormal whose median is p50 and 95th percentile p95."""
    return math.log(boot.p50), math.log(boot.p95 / boot.p50) / _Z95


@dataclass(eq=False, slots=True)
class SimJob:
    index: int
    created: float
    labels: frozenset[str]
    duration: float
    key: int
    """Index of the job's distinct label set."""
    home: int | None
    """The runner type the queue math gives it (None: unmatched)."""
    started: float | None = None
    finished: float | None = None
    domain: Job | None = None


@dataclass(eq=False, slots=True)
class SimInstance:
    id: str
    pool: SimPool
    launched: float
    boot: float
    ready: float | None = None
    terminated: float | None = None
    runner_id: int = 0
    job: SimJob | None = None
    idle_since: float | None = None
    busy_seconds: float = 0.0
    idle_pos: int = -1
    launched_at: datetime | None = None
    runners: dict[bool, Runner] = field(default_factory=dict)
    described: Instance | None = None

    def describe(self) -> Instance:
        """The instance as the Auto Scaling adapter reports it (pending until registered)."""
        if self.described is None:
            lifecycle = (
                InstanceLifecycle.PENDING if self.ready is None else InstanceLifecycle.IN_SERVICE
            )
            self.described = Instance(self.id, self.pool.name, lifecycle, self.launched_at)
        return self.described

    @property
    def booting(self) -> bool:
        return self.ready is None

    @property
    def busy(self) -> bool:
        return self.job is not None


class IdleSet:
    """Idle runners of one type: O(1) add, remove and uniform random pick."""

    def __init__(self) -> None:
        self.items: list[SimInstance] = []

    def __len__(self) -> int:
        return len(self.items)

    def add(self, inst: SimInstance) -> None:
        inst.idle_pos = len(self.items)
        self.items.append(inst)

    def remove(self, inst: SimInstance) -> None:
        pos, last = inst.idle_pos, self.items.pop()
        if last is not inst:
            self.items[pos] = last
            last.idle_pos = pos
        inst.idle_pos = -1


@dataclass(eq=False)
class SimPool:
    name: str
    type_index: int
    max_size: int
    median: float
    sigma: float
    outages: list[tuple[float, float]]
    rng: random.Random
    desired: int = 0
    live: dict[str, SimInstance] = field(default_factory=dict)
    failed: list[datetime] = field(default_factory=list)
    """Start times of Failed scaling activities, newest first."""
    launched: int = 0

    def in_outage(self, now: float) -> bool:
        return any(start <= now < end for start, end in self.outages)

    def boot_time(self) -> float:
        if self.sigma <= 0:
            return self.median
        return self.rng.lognormvariate(math.log(self.median), self.sigma)


@dataclass(frozen=True)
class Sample:
    """The fleet at one instant (for plots)."""

    at: float
    queued: int
    oldest_wait: float
    instances: int
    busy: int


class EmulatorView:
    """The emulated world as the controller's adapters report it (read only)."""

    trace: Trace
    queued: list[deque[SimJob]]
    pools: dict[str, SimPool]
    type_labels: list[frozenset[str]]

    # --- what a controller observes
    def queued_jobs(self) -> list[Job]:
        """Queued jobs as the GitHub adapter reports them."""
        out = []
        for q in self.queued:
            for job in q:
                if job.domain is None:
                    job.domain = Job(
                        id=job.index + 1,
                        run_id=job.index + 1,
                        repo="trace",
                        name="job",
                        labels=job.labels,
                        status=JobStatus.QUEUED,
                        created_at=self.trace.start + timedelta(seconds=job.created),
                    )
                out.append(job.domain)
        return out

    def runners(self) -> list[Runner]:
        """Registered runners, named ``f"{pool}-{instance id}"``."""
        out = []
        for pool in self.pools.values():
            labels = self.type_labels[pool.type_index]
            for inst in pool.live.values():
                if inst.ready is None:
                    continue
                busy = inst.job is not None
                runner = inst.runners.get(busy)
                if runner is None:
                    name = f"{pool.name}-{inst.id}"
                    runner = inst.runners[busy] = Runner(inst.runner_id, name, labels, True, busy)
                out.append(runner)
        return out

    def pool_states(self) -> dict[str, PoolState]:
        out = {}
        for pool in self.pools.values():
            instances = tuple(inst.describe() for inst in pool.live.values())
            activities: tuple[ScalingActivity, ...] = ()
            if pool.desired > len(pool.live):
                activities = tuple(ScalingActivity(at, ActivityStatus.FAILED) for at in pool.failed)
            out[pool.name] = PoolState(
                pool.name, 0, pool.max_size, pool.desired, instances, activities
            )
        return out

    def instance(self, instance_id: str) -> SimInstance | None:
        for pool in self.pools.values():
            inst = pool.live.get(instance_id)
            if inst is not None:
                return inst
        return None

"""What the emulated world is made of (pure), and how the controller's adapters see it.

:class:`~autoscaler.sim.emulator.Emulator` moves jobs, instances and pools through time;
these records live apart because the replay's drivers (:mod:`autoscaler.sim.project`,
:mod:`autoscaler.sim.drivers`) and its metrics read them without the event loop. The
records are ``slots`` with identity equality (``eq=False``): a replay holds a million
jobs. Each pool draws its boot times from its own seeded stream, so every policy sees
the same sequence (common random numbers); the instances one activity starts share a
factor of their boots (``boot_correlation``).

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
    WarmPoolSpec,
)
from autoscaler.sim.clock import VirtualClock
from autoscaler.sim.trace import Trace

if TYPE_CHECKING:
    from autoscaler.config.simulation import BootTime, LaunchTime, WarmStart

_Z95 = 1.6448536269514722

BOOT_WINDOW = 300.0
"""Seconds over which the boots of a pool share their factor (``boot_correlation``)."""


def lognormal(boot: BootTime | LaunchTime | WarmStart) -> tuple[float, float]:
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
    """As the GitHub adapter reports it while queued."""
    domain_started: Job | None = None
    """As the GitHub adapter reports it while in progress."""


@dataclass(eq=False, slots=True)
class SimInstance:
    """One instance, from the capacity asked for it to its termination.

    ``launched`` (the group's activity started it), ``running`` (EC2 runs it: billing
    starts), ``ready`` (its runner registered: ``running + boot``), ``terminated``. An
    instance taken from a warm pool was launched into it, initialised (billed:
    :attr:`prior_compute`), stopped (its disks billed: :attr:`stored`), and started again:
    its ``running`` and ``boot`` are those of the warm start."""

    id: str
    pool: SimPool
    launched: float
    running: float
    """When it reaches the running state (billed from then)."""
    boot: float
    """Seconds from running to a registered runner."""
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
    prior_compute: float = 0.0
    """Seconds billed as compute before its last warm start: its initialisation in the
    warm pool and its earlier runs (reused on scale-in), each at least the billing
    minimum."""
    prior_boot: float = 0.0
    """Seconds of those spent booting (its initialisation, its earlier starts)."""
    stopped_at: float | None = None
    """Since when it waits stopped in the warm pool (None: not stopped)."""
    stored: float = 0.0
    """Seconds it spent stopped (billed for storage only), up to its last warm start."""
    warm_started: bool = False
    """Taken from a warm pool."""
    counted: bool = False
    """In the emulator's instances (it went into service once)."""
    parked: bool = False
    """In a warm pool (initialised or reused): billed nothing beyond
    :attr:`prior_compute` until it starts again."""

    def describe(self) -> Instance:
        """The instance as the Auto Scaling adapter reports it: pending until running."""
        if self.described is None:
            lifecycle = (
                InstanceLifecycle.IN_SERVICE if self.in_service else InstanceLifecycle.PENDING
            )
            self.described = Instance(self.id, self.pool.name, lifecycle, self.launched_at)
        return self.described

    @property
    def in_service(self) -> bool:
        """EC2 runs it (the group reports it ``InService``)."""
        return self.pool.now >= self.running

    @property
    def booting(self) -> bool:
        return self.ready is None

    @property
    def busy(self) -> bool:
        return self.job is not None

    def billed(self, end: float, minimum: float) -> float:
        """Seconds billed: from running to terminated (or ``end``), at least ``minimum``;
        nothing when it never ran."""
        stop = end if self.terminated is None else self.terminated
        if self.parked or stop <= self.running:
            return self.prior_compute
        return self.prior_compute + max(minimum, stop - self.running)

    def stored_until(self, end: float) -> float:
        """Seconds stopped in a warm pool, counting a stop still going on at ``end``."""
        ongoing = 0.0 if self.stopped_at is None else max(0.0, end - self.stopped_at)
        return self.stored + ongoing


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
    """One Auto Scaling group: its desired capacity, its instances, and how fast it
    starts them (the boot and launch distributions, per pool seeded streams)."""

    name: str
    type_index: int
    max_size: int
    boot: BootTime
    launch: LaunchTime
    correlation: float
    outages: list[tuple[float, float]]
    rng: random.Random
    """Boot draws, in launch order (every policy sees the same sequence)."""
    launch_rng: random.Random
    """Launch latencies, in launch order."""
    seed: str
    """Seeds the shared boot factor of each :data:`BOOT_WINDOW` (:meth:`boot_factor`)."""
    clock: VirtualClock
    desired: int = 0
    live: dict[str, SimInstance] = field(default_factory=dict)
    failed: list[datetime] = field(default_factory=list)
    """Start times of Failed scaling activities, newest first."""
    launched: int = 0
    next_activity: float = 0.0
    """The group starts no activity before this (one every ``launches.retry``)."""
    retry_pending: bool = False
    warm_start: WarmStart | None = None
    """How long a warm start takes (``simulation.warm_start``)."""
    warm_rng: random.Random | None = None
    """Warm start draws, in start order."""
    warm_spec: WarmPoolSpec | None = None
    """The group's warm pool as the controller put it (None: it has none)."""
    stopped: list[SimInstance] = field(default_factory=list)
    """Warm instances ready to start, oldest first."""
    warming: dict[str, SimInstance] = field(default_factory=dict)
    """Warm instances launched and still initialising."""
    refill_pending: bool = False
    _factors: dict[int, float] = field(default_factory=dict)

    @property
    def now(self) -> float:
        return self.clock.now

    def in_outage(self, now: float) -> bool:
        return any(start <= now < end for start, end in self.outages)

    def boot_factor(self, now: float) -> float:
        """The standard-normal factor every boot started in this :data:`BOOT_WINDOW`
        shares (one image pulled by many, one zone's load): a burst boots slow or fast
        together, and every policy launching then meets the same conditions."""
        window = int(now // BOOT_WINDOW)
        factor = self._factors.get(window)
        if factor is None:
            rng = random.Random(f"{self.seed}:{window}")  # noqa: S311 (a simulation)
            factor = self._factors[window] = rng.gauss(0.0, 1.0)
        return factor

    def cold_start(self) -> tuple[float, float]:
        """(launch latency, boot) of one instance launched now from nothing."""
        shared = math.sqrt(self.correlation) * self.boot_factor(self.now)
        own = math.sqrt(1.0 - self.correlation) * self.rng.gauss(0.0, 1.0)
        return _draw(self.launch, self.launch_rng.gauss(0.0, 1.0)), _draw(self.boot, shared + own)

    def warm_draw(self) -> float:
        """Seconds from a warm instance's start to its registered runner."""
        assert self.warm_start is not None and self.warm_rng is not None
        return _draw(self.warm_start, self.warm_rng.gauss(0.0, 1.0))

    def warm_target(self) -> int:
        """Instances the warm pool holds: ``MinSize``, or more up to
        ``MaxGroupPreparedCapacity`` (absent: MaxSize) beside the desired capacity."""
        spec = self.warm_spec
        if spec is None:
            return 0
        prepared = self.max_size if spec.max_prepared is None else spec.max_prepared
        return max(spec.min_size, prepared - self.desired, 0)


def _draw(latency: BootTime | LaunchTime | WarmStart, z: float) -> float:
    mu, sigma = lognormal(latency)
    return math.exp(mu + sigma * z) if sigma > 0 else latency.p50


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

    def started_jobs(self) -> list[Job]:
        """Jobs in progress as the GitHub adapter reports them (its poll lists the jobs of
        queued and in-progress runs)."""
        out = []
        for inst in self.running_instances():
            job = inst.job
            if job is None:
                continue
            if job.domain_started is None:
                job.domain_started = Job(
                    id=job.index + 1,
                    run_id=job.index + 1,
                    repo="trace",
                    name="job",
                    labels=job.labels,
                    status=JobStatus.IN_PROGRESS,
                    created_at=self.trace.start + timedelta(seconds=job.created),
                )
            out.append(job.domain_started)
        return out

    def running_instances(self) -> list[SimInstance]:
        return [i for pool in self.pools.values() for i in pool.live.values() if i.job]

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

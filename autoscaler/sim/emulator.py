"""The emulated world a policy is replayed against: Auto Scaling groups, runners, GitHub.

- **Pools** behave like EC2 Auto Scaling groups: raising the desired capacity starts a
  scaling activity that launches the missing instances, at most ``launches.per_activity``
  of them and no more than EC2's account-wide ``RunInstances`` token bucket holds; what
  is still missing waits for the group's next activity ``launches.retry`` later. In a
  capacity outage the raise is accepted, nothing launches and a ``Failed`` scaling
  activity is recorded (what real AWS does); once the outage ends the group launches what
  it still lacks. Terminating an instance decrements the desired capacity
  (``ShouldDecrementDesiredCapacity``).
- **Launch and boot**: an instance runs ``launch_time`` after its activity (pending, not
  billed), then registers its runner ``boot_time`` later; both lognormal, fitted to the
  configured p50/p95. Boots started in one 5-minute window share a factor
  (``boot_correlation``): a burst's boots are slow or fast together.
  Every policy sees the same sequence of boot draws per pool (one seeded stream per pool:
  common random numbers).
- **Warm pools** (only this project's driver puts them, :meth:`Emulator.set_warm_pool`):
  a group with one keeps ``MinSize`` stopped instances (or up to
  ``MaxGroupPreparedCapacity`` beside the desired capacity). A scale-out starts stopped
  ones first: a runner ``simulation.warm_start`` later, billed from the start, not
  throttled by the launch limits. The pool refills at cold speed (launch + boot, the
  same token bucket), billed as compute while it initialises; a stopped instance is
  billed for storage only (its own column). With ``reuse`` an idle instance scaled in
  goes back to the warm pool stopped instead of terminating.
- **GitHub** hands a queued job at once to an idle runner whose labels cover the job's (any
  of them: drawn with the seeded RNG), and a runner turning idle takes the oldest queued
  job it can run; one job per runner. With ``ephemeral`` a runner's instance terminates
  when its job ends.
- **Cost** is instance-seconds from running to termination, boot included (or to the end
  of the replay, the moment the last job completed), at least ``billing_minimum`` each.

Pure Python and deterministic: no I/O, no wall clock. The world's parts and what a
controller observes of it are in :mod:`autoscaler.sim.entities`.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from autoscaler.domain import WarmPoolSpec
from autoscaler.observe.queue import match_job
from autoscaler.sim.clock import VirtualClock
from autoscaler.sim.entities import (
    EmulatorView,
    IdleSet,
    Sample,
    SimInstance,
    SimJob,
    SimPool,
)
from autoscaler.sim.trace import Trace

#: The MaxSize assumed for a pool whose type has no ``max`` and whose simulated group
#: (``simulation.pools.<pool>.max_size``) names none.
DEFAULT_MAX_SIZE = 1000

if TYPE_CHECKING:
    from autoscaler.config import Config
    from autoscaler.config.simulation import TimePoint

#: Failed scaling activities kept per pool (what one DescribeScalingActivities page shows).
ACTIVITIES_KEPT = 20


class Emulator(EmulatorView):
    """Pools, runners and GitHub's job assignment under a virtual clock."""

    def __init__(self, config: Config, trace: Trace, *, sample_every: float = 60.0) -> None:
        sim = config.simulation
        self.config = config
        self.trace = trace
        self.clock = VirtualClock(trace.start)
        self.types = config.runner_types
        domain_types = [rt.runner_type for rt in self.types]
        self.type_labels = [rt.labels for rt in self.types]
        self.github_rng = random.Random(f"{sim.seed}:github")  # noqa: S311 (a simulation)
        self.pools: dict[str, SimPool] = {}
        self.pools_of: list[list[SimPool]] = [[] for _ in self.types]
        for t, rt in enumerate(self.types):
            for name in rt.pools:
                override = sim.pool(name)
                windows = [
                    (self._offset(o.start), self._offset(o.end))
                    for o in sim.outages
                    if o.pool == name
                ]
                pool = SimPool(
                    name,
                    t,
                    override.max_size or rt.max or DEFAULT_MAX_SIZE,
                    override.boot_time or sim.boot_time,
                    sim.launch_time,
                    sim.boot_correlation,
                    windows,
                    random.Random(f"{sim.seed}:boot:{name}"),  # noqa: S311
                    random.Random(f"{sim.seed}:launch:{name}"),  # noqa: S311
                    f"{sim.seed}:weather:{name}",
                    self.clock,
                    warm_start=sim.warm_start,
                    warm_rng=random.Random(f"{sim.seed}:warm:{name}"),  # noqa: S311
                )
                self.pools[name] = pool
                self.pools_of[t].append(pool)
        self.tokens = float(sim.launches.bucket)
        """EC2's RunInstances resource tokens left (refilled as time passes)."""
        self._tokens_at = 0.0
        # Distinct label sets: who can run them, and where the queue math counts them.
        keys: dict[frozenset[str], int] = {}
        self.covering: list[list[int]] = []
        self.jobs: list[SimJob] = []
        for index, tj in enumerate(trace.jobs):
            key = keys.get(tj.labels)
            if key is None:
                key = keys[tj.labels] = len(keys)
                self.covering.append(
                    [t for t, labels in enumerate(self.type_labels) if tj.labels <= labels]
                )
            home = match_job(tj.labels, domain_types)
            home_index = None if home is None else domain_types.index(home)
            self.jobs.append(SimJob(index, tj.created_at, tj.labels, tj.duration, key, home_index))
        self.serves: list[list[int]] = [
            [k for k, cover in enumerate(self.covering) if t in cover]
            for t in range(len(self.types))
        ]
        self.queued: list[deque[SimJob]] = [deque() for _ in self.covering]
        self.idle = [IdleSet() for _ in self.types]
        self.queued_home = [0] * len(self.types)
        self.running = [0] * len(self.types)
        self.live_count = [0] * len(self.types)
        self.runnable = [
            j for j in self.jobs if any(self.pools_of[t] for t in self.covering[j.key])
        ]
        self.completed = 0
        self.arrived = 0
        self.ephemeral = False
        """True: a runner's instance terminates when its job ends (one job per machine)."""
        self.instances: list[SimInstance] = []
        """Instances that went into service (launched, or started from a warm pool)."""
        self.warm_launched: list[SimInstance] = []
        """Instances launched into a warm pool (some later started: also in instances)."""
        self.samples: list[Sample] = []
        self.scale_actions = 0
        self.on_queued: list[Callable[[SimJob], None]] = []
        """Called when a job is created (a webhook's ``queued`` event)."""
        self.on_done: list[Callable[[SimJob, SimInstance], None]] = []
        """Called when a job completes (after an ephemeral runner's instance ended)."""
        self.on_idle: list[Callable[[SimInstance], None]] = []
        """Called when a runner turns idle with nothing queued for it."""
        self._next_runner = 1
        self._sample_every = sample_every

    # --- time
    def _offset(self, point: TimePoint) -> float:
        return self.trace.offset(point) if isinstance(point, datetime) else float(point)

    @property
    def now(self) -> float:
        return self.clock.now

    def run(self, drain: float = 7 * 86400.0) -> float:
        """Replay the trace until every job that can run completed (or ``drain`` seconds
        past the last job's creation); returns the end time."""
        self.start()
        target = len(self.runnable)
        self.clock.run(
            until=lambda: self.completed >= target and self.arrived == len(self.jobs),
            limit=self.trace.span + drain,
        )
        return self.clock.now

    def start(self) -> None:
        """Schedule the first arrival, the outages' ends and the sampling."""
        if self.jobs:
            self.clock.at(self.jobs[0].created, self._arrive, 0)
        for pool in self.pools.values():
            for _, end in pool.outages:
                self.clock.at(end, self._reconcile, pool)
        self.clock.at(0.0, self._sample)

    def _sample(self) -> None:
        oldest = min((q[0].created for q in self.queued if q), default=None)
        self.samples.append(
            Sample(
                self.now,
                sum(len(q) for q in self.queued),
                0.0 if oldest is None else self.now - oldest,
                sum(self.live_count),
                sum(self.running),
            )
        )
        self.clock.after(self._sample_every, self._sample)

    # --- GitHub
    def _arrive(self, index: int) -> None:
        job = self.jobs[index]
        self.arrived += 1
        if index + 1 < len(self.jobs):
            self.clock.at(self.jobs[index + 1].created, self._arrive, index + 1)
        if job.home is not None:
            self.queued_home[job.home] += 1
        idle = [self.idle[t] for t in self.covering[job.key] if self.idle[t]]
        if idle:
            pick = self.github_rng.randrange(sum(len(s) for s in idle))
            for s in idle:
                if pick < len(s):
                    inst = s.items[pick]
                    s.remove(inst)
                    self._start(inst, job)
                    break
                pick -= len(s)
        else:
            self.queued[job.key].append(job)
        for listener in self.on_queued:
            listener(job)

    def _start(self, inst: SimInstance, job: SimJob) -> None:
        job.started = self.now
        inst.job, inst.idle_since = job, None
        self.running[inst.pool.type_index] += 1
        if job.home is not None:
            self.queued_home[job.home] -= 1
        self.clock.after(job.duration, self._done, inst)

    def _done(self, inst: SimInstance) -> None:
        job = inst.job
        assert job is not None
        job.finished = self.now
        inst.busy_seconds += job.duration
        inst.job = None
        self.running[inst.pool.type_index] -= 1
        self.completed += 1
        if self.ephemeral:
            self.terminate(inst)
        else:
            self._idle(inst)
        for listener in self.on_done:
            listener(job, inst)

    def _idle(self, inst: SimInstance) -> None:
        """The runner is free: the oldest queued job it can run, else it waits."""
        best: deque[SimJob] | None = None
        for key in self.serves[inst.pool.type_index]:
            q = self.queued[key]
            if q and (best is None or q[0].created < best[0].created):
                best = q
        if best is not None:
            self._start(inst, best.popleft())
            return
        inst.idle_since = self.now
        self.idle[inst.pool.type_index].add(inst)
        for listener in self.on_idle:
            listener(inst)

    def _ready(self, inst: SimInstance) -> None:
        if inst.terminated is not None:
            return
        inst.ready = self.now
        inst.described = None
        inst.runner_id = self._next_runner
        self._next_runner += 1
        self._idle(inst)

    # --- the cloud
    def set_desired(self, pool: SimPool, desired: int) -> None:
        """SetDesiredCapacity (clamped to MaxSize, as our adapter and AWS require)."""
        desired = max(0, min(desired, pool.max_size))
        if desired > pool.desired and pool.in_outage(self.now):
            pool.failed.insert(0, self.clock.datetime())
            del pool.failed[ACTIVITIES_KEPT:]
        pool.desired = desired
        self._reconcile(pool)

    def _take_tokens(self, want: int) -> int:
        launches = self.config.simulation.launches
        self.tokens = min(
            float(launches.bucket), self.tokens + (self.now - self._tokens_at) * launches.refill
        )
        self._tokens_at = self.now
        granted = min(want, int(self.tokens))
        self.tokens -= granted
        return granted

    def _reconcile(self, pool: SimPool) -> None:
        """One scaling activity: start stopped warm instances, then launch what the group
        still lacks, as far as the throttles let; then refill the warm pool."""
        if pool.in_outage(self.now):
            return
        missing = pool.desired - len(pool.live)
        while missing > 0 and pool.stopped:
            self._warm_start(pool.stopped.pop(0))
            missing -= 1
        if pool.warm_spec is not None or pool.stopped or pool.warming:
            self._refill(pool)
        if missing <= 0:
            return
        launches = self.config.simulation.launches
        if self.now >= pool.next_activity:
            count = self._take_tokens(min(missing, launches.per_activity))
            if count > 0:
                pool.next_activity = self.now + launches.retry
                for _ in range(count):
                    self._launch(pool)
            missing -= count
        if missing > 0 and not pool.retry_pending:
            pool.retry_pending = True
            self.clock.at(max(pool.next_activity, self.now + launches.retry), self._retry, pool)

    def _retry(self, pool: SimPool) -> None:
        pool.retry_pending = False
        self._reconcile(pool)

    def _launch(self, pool: SimPool) -> None:
        pool.launched += 1
        number = len(self.instances) + len(self.warm_launched) + 1
        latency, boot = pool.cold_start()
        inst = SimInstance(f"i-{number:017x}", pool, self.now, self.now + latency, boot)
        inst.launched_at = self.clock.datetime()
        pool.live[inst.id] = inst
        self.live_count[pool.type_index] += 1
        inst.counted = True
        self.instances.append(inst)
        self.clock.at(inst.running, self._running, inst)
        self.clock.at(inst.running + boot, self._ready, inst)

    # --- warm pools
    def set_warm_pool(self, pool: SimPool, spec: WarmPoolSpec | None) -> None:
        """PutWarmPool (``spec``) or DeleteWarmPool (None)."""
        if spec == pool.warm_spec:
            return
        pool.warm_spec = spec
        self._refill(pool)

    def _refill(self, pool: SimPool) -> None:
        """Make the warm pool hold its target: stopped instances beyond it terminated
        (newest first), missing ones launched at cold speed (the token bucket's)."""
        target = pool.warm_target()
        while len(pool.stopped) + len(pool.warming) > target and pool.stopped:
            inst = pool.stopped.pop()
            inst.stored = inst.stored_until(self.now)
            inst.stopped_at, inst.terminated = None, self.now
        want = target - len(pool.stopped) - len(pool.warming)
        if want <= 0 or pool.in_outage(self.now):
            return
        count = self._take_tokens(want)
        for _ in range(count):
            latency, boot = pool.cold_start()
            number = len(self.instances) + len(self.warm_launched) + 1
            inst = SimInstance(f"i-{number:017x}", pool, self.now, self.now + latency, boot)
            pool.warming[inst.id] = inst
            self.warm_launched.append(inst)
            self.clock.at(inst.running + boot, self._prepared, inst)
        if count < want and not pool.refill_pending:
            pool.refill_pending = True
            self.clock.after(self.config.simulation.launches.retry, self._refill_again, pool)

    def _refill_again(self, pool: SimPool) -> None:
        pool.refill_pending = False
        self._refill(pool)

    def _prepared(self, inst: SimInstance) -> None:
        """A warm instance finished its initialisation: it stops and waits."""
        pool = inst.pool
        del pool.warming[inst.id]
        minimum = self.config.simulation.billing_minimum
        inst.prior_compute = max(minimum, self.now - inst.running)
        inst.prior_boot = self.now - inst.running
        inst.stopped_at, inst.parked = self.now, True
        pool.stopped.append(inst)
        self._refill(pool)

    def _warm_start(self, inst: SimInstance) -> None:
        """The group moves a stopped instance into service: it starts again."""
        pool = inst.pool
        inst.stored = inst.stored_until(self.now)
        inst.stopped_at, inst.parked = None, False
        inst.warm_started = True
        inst.launched = inst.running = self.now
        inst.boot = pool.warm_draw()
        inst.launched_at = self.clock.datetime()
        inst.described = None
        pool.launched += 1
        pool.live[inst.id] = inst
        self.live_count[pool.type_index] += 1
        if not inst.counted:
            inst.counted = True
            self.instances.append(inst)
        self.clock.at(self.now + inst.boot, self._ready, inst)

    def _running(self, inst: SimInstance) -> None:
        inst.described = None  # InService from now on

    def terminate(self, inst: SimInstance) -> None:
        """TerminateInstanceInAutoScalingGroup, decrementing the desired capacity. A policy
        never terminates a busy runner here (a bug if it does)."""
        if inst.terminated is not None:
            return
        if inst.job is not None:
            raise RuntimeError(f"policy terminated busy instance {inst.id}")
        pool = inst.pool
        if inst.idle_pos >= 0:
            self.idle[pool.type_index].remove(inst)
        del pool.live[inst.id]
        self.live_count[pool.type_index] -= 1
        pool.desired = max(0, pool.desired - 1)
        spec = pool.warm_spec
        if spec is not None and spec.reuse and inst.ready is not None:
            self._stop(inst)
        else:
            inst.terminated = self.now
        if spec is not None:
            self._refill(pool)

    def _stop(self, inst: SimInstance) -> None:
        """Reuse on scale-in: the instance goes back to the warm pool, stopped; its runner
        registers again when it next starts."""
        minimum = self.config.simulation.billing_minimum
        inst.prior_compute += max(minimum, self.now - inst.running)
        inst.prior_boot += min(inst.boot, self.now - inst.running)
        inst.ready = inst.idle_since = inst.described = None
        inst.runners = {}
        inst.stopped_at, inst.parked = self.now, True
        inst.pool.stopped.append(inst)

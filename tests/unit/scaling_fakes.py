"""Builders and hand-written fakes of RunnerPool and JobSource for the scaling tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from autoscaler.config import (
    BudgetConfig,
    Config,
    GitHubConfig,
    RunnerTypeConfig,
    ScalingConfig,
)
from autoscaler.config.schedule import MinIdle
from autoscaler.domain import (
    ActivityStatus,
    Instance,
    InstanceLifecycle,
    Observation,
    PoolState,
    QueueSnapshot,
    QueueStats,
    Runner,
    RunnerCounts,
    ScalingActivity,
)
from autoscaler.errors import AutoscalerError, NotFoundError, RejectedError

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
GPU, CPU = "linux.g5.4xlarge.nvidia.gpu", "linux.4xlarge"


def rtype(
    name: str = GPU,
    pools: Sequence[str] = ("gpu-spot", "gpu-od"),
    *,
    min_idle: int | MinIdle = 0,
    max: int | None = None,
    priority: int = 0,
    idle_timeout: float = 600.0,
    boot_timeout: float = 900.0,
) -> RunnerTypeConfig:
    return RunnerTypeConfig(
        name=name,
        labels=frozenset({"self-hosted", name}),
        pools=tuple(pools),
        min_idle=MinIdle(default=min_idle) if isinstance(min_idle, int) else min_idle,
        max=max,
        priority=priority,
        idle_timeout=idle_timeout,
        boot_timeout=boot_timeout,
    )


def config(
    *types: RunnerTypeConfig,
    budgets: Sequence[BudgetConfig] = (),
    scaling: ScalingConfig | None = None,
) -> Config:
    return Config(
        github=GitHubConfig(owner="demo-org"),
        runner_types=types or (rtype(),),
        budgets=tuple(budgets),
        scaling=scaling or ScalingConfig(),
    )


def iid(n: int) -> str:
    return f"i-{n:017x}"


def inst(
    n: int,
    pool: str,
    *,
    age: float = 3600.0,
    lifecycle: InstanceLifecycle = InstanceLifecycle.IN_SERVICE,
    protected: bool = True,
    now: datetime = T0,
) -> Instance:
    return Instance(iid(n), pool, lifecycle, now - timedelta(seconds=age), protected)


def pool(
    name: str, instances: Sequence[Instance] = (), *, max_size: int = 10, desired: int | None = None
) -> PoolState:
    live = sum(1 for i in instances if i.lifecycle is not InstanceLifecycle.TERMINATING)
    return PoolState(name, 0, max_size, live if desired is None else desired, tuple(instances))


def runner(
    n: int, pool_name: str, *, busy: bool = False, online: bool = True, rid: int = 0
) -> Runner:
    return Runner(rid or n, f"{pool_name}-{iid(n)}", frozenset(), online, busy)


def snapshot(
    queued: dict[str, int] | None = None,
    *,
    oldest: dict[str, datetime] | None = None,
    at: datetime = T0,
) -> QueueSnapshot:
    per = {
        name: QueueStats(name, n, 0.0, RunnerCounts(), oldest_queued_at=(oldest or {}).get(name))
        for name, n in (queued or {}).items()
    }
    return QueueSnapshot(at, per, 0, 0)


def observation(runners: Sequence[Runner], at: datetime = T0) -> Observation:
    return Observation(at, (), tuple(runners))


@dataclass
class FakePool:
    """An in-memory RunnerPool. Refuses (like AWS) a desired capacity past MaxSize.

    A pool in ``outage`` fails like real AWS: a raise of its desired capacity succeeds,
    launches nothing, and adds a Failed scaling activity (dated ``now``) that ``describe``
    reports while the pool is short of its desired capacity. A pool in ``refusal`` fails the
    same way for a reason a person must fix: its activity carries (code, message) and is
    classified permanent, as the AWS adapter classifies AWS's StatusMessage.
    """

    pools: dict[str, PoolState]
    errors: dict[tuple[str, str], list[AutoscalerError]] = field(default_factory=dict)
    outage: set[str] = field(default_factory=set)
    refusal: dict[str, tuple[str, str]] = field(default_factory=dict)
    activities: dict[str, list[ScalingActivity]] = field(default_factory=dict)
    outage_message: str = "We currently do not have sufficient capacity in the zone requested."
    """The StatusMessage of the Failed activities an outage adds (AWS's words; no code
    found in it: a capacity failure, as the adapter classifies an unknown one)."""
    calls: list[tuple[str, str, object]] = field(default_factory=list)
    next_id: int = 1000
    now: datetime = T0
    skew: float | None = None
    """What :meth:`clock_skew` reports: the cloud's clock minus ours."""

    def clock_skew(self) -> float | None:
        return self.skew

    def fail(self, op: str, pool: str, *errors: AutoscalerError) -> None:
        self.errors.setdefault((op, pool), []).extend(errors)

    def _maybe_fail(self, op: str, pool: str) -> None:
        queue = self.errors.get((op, pool)) or self.errors.get((op, "*"))
        if queue:
            raise queue.pop(0)

    def describe(self, names: Sequence[str]) -> dict[str, PoolState]:
        self.calls.append(("describe", "", tuple(names)))
        self._maybe_fail("describe", "*")
        out = {n: self.pools[n] for n in names if n in self.pools}
        for n, p in out.items():
            if p.desired_capacity > p.live_instances:
                out[n] = replace(p, activities=tuple(self.activities.get(n, ())))
        return out

    def set_desired_capacity(self, pool: str, desired: int) -> None:
        self.calls.append(("set_desired_capacity", pool, desired))
        self._maybe_fail("set_desired_capacity", pool)
        p = self.pools[pool]
        if not p.min_size <= desired <= p.max_size:
            raise AssertionError(f"{pool}: desired {desired} outside [{p.min_size}, {p.max_size}]")
        instances = list(p.instances)
        if pool in self.outage or pool in self.refusal:
            if desired > p.live_instances:
                code, message = self.refusal.get(pool, ("", self.outage_message))
                failed = ScalingActivity(
                    self.now, ActivityStatus.FAILED, message, code, permanent=bool(code)
                )
                self.activities.setdefault(pool, []).insert(0, failed)
            self.pools[pool] = replace(p, desired_capacity=desired)
            return
        while len(instances) < desired:
            self.next_id += 1
            instances.append(inst(self.next_id, pool, age=0, now=self.now))
        self.pools[pool] = PoolState(pool, p.min_size, p.max_size, desired, tuple(instances))

    def protect_instances(self, pool: str, instance_ids: Sequence[str]) -> None:
        self.calls.append(("protect_instances", pool, tuple(instance_ids)))
        self._maybe_fail("protect_instances", pool)

    def terminate_instance(self, pool: str, instance_id: str) -> None:
        self.calls.append(("terminate_instance", pool, instance_id))
        self._maybe_fail("terminate_instance", pool)
        p = self.pools[pool]
        kept = tuple(i for i in p.instances if i.id != instance_id)
        assert len(kept) == len(p.instances) - 1, f"{instance_id} not in {pool}"
        self.pools[pool] = PoolState(pool, p.min_size, p.max_size, p.desired_capacity - 1, kept)


@dataclass
class FakeSource:
    """An in-memory JobSource, GitHub's rules: remove_runner refuses a busy runner (422)
    and one it does not know (404); find_runner answers by exact name."""

    runners: dict[int, Runner] = field(default_factory=dict)
    removed: list[int] = field(default_factory=list)
    errors: list[AutoscalerError] = field(default_factory=list)
    lookups: list[str] = field(default_factory=list)
    lookup_errors: list[AutoscalerError] = field(default_factory=list)

    def observe(self, now: datetime) -> Observation:
        return Observation(now, (), tuple(self.runners.values()))

    def remove_runner(self, runner_id: int) -> None:
        if self.errors:
            raise self.errors.pop(0)
        r = self.runners.get(runner_id)
        if r is None:
            raise NotFoundError("no such runner", code="404")
        if r.busy:
            raise RejectedError("runner is busy", code="422")
        del self.runners[runner_id]
        self.removed.append(runner_id)

    def find_runner(self, name: str) -> Runner | None:
        self.lookups.append(name)
        if self.lookup_errors:
            raise self.lookup_errors.pop(0)
        return next((r for r in self.runners.values() if r.name == name), None)

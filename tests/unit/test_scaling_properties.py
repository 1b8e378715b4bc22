"""Properties over random interleavings of arrivals, completions, runner changes and ticks.

- no busy runner is ever terminated (not even one that turned busy between the
  observation and the removal: GitHub refuses that removal with a 422; nor one whose
  instance looked like an orphan at the poll because its runner registered right after
  the poll and took a job before the scaler acted);
- no pool ever leaves [MinSize, MaxSize], no type exceeds its ``max``, no budget is overrun.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from autoscaler.config import BudgetConfig
from autoscaler.domain import InstanceLifecycle, Observation, Runner
from autoscaler.errors import RejectedError
from autoscaler.scale.scaler import Scaler
from autoscaler.telemetry import Metrics
from tests.unit.handover_fakes import handover_ports
from tests.unit.scaling_fakes import T0, FakePool, config, observation, pool, rtype, snapshot

GPU, CPU = "x.gpu", "x.cpu"
CFG = config(
    rtype(GPU, ("gpu-spot", "gpu-od"), max=6, priority=10, idle_timeout=300, boot_timeout=600),
    rtype(CPU, ("cpu",), min_idle=1, idle_timeout=300, boot_timeout=600),
    budgets=[BudgetConfig(name="all", max_instances=8, runner_types=("*",))],
)
POOL_OF = {"gpu-spot": GPU, "gpu-od": GPU, "cpu": CPU}


@dataclass
class World:
    """The cloud and GitHub at once; terminating an instance checks its runner."""

    pools: FakePool
    runners: dict[int, Runner] = field(default_factory=dict)
    queued: dict[str, int] = field(default_factory=lambda: {GPU: 0, CPU: 0})
    race: bool = False  # an idle runner picks a job just as we try to remove it
    violations: list[str] = field(default_factory=list)

    def runner_of(self, instance_id: str) -> Runner | None:
        return next((r for r in self.runners.values() if r.name.endswith(instance_id)), None)

    def pick(self, r: Runner) -> Runner:
        """An idle online runner picks a queued job of its type, if any."""
        t = POOL_OF[r.name.rsplit("-i-", 1)[0]]
        if r.online and not r.busy and self.queued[t] > 0:
            self.queued[t] -= 1
            r = self.runners[r.id] = replace(r, busy=True)
        return r

    # JobSource
    def observe(self, now: datetime) -> Observation:
        return observation(tuple(self.runners.values()), now)

    def find_runner(self, name: str) -> Runner | None:
        return next((r for r in self.runners.values() if r.name == name), None)

    def remove_runner(self, runner_id: int) -> None:
        r = self.runners[runner_id]
        if self.race:
            r = self.pick(r)
        if r.busy:
            raise RejectedError("runner is busy", code="422")
        del self.runners[runner_id]


class GuardedPool(FakePool):
    world: World

    def terminate_instance(self, pool: str, instance_id: str) -> None:
        r = self.world.runner_of(instance_id)
        if r is not None and self.world.race:  # a still-registered runner may pick a job now
            self.world.pick(r)
            r = self.world.runners[r.id]
        if r is not None and r.busy:
            self.world.violations.append(f"terminated busy runner {r.name}")
        super().terminate_instance(pool, instance_id)
        if r is not None:  # the machine is gone: its runner goes offline
            self.world.runners[r.id] = replace(r, online=False, busy=False)


OPS = st.one_of(
    st.tuples(st.just("arrive"), st.sampled_from([GPU, CPU]), st.integers(1, 5)),
    st.tuples(st.just("boot"), st.integers(0, 10)),
    st.tuples(st.just("pick"), st.integers(0, 10)),
    st.tuples(st.just("finish"), st.integers(0, 10)),
    st.tuples(st.just("offline"), st.integers(0, 10)),
    st.tuples(st.just("race"), st.booleans()),
)
# What can happen between the poll and the scaler acting on it: runners register (an
# instance the poll saw without a runner) and take jobs.
LATE = st.one_of(
    st.tuples(st.just("boot"), st.integers(0, 10)),
    st.tuples(st.just("pick"), st.integers(0, 10)),
)
# A round: some changes in the world, the poll after dt seconds (fresh or stale data), then
# the late changes, then the scaler acts on the poll's picture.
Round = tuple[list[tuple[object, ...]], int, bool, list[tuple[object, ...]]]
ROUNDS = st.lists(
    st.tuples(
        st.lists(OPS, max_size=6), st.integers(0, 700), st.booleans(), st.lists(LATE, max_size=2)
    ),
    min_size=2,
    max_size=25,
)
# Pinned: GPU jobs arrive and two instances launch; 601 s later (past
# boot_timeout) the poll sees no runner for them, then both register and take the jobs;
# the scaler then judged them orphans from the poll's list and terminated them mid-job.
REGISTERED_AFTER_THE_POLL: list[Round] = [
    ([("arrive", GPU, 2)], 0, True, []),
    ([], 601, True, [("boot", 10), ("pick", 10)]),
]


def apply(world: World, op: tuple[object, ...], next_id: list[int]) -> None:
    kind = op[0]
    runners = sorted(world.runners.values(), key=lambda r: r.id)
    if kind == "race":
        world.race = bool(op[1])
    elif kind == "arrive":
        world.queued[str(op[1])] += int(str(op[2]))
    elif kind == "boot":  # up to n booted instances without a runner register
        registered = {r.name for r in runners}
        todo = int(str(op[1]))
        for p in world.pools.pools.values():
            for i in p.instances:
                name = f"{p.name}-{i.id}"
                if (
                    todo > 0
                    and i.lifecycle is InstanceLifecycle.IN_SERVICE
                    and name not in registered
                ):
                    next_id[0] += 1
                    world.runners[next_id[0]] = Runner(next_id[0], name, frozenset(), True, False)
                    todo -= 1
    else:  # pick / finish / offline: the first n runners (from a rotating start) that can
        n = int(str(op[1]))
        start = n % len(runners) if runners else 0
        for r in (runners[start:] + runners[:start])[: max(n, 1) * 2]:
            t = POOL_OF[r.name.rsplit("-i-", 1)[0]]
            if kind == "pick" and r.online and not r.busy and world.queued[t] > 0:
                world.queued[t] -= 1
                world.runners[r.id] = replace(r, busy=True)
            elif kind == "finish" and r.busy:
                world.runners[r.id] = replace(r, busy=False)
            elif kind == "offline" and not r.busy and n % 3 == 0:
                world.runners[r.id] = replace(r, online=False)
                break


def check_bounds(world: World) -> None:
    pools = world.pools.pools
    for p in pools.values():
        assert p.min_size <= p.desired_capacity <= p.max_size, p
    for rt in CFG.runner_types:
        live = sum(pools[n].live_instances for n in rt.pools)
        assert rt.max is None or live <= rt.max, (rt.name, live)
    assert sum(p.live_instances for p in pools.values()) <= 8


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ROUNDS)
@example(REGISTERED_AFTER_THE_POLL)
def test_never_terminates_a_busy_runner_and_never_exceeds_bounds(rounds: list[Round]) -> None:
    fake = GuardedPool(
        {
            "gpu-spot": pool("gpu-spot", max_size=3),
            "gpu-od": pool("gpu-od", max_size=5),
            "cpu": pool("cpu", max_size=4),
        }
    )
    world = World(fake)
    fake.world = world
    # Time moves only by the scaler's own waits: with the real monotonic clock a retry's
    # deadline depended on how fast the machine ran the example (not reproducible).
    clock = [0.0]
    scaler = Scaler(
        fake,
        world,
        CFG,
        Metrics(CollectorRegistry()),
        sleep=lambda seconds: clock.__setitem__(0, clock[0] + seconds),
        monotonic=lambda: clock[0],
        rng=random.Random(0),
        **handover_ports(world),
    )
    now, next_id = T0, [0]
    for ops, dt, fresh, late in rounds:
        for op in ops:
            apply(world, op, next_id)
        now += timedelta(seconds=dt)
        fake.now = now
        obs = world.observe(now)
        snap = snapshot(dict(world.queued), at=now)
        for op in late:  # after the poll, before the scaler acts
            apply(world, op, next_id)
        scaler.step(snap, obs, now, observation_fresh=fresh)
        check_bounds(world)
        assert world.violations == []

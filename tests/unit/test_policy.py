"""The pure scaling policy, as tables: each row a situation and the plan it must produce."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import pytest

from autoscaler.config import BudgetConfig, Config, ScalingConfig
from autoscaler.config.schedule import IdleWindow, MinIdle
from autoscaler.domain import InstanceLifecycle, PoolState, QueueSnapshot, Runner
from autoscaler.scale.plan import PendingTermination, Plan, ScalingState
from autoscaler.scale.policy import decide, pool_of_runner, runners_by_pool
from tests.unit.scaling_fakes import CPU, GPU, T0, config, iid, inst, pool, rtype, runner, snapshot

PENDING = InstanceLifecycle.PENDING
GPU_POOLS = ("gpu-spot", "gpu-od")


@dataclass
class Case:
    cfg: Config
    pools: Sequence[PoolState]
    queued: dict[str, int] = field(default_factory=dict)
    runners: Sequence[Runner] = ()
    state: ScalingState = field(default_factory=ScalingState)
    fresh: bool = True
    oldest: dict[str, datetime] = field(default_factory=dict)


def summary(plan: Plan) -> dict[str, object]:
    """The parts of a plan a row asserts on; empty parts are left out."""
    out: dict[str, object] = {}
    ups = {d.pool: d.desired for d in plan.decisions if d.action == "scale_up"}
    if ups:
        out["up"] = ups
    if plan.scale_ins:
        out["in"] = [(s.pool, s.runner_id, s.instance_id) for s in plan.scale_ins]
    if plan.orphans:
        out["orphans"] = [o.instance_id for o in plan.orphans]
    if plan.stale_runners:
        out["stale"] = [s.runner_id for s in plan.stale_runners]
    if plan.out_of_capacity:
        out["out_of_capacity"] = list(plan.out_of_capacity)
    return out


def run(case: Case) -> Plan:
    pools: Mapping[str, PoolState] = {p.name: p for p in case.pools}
    snap: QueueSnapshot = snapshot(case.queued, oldest=case.oldest)
    return decide(snap, case.runners, pools, case.cfg, case.state, T0, observation_fresh=case.fresh)


def idle_for(seconds: float, *ids: int) -> ScalingState:
    return ScalingState(idle_since={i: T0 - timedelta(seconds=seconds) for i in ids})


def watched(state: ScalingState, per_minute: int = 0, burst: int = 0) -> ScalingState:
    """``state`` after an hour of watching GPU arrivals: ``per_minute`` every minute of the
    15-minute window, and one ``burst`` two minutes ago."""
    arrivals = [(T0 - timedelta(seconds=60 * k + 1), per_minute) for k in range(15)]
    arrivals.append((T0 - timedelta(seconds=121), burst))
    return replace(
        state, watching_since=T0 - timedelta(hours=1), arrivals={GPU: tuple(sorted(arrivals))}
    )


TWO_GPU = (pool("gpu-spot"), pool("gpu-od"))


def busy_gpu(n: int) -> tuple[list[PoolState], list[Runner]]:
    instances = [inst(i, "gpu-spot") for i in range(1, n + 1)]
    return [pool("gpu-spot", instances), pool("gpu-od")], [
        runner(i, "gpu-spot", busy=True) for i in range(1, n + 1)
    ]


BUSY2_POOLS, BUSY2_RUNNERS = busy_gpu(2)

DEMAND = [
    pytest.param(
        Case(config(), TWO_GPU, {GPU: 3}),
        {"up": {"gpu-spot": 3}},
        id="queued-jobs-scale-up-first-pool",
    ),
    pytest.param(
        Case(config(rtype(min_idle=1)), BUSY2_POOLS, {GPU: 1}, BUSY2_RUNNERS),
        {"up": {"gpu-spot": 4}},
        id="demand-is-queued-plus-busy-plus-min-idle",
    ),
    pytest.param(
        Case(
            config(),
            [
                pool(
                    "gpu-spot",
                    [
                        inst(1, "gpu-spot", lifecycle=PENDING, age=10),
                        inst(2, "gpu-spot", lifecycle=PENDING, age=10),
                    ],
                ),
                pool("gpu-od"),
            ],
            {GPU: 2},
        ),
        {},
        id="booting-instances-count-as-supply",
    ),
    pytest.param(
        Case(
            config(),
            [
                pool("gpu-spot", [inst(1, "gpu-spot", lifecycle=InstanceLifecycle.TERMINATING)]),
                pool("gpu-od"),
            ],
            {GPU: 1},
        ),
        {"up": {"gpu-spot": 1}},
        id="terminating-instances-are-not-supply",
    ),
    pytest.param(Case(config(), TWO_GPU, {}), {}, id="no-demand-holds"),
    pytest.param(
        Case(config(), [pool("gpu-spot", desired=4), pool("gpu-od")], {GPU: 3}),
        {},
        id="group-already-raised-is-not-raised-again",
    ),
]

CLAMPS = [
    pytest.param(
        Case(config(rtype(max=5)), TWO_GPU, {GPU: 12}), {"up": {"gpu-spot": 5}}, id="type-max"
    ),
    pytest.param(
        Case(config(), [pool("gpu-spot", max_size=3), pool("gpu-od")], {GPU: 5}),
        {"up": {"gpu-spot": 3, "gpu-od": 2}},
        id="pool-maxsize-spills-into-next-pool",
    ),
    pytest.param(
        Case(config(), [pool("gpu-spot", max_size=2), pool("gpu-od", max_size=2)], {GPU: 9}),
        {"up": {"gpu-spot": 2, "gpu-od": 2}},
        id="every-pool-at-maxsize",
    ),
    pytest.param(
        Case(
            config(),
            TWO_GPU,
            {GPU: 3},
            state=ScalingState(backoff_until={"gpu-spot": T0 + timedelta(seconds=60)}),
        ),
        {"up": {"gpu-od": 3}},
        id="pool-in-capacity-backoff-is-skipped",
    ),
    pytest.param(
        Case(
            config(),
            TWO_GPU,
            {GPU: 3},
            state=ScalingState(backoff_until={"gpu-spot": T0 - timedelta(seconds=1)}),
        ),
        {"up": {"gpu-spot": 3}},
        id="expired-backoff-is-tried-again",
    ),
    pytest.param(
        Case(
            config(),
            TWO_GPU,
            {GPU: 3},
            state=ScalingState(backoff_until={p: T0 + timedelta(seconds=60) for p in GPU_POOLS}),
        ),
        {"out_of_capacity": [GPU]},
        id="every-pool-in-backoff-is-out-of-capacity",
    ),
    # A retry is not a recovery: gpu-spot's back-off ended and it is tried again, but
    # neither pool has delivered since it failed, so the type is still out of capacity
    # (the page stays one incident across the retries that fail).
    pytest.param(
        Case(
            config(),
            TWO_GPU,
            {GPU: 3},
            state=ScalingState(
                backoff_until={
                    "gpu-spot": T0 - timedelta(seconds=1),
                    "gpu-od": T0 + timedelta(seconds=60),
                },
                backoff_seconds={"gpu-spot": 1800.0, "gpu-od": 1800.0},
            ),
        ),
        {"up": {"gpu-spot": 3}, "out_of_capacity": [GPU]},
        id="a-pool-retried-after-its-backoff-is-still-out",
    ),
]

GPU_A, GPU_B = "a.gpu", "b.gpu"
TWO_TYPES = (rtype(GPU_A, ["a-pool"], priority=10), rtype(GPU_B, ["b-pool"], priority=1))
GPU_BUDGET = [BudgetConfig(name="gpus", max_instances=4, runner_types=("*gpu*",))]
BUDGETS = [
    pytest.param(
        Case(
            config(*TWO_TYPES, budgets=GPU_BUDGET),
            [pool("a-pool"), pool("b-pool")],
            {GPU_A: 3, GPU_B: 3},
        ),
        {"up": {"a-pool": 3, "b-pool": 1}},
        id="budget-goes-by-priority",
    ),
    pytest.param(
        Case(
            config(rtype(GPU_A, ["a-pool"]), rtype(GPU_B, ["b-pool"]), budgets=GPU_BUDGET),
            [pool("a-pool"), pool("b-pool")],
            {GPU_A: 3, GPU_B: 3},
            oldest={GPU_A: T0 - timedelta(minutes=5), GPU_B: T0 - timedelta(minutes=50)},
        ),
        {"up": {"b-pool": 3, "a-pool": 1}},
        id="same-priority-oldest-queued-job-first",
    ),
    pytest.param(
        Case(
            config(*TWO_TYPES, budgets=GPU_BUDGET),
            [pool("a-pool"), pool("b-pool", [inst(i, "b-pool") for i in range(1, 4)])],
            {GPU_A: 3},
            [runner(i, "b-pool", busy=True) for i in range(1, 4)],
        ),
        {"up": {"a-pool": 1}},
        id="budget-counts-what-lower-priority-already-holds",
    ),
    pytest.param(
        Case(
            config(rtype(CPU, ["cpu"]), *TWO_TYPES, budgets=GPU_BUDGET),
            [pool("cpu"), pool("a-pool"), pool("b-pool")],
            {CPU: 6, GPU_A: 6},
        ),
        {"up": {"cpu": 6, "a-pool": 4}},
        id="budget-covers-only-matching-types",
    ),
]

IDLE_POOLS = [pool("gpu-spot", [inst(1, "gpu-spot"), inst(2, "gpu-spot")]), pool("gpu-od")]
IDLE_RUNNERS = [runner(1, "gpu-spot"), runner(2, "gpu-spot")]
STALE_AND_IDLE = [
    pytest.param(
        Case(config(), TWO_GPU, {GPU: 5}, fresh=False), {}, id="stale-observation-never-scales-up"
    ),
    pytest.param(
        Case(config(), IDLE_POOLS, {}, IDLE_RUNNERS, idle_for(3600, 1, 2), fresh=False),
        {},
        id="stale-observation-never-scales-down",
    ),
    pytest.param(
        Case(config(), IDLE_POOLS, {}, IDLE_RUNNERS, idle_for(601, 1, 2)),
        {"in": [("gpu-spot", 1, iid(1)), ("gpu-spot", 2, iid(2))]},
        id="idle-past-timeout-scaled-in",
    ),
    pytest.param(
        Case(config(), IDLE_POOLS, {}, IDLE_RUNNERS, idle_for(600, 1, 2)),
        {"in": [("gpu-spot", 1, iid(1)), ("gpu-spot", 2, iid(2))]},
        id="idle-for-exactly-the-timeout-scaled-in",
    ),
    pytest.param(
        Case(config(), IDLE_POOLS, {}, IDLE_RUNNERS, idle_for(599, 1, 2)),
        {},
        id="idle-not-yet-timed-out",
    ),
    pytest.param(
        Case(config(), IDLE_POOLS, {}, IDLE_RUNNERS), {}, id="first-seen-idle-starts-the-clock"
    ),
    pytest.param(
        Case(config(rtype(min_idle=1)), IDLE_POOLS, {}, IDLE_RUNNERS, idle_for(601, 1, 2)),
        {"in": [("gpu-spot", 1, iid(1))]},
        id="min-idle-stays-warm",
    ),
    pytest.param(
        Case(config(), IDLE_POOLS, {}, IDLE_RUNNERS, watched(idle_for(60, 1, 2))),
        {"in": [("gpu-spot", 1, iid(1)), ("gpu-spot", 2, iid(2))]},
        id="watched-no-arrivals-idle-go-before-the-timeout",
    ),
    pytest.param(
        Case(config(), IDLE_POOLS, {}, IDLE_RUNNERS, watched(idle_for(60, 1, 2), per_minute=10)),
        {},
        id="expected-arrivals-keep-idle-runners",
    ),
    pytest.param(
        Case(
            config(rtype(idle_timeout=120)),
            IDLE_POOLS,
            {},
            IDLE_RUNNERS,
            watched(idle_for(60, 1, 2), per_minute=1),
        ),
        {"in": [("gpu-spot", 1, iid(1))]},
        id="one-arrival-a-minute-keeps-one-of-two",
    ),
    pytest.param(
        Case(config(), IDLE_POOLS, {}, IDLE_RUNNERS, watched(idle_for(60, 1, 2), burst=300)),
        {"in": [("gpu-spot", 1, iid(1)), ("gpu-spot", 2, iid(2))]},
        id="a-burst-is-not-a-rate",
    ),
    pytest.param(
        Case(config(), IDLE_POOLS, {GPU: 2}, IDLE_RUNNERS, idle_for(601, 1, 2)),
        {},
        id="queued-jobs-keep-idle-runners",
    ),
    pytest.param(
        Case(
            config(),
            IDLE_POOLS,
            {},
            [runner(1, "gpu-spot", busy=True), runner(2, "gpu-spot")],
            idle_for(601, 1, 2),
        ),
        {"in": [("gpu-spot", 2, iid(2))]},
        id="busy-runner-never-scaled-in",
    ),
    pytest.param(
        Case(
            config(scaling=ScalingConfig(enabled=False)),
            IDLE_POOLS,
            {GPU: 9},
            IDLE_RUNNERS,
            idle_for(601, 1, 2),
        ),
        {},
        id="scaling-disabled-holds",
    ),
]

ORPHANS = [
    pytest.param(
        Case(
            config(), [pool("gpu-spot", [inst(1, "gpu-spot", age=901)]), pool("gpu-od")], {GPU: 1}
        ),
        {"orphans": [iid(1)]},
        id="unregistered-after-boot-timeout-is-orphan",
    ),
    pytest.param(
        Case(config(), [pool("gpu-spot", [inst(1, "gpu-spot", age=60)]), pool("gpu-od")], {GPU: 1}),
        {},
        id="still-booting-is-not-orphan",
    ),
    pytest.param(
        Case(
            config(),
            [pool("gpu-spot", [inst(1, "gpu-spot", age=5000)]), pool("gpu-od")],
            {},
            [runner(1, "gpu-spot", busy=True)],
        ),
        {},
        id="registered-instance-is-not-orphan",
    ),
    pytest.param(
        Case(config(), TWO_GPU, {}, [runner(7, "gpu-spot", online=False)]),
        {"stale": [7]},
        id="offline-runner-without-instance-deregistered",
    ),
    pytest.param(
        Case(
            config(),
            [pool("gpu-spot", [inst(7, "gpu-spot")]), pool("gpu-od")],
            {},
            [runner(7, "gpu-spot", online=False)],
        ),
        {},
        id="offline-runner-with-live-instance-kept",
    ),
    pytest.param(
        Case(config(), TWO_GPU, {}, [Runner(9, "static-builder-1", frozenset(), False, False)]),
        {},
        id="runner-outside-our-pools-ignored",
    ),
    pytest.param(
        Case(config(), TWO_GPU, {}, [runner(7, "gpu-spot", online=False)], fresh=False),
        {},
        id="stale-observation-cleans-nothing",
    ),
]

MANY = 8
CAPS = [
    pytest.param(
        Case(
            config(scaling=ScalingConfig(max_scale_in_per_tick=5)),
            [pool("gpu-spot", [inst(i, "gpu-spot") for i in range(1, MANY + 1)]), pool("gpu-od")],
            {},
            [runner(i, "gpu-spot") for i in range(1, MANY + 1)],
            idle_for(601, *range(1, MANY + 1)),
        ),
        {"in": [("gpu-spot", i, iid(i)) for i in range(1, 6)]},
        id="scale-in-capped-per-tick",
    ),
    pytest.param(
        Case(
            config(),
            [
                pool("gpu-spot", [inst(i, "gpu-spot", age=1000) for i in range(1, MANY + 1)]),
                pool("gpu-od"),
            ],
            {GPU: MANY},
        ),
        {"orphans": [iid(i) for i in range(1, 6)]},
        id="orphan-cleanup-capped-per-tick",
    ),
    pytest.param(
        Case(
            config(),
            [
                pool("gpu-spot", [inst(i, "gpu-spot", age=1000) for i in range(1, 4)]),
                pool("gpu-od"),
            ],
            {GPU: 3},
            [runner(i, "gpu-spot", online=False) for i in range(10, 14)],
        ),
        {"orphans": [iid(i) for i in range(1, 4)], "stale": [10, 11]},
        id="cleanup-cap-shared-orphans-first",
    ),
]


@pytest.mark.parametrize(
    ("case", "expected"), DEMAND + CLAMPS + BUDGETS + STALE_AND_IDLE + ORPHANS + CAPS
)
def test_plan(case: Case, expected: dict[str, object]) -> None:
    assert summary(run(case)) == expected


def test_decisions_carry_current_desired_and_reason() -> None:
    plan = run(Case(config(), TWO_GPU, {GPU: 3}))
    assert [d.as_dict() for d in plan.decisions] == [
        {
            "runner_type": GPU,
            "pool": "gpu-spot",
            "current": 0,
            "desired": 3,
            "reason": "demand 3 (queued 3 + busy 0 + min_idle 0), supply 0; scale up +3",
            "action": "scale_up",
        },
        {
            "runner_type": GPU,
            "pool": "gpu-od",
            "current": 0,
            "desired": 0,
            "reason": "demand 3 (queued 3 + busy 0 + min_idle 0), supply 0",
            "action": "hold",
        },
    ]


def test_stale_reason_says_hold_and_missing_pool_is_reported() -> None:
    plan = run(Case(config(), [pool("gpu-spot")], {GPU: 3}, fresh=False))
    by_pool = {d.pool: d for d in plan.decisions}
    assert by_pool["gpu-spot"].action == "hold"
    assert "observation stale: hold" in by_pool["gpu-spot"].reason
    assert by_pool["gpu-od"].action == "missing"


def test_idle_since_is_kept_while_idle_and_dropped_when_busy() -> None:
    earlier = T0 - timedelta(seconds=100)
    state = ScalingState(idle_since={1: earlier, 2: earlier})
    runners = [runner(1, "gpu-spot"), runner(2, "gpu-spot", busy=True), runner(3, "gpu-spot")]
    plan = run(Case(config(), IDLE_POOLS, {}, runners, state))
    assert plan.state.idle_since == {1: earlier, 3: T0}


def test_unprotected_instances_are_protected() -> None:
    plan = run(
        Case(
            config(),
            [
                pool("gpu-spot", [inst(1, "gpu-spot", protected=False), inst(2, "gpu-spot")]),
                pool("gpu-od"),
            ],
        )
    )
    assert [(p.pool, p.instance_ids) for p in plan.protect] == [("gpu-spot", (iid(1),))]


def test_budget_use_reported() -> None:
    plan = run(
        Case(config(*TWO_TYPES, budgets=GPU_BUDGET), [pool("a-pool"), pool("b-pool")], {GPU_A: 1})
    )
    assert plan.budget_use == {"gpus": 1}


def test_capacity_backoff_doubles_to_the_cap_and_resets() -> None:
    scaling = ScalingConfig(capacity_backoff_initial=300, capacity_backoff_max=1800)
    state = ScalingState()
    lengths = []
    for _ in range(5):
        state = state.capacity_failed("gpu-spot", T0, scaling)
        lengths.append(state.backoff_seconds["gpu-spot"])
    assert lengths == [300, 600, 1200, 1800, 1800]
    assert state.in_backoff("gpu-spot", T0 + timedelta(seconds=1799))
    assert not state.capacity_ok("gpu-spot").in_backoff("gpu-spot", T0)


def test_demand_follows_the_min_idle_schedule() -> None:
    office = MinIdle(
        default=1,
        schedule=(IdleWindow(start=8 * 60, end=18 * 60, min_idle=4, days=frozenset(range(5))),),
    )
    cfg = config(rtype(min_idle=office))

    def wanted(now: datetime) -> dict[str, int]:
        plan = decide(
            snapshot({}, at=now),
            (),
            {p.name: p for p in TWO_GPU},
            cfg,
            ScalingState(),
            now,
            observation_fresh=True,
        )
        return {d.pool: d.desired for d in plan.decisions if d.action == "scale_up"}

    monday = T0.replace(hour=9)  # 2026-11-30 is a Monday
    assert wanted(monday) == {"gpu-spot": 4}
    assert wanted(monday.replace(hour=19)) == {"gpu-spot": 1}
    assert wanted(monday + timedelta(days=5)) == {"gpu-spot": 1}  # Saturday


def test_only_in_service_instances_are_protected() -> None:
    """Regression: AWS refuses SetInstanceProtection for a Pending
    instance with ValidationError and fails the whole call, so one booting instance in a
    batch of 50 left all 50 unprotected and paged on-call every tick. Only InService
    instances are asked for (the group's NewInstancesProtectedFromScaleIn covers the rest
    at launch; a booting one is asked for once it is in service)."""
    booting = inst(1, "gpu-spot", protected=False, lifecycle=PENDING)
    ready = inst(2, "gpu-spot", protected=False)
    plan = run(Case(config(), [pool("gpu-spot", [booting, ready]), pool("gpu-od")]))
    assert [(p.pool, p.instance_ids) for p in plan.protect] == [("gpu-spot", (iid(2),))]


def pending(n: int, seconds_ago: float) -> PendingTermination:
    since = T0 - timedelta(seconds=seconds_ago)
    return PendingTermination(GPU, "gpu-spot", iid(n), f"gpu-spot-{iid(n)}", since)


def test_pending_terminations_come_first_and_share_the_scale_in_cap() -> None:
    """Remembered terminations are retried oldest first, count against
    max_scale_in_per_tick (the bound on AWS calls per tick), and are forgotten once their
    instance is gone; their instances are never orphan candidates too."""
    cfg = config(rtype(idle_timeout=60), scaling=ScalingConfig(max_scale_in_per_tick=2))
    instances = [inst(i, "gpu-spot") for i in (1, 2, 3, 4)]
    idle = [runner(3, "gpu-spot"), runner(4, "gpu-spot")]  # idle an hour: scale-in material
    state = replace(
        idle_for(3600, 3, 4),
        pending_terminations={
            iid(1): pending(1, 30),
            iid(2): pending(2, 90),
            iid(9): pending(9, 60),  # its instance is gone: forgotten
        },
    )
    plan = run(Case(cfg, [pool("gpu-spot", instances), pool("gpu-od")], {}, idle, state))
    assert [p.instance_id for p in plan.pending_terminations] == [iid(2), iid(1)]
    assert set(plan.state.pending_terminations) == {iid(1), iid(2)}
    assert plan.scale_ins == ()  # the cap of 2 went to the retries
    assert iid(1) not in [o.instance_id for o in plan.orphans]
    assert iid(2) not in [o.instance_id for o in plan.orphans]


@pytest.mark.parametrize(
    "pools",
    [
        pytest.param(["ci-gpu", "ci-gpu-spot"], id="one-pool-name-prefixes-another"),
        pytest.param(["ci-gpu-spot", "ci-gpu"], id="the-other-order"),
        pytest.param(["ci-gpu", "ci-gpu"], id="a-pool-listed-twice"),
        pytest.param(["elsewhere"], id="no-pool-matches"),
    ],
)
def test_runners_by_pool_matches_pool_of_runner(pools: list[str]) -> None:
    """The policy read each runner's pool once per runner type (600,000 regex searches a
    tick at 200 types and 3,000 runners); it now reads them once per tick. The runners a
    type gets, and their order, must be what ``pool_of_runner`` gave."""
    runners = [
        Runner(1, "ci-gpu-spot-i-0123456789abcdef0", frozenset(), True, False),
        Runner(2, "ci-gpu-i-0123456789abcdef1", frozenset(), True, True),
        Runner(3, "static-builder-1", frozenset(), True, False),
        Runner(4, "ci-gpu-i-0123456789abcdef2", frozenset(), False, False),
        Runner(5, "other-ci-gpu-i-0123456789abcdef3", frozenset(), True, False),
    ]
    expected = [(r, pn) for r in runners if (pn := pool_of_runner(r, pools)) is not None]
    by_pool = runners_by_pool(runners)
    found = [(i, r, pn) for pn in dict.fromkeys(pools) for i, r in by_pool.get(pn, ())]
    assert [(r, pn) for _, r, pn in sorted(found, key=lambda f: f[0])] == expected

"""Why is it queued: the causes per runner type, case by case (pure).

Each row builds a small world (a GPU type with a spot and an on-demand pool), lets the real
policy decide, and checks the exact causes :func:`diagnose` gives: codes in order and the
one-line details on-call reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta

import pytest

from autoscaler.config import BudgetConfig, Config, ScalingConfig
from autoscaler.domain import (
    ActivityStatus,
    Cause,
    InstanceLifecycle,
    Job,
    JobStatus,
    Observation,
    PoolState,
    QueueSnapshot,
    QueueStats,
    Runner,
    RunnerCounts,
    ScalingActivity,
    ScalingProblem,
    normalize_labels,
)
from autoscaler.scale.causes import CODES, UNMATCHED, cause_line, fmt_age
from autoscaler.scale.diagnosis import diagnose
from autoscaler.scale.plan import LAUNCH_FAILED, STUCK, ScalingState
from autoscaler.scale.policy import decide
from autoscaler.scale.view import CapacityFailure, ScalingView
from tests.unit.scaling_fakes import GPU, T0, config, inst, pool, rtype, runner

NO_CAPACITY = (
    "We currently do not have sufficient g5.4xlarge capacity in the Availability Zone you"
    " requested (us-east-1a). Launching EC2 instance failed."
)
BACKED_OFF = ScalingState().capacity_failed("gpu-spot", T0 - timedelta(seconds=60), ScalingConfig())


@dataclass
class World:
    """A GPU type (pools gpu-spot, gpu-od) with queued jobs, as one tick sees it."""

    queued: int = 2
    oldest: float = 600.0
    cfg: Config = field(default_factory=lambda: config(rtype()))
    pools: dict[str, PoolState] = field(
        default_factory=lambda: {"gpu-spot": pool("gpu-spot"), "gpu-od": pool("gpu-od")}
    )
    runners: Sequence[Runner] = ()
    state: ScalingState = field(default_factory=ScalingState)
    failures: Mapping[str, CapacityFailure] = field(default_factory=dict)
    problems: Sequence[ScalingProblem] = ()
    fresh: bool = True
    dry_run: bool = False
    scaler: bool = True
    jobs: Sequence[Job] = ()

    def snapshot(self) -> QueueSnapshot:
        counts = RunnerCounts(
            idle=sum(1 for r in self.runners if r.online and not r.busy),
            busy=sum(1 for r in self.runners if r.online and r.busy),
            offline=sum(1 for r in self.runners if not r.online),
        )
        stats = QueueStats(
            GPU,
            self.queued,
            self.oldest if self.queued else 0.0,
            counts,
            oldest_queued_at=T0 - timedelta(seconds=self.oldest) if self.queued else None,
        )
        unmatched = len(self.jobs)
        return QueueSnapshot(T0, {GPU: stats}, unmatched, 0)

    def diagnose(self) -> dict[str, tuple[Cause, ...]]:
        snap = self.snapshot()
        view = None
        if self.scaler:
            plan = decide(
                snap, self.runners, self.pools, self.cfg, self.state, T0,
                observation_fresh=self.fresh,
            )  # fmt: skip
            view = ScalingView(self.pools, plan, plan.decisions, plan.state, self.failures)
        return diagnose(
            snap,
            Observation(T0, tuple(self.jobs), tuple(self.runners)),
            self.cfg,
            T0,
            scaling=view,
            problems=self.problems,
            observation_fresh=self.fresh,
            last_successful_poll=T0 - timedelta(seconds=0 if self.fresh else 300),
            dry_run=self.dry_run,
        )


def _full(pool_name: str, n: int, *, max_size: int = 10, first: int = 1) -> PoolState:
    return pool(pool_name, [inst(first + i, pool_name) for i in range(n)], max_size=max_size)


def _busy(pool_name: str, n: int, first: int = 1) -> list[Runner]:
    return [runner(first + i, pool_name, busy=True) for i in range(n)]


def _failed(seconds_ago: float, message: str = NO_CAPACITY) -> ScalingActivity:
    return ScalingActivity(T0 - timedelta(seconds=seconds_ago), ActivityStatus.FAILED, message)


def _job(n: int, *labels: str) -> Job:
    return Job(
        n, n, "app", "build", normalize_labels(labels), JobStatus.QUEUED, T0 - timedelta(minutes=7)
    )


DEMAND_MET_2 = (
    "demand_met",
    "2 instances asked for a demand of 2, 2 on their way: the queue should drain within"
    " boot_timeout 15m",
)

CASES = [
    pytest.param(
        World(
            queued=3,
            cfg=config(rtype(max=4)),
            pools={"gpu-spot": _full("gpu-spot", 4), "gpu-od": pool("gpu-od")},
            runners=_busy("gpu-spot", 4),
        ),
        [("at_max", f"{GPU} 4/4 instances")],
        id="at_max: the type's max is reached and more is wanted",
    ),
    pytest.param(
        World(
            queued=3,
            pools={
                "gpu-spot": _full("gpu-spot", 2, max_size=2),
                "gpu-od": _full("gpu-od", 2, max_size=2, first=3),
            },
            runners=[*_busy("gpu-spot", 2), *_busy("gpu-od", 2, first=3)],
        ),
        [("pool_max_size", "MaxSize reached: gpu-spot 2/2, gpu-od 2/2")],
        id="pool_max_size: every pool at its MaxSize",
    ),
    pytest.param(
        World(
            queued=3,
            state=BACKED_OFF,
            pools={"gpu-spot": pool("gpu-spot"), "gpu-od": _full("gpu-od", 2, max_size=2)},
            runners=_busy("gpu-od", 2),
        ),
        [
            ("capacity_backoff", "gpu-spot since 02:59:00 UTC, skipped until 03:04:00 UTC"),
            ("pool_max_size", "MaxSize reached: gpu-od 2/2"),
        ],
        id="pool_max_size: the pools not out of capacity are full",
    ),
    pytest.param(
        World(
            queued=3,
            cfg=config(
                rtype(),
                budgets=[BudgetConfig(name="gpus", max_instances=2, runner_types=("*gpu*",))],
            ),
            pools={"gpu-spot": _full("gpu-spot", 2), "gpu-od": pool("gpu-od")},
            runners=_busy("gpu-spot", 2),
        ),
        [("budget_exhausted", "budget gpus 2/2 instances")],
        id="budget_exhausted: a shared budget is spent",
    ),
    pytest.param(
        World(
            state=BACKED_OFF,
            failures={
                "gpu-spot": CapacityFailure(
                    "gpu-spot", T0 - timedelta(seconds=60), code="InsufficientInstanceCapacity"
                )
            },
        ),
        [
            (
                "capacity_backoff",
                "gpu-spot since 02:59:00 UTC, skipped until 03:04:00 UTC;"
                " AWS: InsufficientInstanceCapacity",
            ),
            DEMAND_MET_2,
        ],
        id="capacity_backoff: refused synchronously, on-demand takes the need",
    ),
    pytest.param(
        World(
            state=BACKED_OFF,
            failures={
                "gpu-spot": CapacityFailure(
                    "gpu-spot", T0 - timedelta(seconds=60), LAUNCH_FAILED, message=NO_CAPACITY
                )
            },
        ),
        [
            (
                "capacity_backoff",
                "gpu-spot since 02:59:00 UTC, skipped until 03:04:00 UTC; Failed scaling"
                f" activity, AWS: {NO_CAPACITY}",
            ),
            DEMAND_MET_2,
        ],
        id="capacity_backoff: a Failed scaling activity, with AWS's message",
    ),
    pytest.param(
        World(
            state=BACKED_OFF,
            failures={"gpu-spot": CapacityFailure("gpu-spot", T0, STUCK)},
        ),
        [
            (
                "capacity_backoff",
                "gpu-spot since 02:59:00 UTC, skipped until 03:04:00 UTC;"
                " no instance launched within boot_timeout 15m",
            ),
            DEMAND_MET_2,
        ],
        id="capacity_backoff: stuck short, AWS said nothing",
    ),
    pytest.param(
        World(
            pools={
                "gpu-spot": replace(
                    pool("gpu-spot", desired=2), activities=(_failed(120, "Quota exceeded"),)
                ),
                "gpu-od": pool("gpu-od"),
            },
        ),
        [
            (
                "launch_failing",
                "gpu-spot: 1 Failed scaling activity, last at 02:58:00 UTC: Quota exceeded",
            )
        ],
        id="launch_failing: a Failed activity not (yet) acted on; nothing is on its way",
    ),
    pytest.param(
        World(
            pools={"gpu-spot": pool("gpu-spot", desired=2), "gpu-od": pool("gpu-od")},
            state=ScalingState(short_since={"gpu-spot": (T0 - timedelta(seconds=480), 0)}),
        ),
        [
            (
                "launch_failing",
                "gpu-spot: 2 short of desired 2 for 8m with no new instance"
                " (released at boot_timeout 15m)",
            )
        ],
        id="launch_failing: stuck short past half the boot_timeout, no activity to read",
    ),
    pytest.param(
        World(
            pools={"gpu-spot": pool("gpu-spot", desired=2), "gpu-od": pool("gpu-od")},
            state=ScalingState(short_since={"gpu-spot": (T0 - timedelta(seconds=120), 0)}),
        ),
        [DEMAND_MET_2],
        id="short for two minutes is still on its way",
    ),
    pytest.param(
        World(
            queued=1,
            pools={
                "gpu-spot": pool("gpu-spot", [inst(1, "gpu-spot", age=1000)]),
                "gpu-od": pool("gpu-od"),
            },
        ),
        [
            (
                "launch_failing",
                "gpu-spot: 1 instance never registered a runner within boot_timeout 15m",
            )
        ],
        id="launch_failing: an instance past boot_timeout with no runner (an orphan)",
    ),
    pytest.param(
        World(
            problems=[
                ScalingProblem(
                    "permanent",
                    GPU,
                    "gpu-spot",
                    "AccessDenied",
                    "set_desired_capacity on gpu-spot failed permanently: AccessDenied",
                )
            ],
            dry_run=True,
        ),
        [
            ("dry_run", "+2 in gpu-spot planned, not asked (dry run)"),
            (
                "permanent_error",
                "set_desired_capacity on gpu-spot failed permanently: AccessDenied",
            ),
        ],
        id="permanent_error: with its AWS code (after dry_run, which ranks higher)",
    ),
    pytest.param(
        World(
            queued=1,
            pools={
                "gpu-spot": pool(
                    "gpu-spot",
                    [inst(1, "gpu-spot", age=125, lifecycle=InstanceLifecycle.PENDING)],
                ),
                "gpu-od": pool("gpu-od"),
            },
        ),
        [
            ("booting", "1 instance in gpu-spot, oldest 2m (boot_timeout 15m)"),
            (
                "demand_met",
                "1 instance asked for a demand of 1, 1 on their way: the queue should drain"
                " within boot_timeout 15m",
            ),
        ],
        id="booting: launched, runner not registered yet; demand is met",
    ),
    pytest.param(
        World(
            queued=1,
            pools={"gpu-spot": _full("gpu-spot", 1), "gpu-od": pool("gpu-od")},
            runners=[runner(1, "gpu-spot", online=False)],
        ),
        [("runners_offline", f"1/1 {GPU} runners offline")],
        id="runners_offline: the instance counts as supply, its runner serves nothing",
    ),
    pytest.param(
        World(
            queued=2,
            oldest=300,
            pools={"gpu-spot": _full("gpu-spot", 1), "gpu-od": pool("gpu-od")},
            runners=[runner(1, "gpu-spot")],
        ),
        [
            (
                "idle_runners_not_assigned",
                f"1 idle {GPU} runner while 2 jobs wait (oldest 5m): GitHub does not assign"
                " them (runner group or label mismatch?)",
            ),
            (
                "demand_met",
                "2 instances asked for a demand of 2, 1 on their way: the queue should drain"
                " within boot_timeout 15m",
            ),
        ],
        id="idle_runners_not_assigned: idle runners while jobs wait for minutes",
    ),
    pytest.param(
        World(fresh=False),
        [("github_stale", "last good poll 5m ago (poll_interval 30s): pools held")],
        id="github_stale: the last good poll is old; every pool is held",
    ),
    pytest.param(
        World(cfg=config(rtype(), scaling=ScalingConfig(enabled=False)), scaler=False),
        [("scaling_disabled", "scaling.enabled is false: pools are not changed")],
        id="scaling_disabled: observe and alert only",
    ),
    pytest.param(
        World(cfg=config(rtype(pools=())), scaler=False),
        [("scaling_disabled", f"{GPU} has no pools configured")],
        id="scaling_disabled: a type without pools",
    ),
    pytest.param(
        World(dry_run=True),
        [("dry_run", "+2 in gpu-spot planned, not asked (dry run)")],
        id="dry_run: capacity planned and not asked",
    ),
    pytest.param(
        World(pools={"gpu-spot": pool("gpu-spot")}),
        [("pool_missing", "gpu-od not found in the cloud"), DEMAND_MET_2],
        id="pool_missing: a configured pool is not in the cloud",
    ),
    pytest.param(
        World(),
        [DEMAND_MET_2],
        id="demand_met: asked for and on its way",
    ),
    pytest.param(
        World(
            oldest=30,
            pools={"gpu-spot": _full("gpu-spot", 2), "gpu-od": pool("gpu-od")},
            runners=[runner(1, "gpu-spot"), runner(2, "gpu-spot")],
        ),
        [],
        id="none: idle runners and young jobs are GitHub about to assign them",
    ),
]


@pytest.mark.parametrize(("world", "expected"), CASES)
def test_causes(world: World, expected: list[tuple[str, str]]) -> None:
    causes = world.diagnose()
    assert [(c.code, c.detail) for c in causes.get(GPU, ())] == expected


def test_causes_come_most_important_first() -> None:
    """Stale picture, a pool in back-off and one booting: the stale picture leads (nothing
    else may still be true), then back-off, then booting."""
    world = World(
        fresh=False,
        state=BACKED_OFF,
        pools={
            "gpu-spot": pool("gpu-spot"),
            "gpu-od": pool(
                "gpu-od", [inst(5, "gpu-od", age=60, lifecycle=InstanceLifecycle.PENDING)]
            ),
        },
    )
    codes = [c.code for c in world.diagnose()[GPU]]
    assert codes == ["github_stale", "capacity_backoff", "booting"]
    assert codes == sorted(codes, key=CODES.index)


def test_unmatched_jobs_are_named_by_label_set_with_the_nearest_type() -> None:
    world = World(
        jobs=[
            _job(1, "self-hosted", "linux.arm64"),
            _job(2, "Self-Hosted", "linux.arm64"),
            _job(3, "self-hosted", GPU, "cuda-12"),
        ]
    )
    [cause] = world.diagnose()[UNMATCHED]
    assert cause == Cause(
        "no_runner_type",
        "3 queued jobs no runner type serves, by labels: [linux.arm64, self-hosted] x2,"
        f" [cuda-12, {GPU}, self-hosted] x1 ({GPU} lacks cuda-12)",
    )


def test_unmatched_label_sets_are_bounded() -> None:
    """Labels come from workflow files: four label sets show three and a count, and a
    very long label is cut, so an alert line stays bounded."""
    long = "x" * 500
    jobs = [_job(i, "self-hosted", f"arm-{i}") for i in range(1, 4)] + [_job(9, long)]
    [cause] = World(jobs=jobs).diagnose()[UNMATCHED]
    assert cause.detail.endswith("+1 more label sets")
    assert len(cause.detail) < 300


def test_types_without_queued_jobs_get_no_causes() -> None:
    assert World(queued=0).diagnose() == {}


def test_nothing_observed_yet_gives_nothing() -> None:
    assert diagnose(None, None, config(rtype()), T0) == {}


def test_no_scaling_stage_still_names_runner_causes() -> None:
    """Scaling not wired (no view): the runner-side causes still come from the snapshot."""
    world = World(scaler=False, oldest=300, runners=[runner(1, "gpu-spot")])
    assert [c.code for c in world.diagnose()[GPU]] == ["idle_runners_not_assigned"]


def test_describe_failed_permanently_applies_to_every_type() -> None:
    """The pools could not be described (AccessDenied on describe: runner type ""): the
    permanent error is every type's cause."""
    snap = World().snapshot()
    denied = ScalingProblem("permanent", "", "", "AccessDenied", "")
    view = ScalingView({}, None)
    causes = diagnose(snap, None, config(rtype()), T0, scaling=view, problems=[denied])
    assert causes[GPU] == (Cause("permanent_error", "all pools: AccessDenied"),)


@pytest.mark.parametrize(
    ("causes", "line"),
    [
        pytest.param([], "none found", id="none"),
        pytest.param(
            [
                Cause("at_max", "linux.4xlarge 50/50 instances"),
                Cause("booting", "3 instances, oldest 4m"),
            ],
            "at_max (linux.4xlarge 50/50 instances); booting (3 instances, oldest 4m)",
            id="the issue's example",
        ),
        pytest.param(
            [Cause("booting", str(i)) for i in range(10)],
            "; ".join(f"booting ({i})" for i in range(8)) + "; +2 more",
            id="bounded",
        ),
    ],
)
def test_cause_line(causes: list[Cause], line: str) -> None:
    assert cause_line(causes) == line


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (59.9, "59s"), (60, "1m"), (3599, "59m"), (3720, "1h02m"), (-5, "0s")],
)
def test_fmt_age(seconds: float, text: str) -> None:
    assert fmt_age(seconds) == text


def test_at_max_is_not_claimed_when_the_max_covers_the_demand() -> None:
    """Regression: with max 4 and 4 instances booting for a demand of 4, the jobs wait for
    the boot, not for the max; saying at_max would send on-call to raise a limit that is
    not in the way."""
    booting = [inst(i, "gpu-spot", age=30, lifecycle=InstanceLifecycle.PENDING) for i in (1, 2)]
    world = World(
        queued=2,
        cfg=config(rtype(max=2)),
        pools={"gpu-spot": pool("gpu-spot", booting), "gpu-od": pool("gpu-od")},
    )
    assert [c.code for c in world.diagnose()[GPU]] == ["booting", "demand_met"]

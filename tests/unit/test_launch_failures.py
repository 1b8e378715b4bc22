"""Asynchronous capacity failures: a pool that accepted a scale-up and then could not launch.

The policy rows (pure) first, then the scaler over the fake pool, which fails the way AWS
does: SetDesiredCapacity succeeds, nothing launches, a Failed scaling activity appears.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.config import AwsConfig, RetryConfig
from autoscaler.domain import ActivityStatus, PoolState, ScalingActivity
from autoscaler.scale.plan import Plan, ScalingState
from autoscaler.scale.policy import decide
from autoscaler.scale.scaler import Scaler
from autoscaler.telemetry import Metrics
from tests.unit.handover_fakes import handover_ports
from tests.unit.scaling_fakes import (
    GPU,
    T0,
    FakePool,
    FakeSource,
    config,
    inst,
    observation,
    pool,
    rtype,
    snapshot,
)

CFG = config(rtype(pools=("gpu-spot", "gpu-od"), boot_timeout=900))
PENDING_ONE = inst(1, "gpu-spot", age=5)


def ago(seconds: float) -> datetime:
    return T0 - timedelta(seconds=seconds)


def failed(seconds_ago: float) -> ScalingActivity:
    return ScalingActivity(ago(seconds_ago), ActivityStatus.FAILED)


def short_spot(*activities: ScalingActivity, desired: int = 2, min_size: int = 0) -> PoolState:
    """gpu-spot asked for ``desired`` instances and has none."""
    return replace(
        pool("gpu-spot", desired=desired), min_size=min_size, activities=tuple(activities)
    )


def plan_for(spot: PoolState, state: ScalingState, *, queued: int = 2, fresh: bool = True) -> Plan:
    pools = {"gpu-spot": spot, "gpu-od": pool("gpu-od")}
    snap = snapshot({GPU: queued})
    return decide(snap, (), pools, CFG, state, T0, observation_fresh=fresh)


def summary(plan: Plan) -> dict[str, object]:
    out: dict[str, object] = {}
    if plan.releases:
        out["release"] = [(r.pool, r.reason, r.desired, r.failover) for r in plan.releases]
    ups = {d.pool: d.desired for d in plan.decisions if d.action == "scale_up"}
    if ups:
        out["up"] = ups
    if plan.out_of_capacity:
        out["out_of_capacity"] = list(plan.out_of_capacity)
    return out


UP_60S_AGO = ScalingState(scaled_up_at={"gpu-spot": ago(60)})
OD_BACKED_OFF = replace(UP_60S_AGO, backoff_until={"gpu-od": T0 + timedelta(seconds=60)})

ROWS = [
    pytest.param(
        short_spot(failed(30)),
        UP_60S_AGO,
        {"release": [("gpu-spot", "launch_failed", 0, True)], "up": {"gpu-od": 2}},
        id="failed-activity-after-our-scale-up-fails-over",
    ),
    pytest.param(
        short_spot(failed(90)),
        UP_60S_AGO,
        {},
        id="failed-activity-before-our-scale-up-is-old-news",
    ),
    pytest.param(
        short_spot(ScalingActivity(ago(30), ActivityStatus.CANCELLED)),
        UP_60S_AGO,
        {},
        id="cancelled-activity-is-not-a-launch-failure",
    ),
    pytest.param(
        short_spot(failed(30)),
        ScalingState(),
        {},
        id="failed-activity-without-our-scale-up-waits-for-the-stuck-clock",
    ),
    pytest.param(
        short_spot(),
        ScalingState(short_since={"gpu-spot": (ago(900), 0)}),
        {"release": [("gpu-spot", "stuck", 0, True)], "up": {"gpu-od": 2}},
        id="short-past-boot-timeout-is-stuck",
    ),
    pytest.param(
        short_spot(),
        ScalingState(short_since={"gpu-spot": (ago(899), 0)}),
        {},
        id="short-within-boot-timeout-is-on-its-way",
    ),
    pytest.param(
        replace(short_spot(desired=3), instances=(PENDING_ONE,)),
        ScalingState(short_since={"gpu-spot": (ago(1000), 0)}),
        {},
        id="a-new-instance-restarts-the-stuck-clock",
    ),
    pytest.param(
        short_spot(desired=3, min_size=1),
        ScalingState(short_since={"gpu-spot": (ago(901), 0)}),
        {"release": [("gpu-spot", "stuck", 1, True)], "up": {"gpu-od": 2}},
        id="release-stops-at-min-size",
    ),
    pytest.param(
        short_spot(failed(30)),
        OD_BACKED_OFF,
        {"release": [("gpu-spot", "launch_failed", 0, False)], "out_of_capacity": [GPU]},
        id="last-pool-failing-is-out-of-capacity",
    ),
    pytest.param(
        short_spot(failed(30)),
        replace(UP_60S_AGO, backoff_until={"gpu-spot": T0 + timedelta(seconds=60)}),
        {"up": {"gpu-od": 2}},
        id="pool-in-backoff-is-not-judged-again",
    ),
]


@pytest.mark.parametrize(("spot", "state", "expected"), ROWS)
def test_launch_failures(spot: PoolState, state: ScalingState, expected: object) -> None:
    assert summary(plan_for(spot, state)) == expected


def test_stale_observation_releases_nothing() -> None:
    plan = plan_for(short_spot(failed(30)), UP_60S_AGO, fresh=False)
    assert (plan.releases, plan.state.backoff_until) == ((), {})


def test_release_backs_off_and_says_why() -> None:
    plan = plan_for(short_spot(failed(30)), UP_60S_AGO)
    assert plan.state.backoff_seconds == {"gpu-spot": 300.0}
    assert "gpu-spot" not in plan.state.scaled_up_at  # the same activity never counts twice
    spot = next(d for d in plan.decisions if d.pool == "gpu-spot")
    assert (spot.action, spot.current, spot.desired) == ("release", 2, 0)
    assert "launches failing (a scaling activity Failed): backed off 300s, failing over" in (
        spot.reason
    )


def test_backoff_resets_once_the_pool_delivers() -> None:
    state = ScalingState(
        backoff_until={"gpu-spot": ago(1)},
        backoff_seconds={"gpu-spot": 600.0},
        scaled_up_at={"gpu-spot": ago(60)},
    )
    delivered = pool("gpu-spot", [inst(1, "gpu-spot", age=30)])
    assert plan_for(delivered, state, queued=1).state.backoff_seconds == {}
    still_short = replace(delivered, desired_capacity=2)
    assert plan_for(still_short, state, queued=2).state.backoff_seconds == {"gpu-spot": 600.0}


# --- the scaler over the fake pool


def make(fake: FakePool) -> Scaler:
    cfg = CFG.model_copy(update={"aws": AwsConfig(retry=RetryConfig(max_attempts=3))})
    source = FakeSource()
    return Scaler(
        fake,
        source,
        cfg,
        Metrics(CollectorRegistry()),
        sleep=lambda _: None,
        rng=random.Random(0),
        **handover_ports(source),
    )


def tick(s: Scaler, fake: FakePool, queued: int, now: datetime) -> dict[str, tuple[str, int]]:
    fake.now = now + timedelta(seconds=5)  # AWS starts the activity after our call
    ds = s.step(snapshot({GPU: queued}, at=now), observation((), now), now, observation_fresh=True)
    return {d.pool: (d.action, d.desired) for d in ds}


def metric(s: Scaler, name: str, **labels: str) -> float:
    return s.metrics.registry.get_sample_value(name, labels) or 0.0


def world() -> FakePool:
    return FakePool({"gpu-spot": pool("gpu-spot", max_size=3), "gpu-od": pool("gpu-od")})


def test_failed_activity_fails_over_backs_off_doubles_and_resets() -> None:
    fake = world()
    fake.outage.add("gpu-spot")
    s = make(fake)
    assert tick(s, fake, 2, T0) == {"gpu-spot": ("scale_up", 2), "gpu-od": ("hold", 0)}
    assert tick(s, fake, 2, T0 + timedelta(seconds=60)) == {
        "gpu-spot": ("release", 0),
        "gpu-od": ("scale_up", 2),
    }
    assert ("set_desired_capacity", "gpu-spot", 0) in fake.calls
    assert s.state.backoff_seconds == {"gpu-spot": 300.0}
    failures = "ci_autoscaler_provisioning_failures_total"
    assert metric(s, failures, runner_type=GPU, pool="gpu-spot", reason="launch_failed") == 1
    assert metric(s, "ci_autoscaler_pool_failovers_total", runner_type=GPU, pool="gpu-spot") == 1
    assert s.last_problems == []

    later = T0 + timedelta(seconds=361)  # back-off over, still out of capacity
    assert tick(s, fake, 4, later)["gpu-spot"] == ("scale_up", 2)
    assert tick(s, fake, 4, later + timedelta(seconds=60))["gpu-spot"] == ("release", 0)
    assert s.state.backoff_seconds == {"gpu-spot": 600.0}

    fake.outage.clear()  # capacity is back
    back = later + timedelta(seconds=60 + 601)
    assert tick(s, fake, 6, back)["gpu-spot"] == ("scale_up", 2)  # gpu-od holds 4
    tick(s, fake, 6, back + timedelta(seconds=30))
    assert s.state.backoff_seconds == {}


def test_every_pool_failing_asynchronously_is_a_problem() -> None:
    fake = world()
    fake.outage.update({"gpu-spot", "gpu-od"})
    s = make(fake)
    tick(s, fake, 2, T0)
    tick(s, fake, 2, T0 + timedelta(seconds=60))  # spot released, od raised
    assert s.last_problems == []
    tick(s, fake, 2, T0 + timedelta(seconds=120))  # od released: nothing left
    assert [(p.kind, p.runner_type) for p in s.last_problems] == [("out_of_capacity", GPU)]


def test_stuck_pool_without_activities_fails_over_after_boot_timeout() -> None:
    fake = world()
    fake.outage.add("gpu-spot")
    s = make(fake)
    tick(s, fake, 2, T0)
    fake.activities.clear()  # no activity to read: only the clock tells
    assert tick(s, fake, 2, T0 + timedelta(seconds=60))["gpu-spot"] == ("hold", 2)
    assert tick(s, fake, 2, T0 + timedelta(seconds=959))["gpu-spot"] == ("hold", 2)
    decisions = tick(s, fake, 2, T0 + timedelta(seconds=960))
    assert decisions == {"gpu-spot": ("release", 0), "gpu-od": ("scale_up", 2)}
    failures = "ci_autoscaler_provisioning_failures_total"
    assert metric(s, failures, runner_type=GPU, pool="gpu-spot", reason="stuck") == 1


def test_dry_run_acts_on_no_launch_failure() -> None:
    fake = world()
    fake.outage.add("gpu-spot")
    s = make(fake)
    tick(s, fake, 2, T0)
    now = T0 + timedelta(seconds=60)
    ds = s.step(
        snapshot({GPU: 2}, at=now), observation((), now), now, observation_fresh=True, dry_run=True
    )
    assert {d.pool: d.action for d in ds} == {"gpu-spot": "release", "gpu-od": "scale_up"}
    assert s.state.backoff_seconds == {} and "gpu-spot" in s.state.scaled_up_at
    assert fake.calls[-1][0] == "describe"


# --- launches a person must fix (quota, image, launch template, permissions)

VCPU = (
    "VcpuLimitExceeded",
    "Could not launch On-Demand Instances. VcpuLimitExceeded - You have requested more vCPU"
    " capacity than your current vCPU limit of 0 allows. Launching EC2 instance failed.",
)


def refused(seconds_ago: float) -> ScalingActivity:
    return ScalingActivity(ago(seconds_ago), ActivityStatus.FAILED, VCPU[1], VCPU[0], True)


def test_refused_launch_backs_off_to_the_max_at_once_and_is_remembered() -> None:
    plan = plan_for(short_spot(failed(20), refused(30)), UP_60S_AGO)
    assert summary(plan) == {
        "release": [("gpu-spot", "launch_refused", 0, True)],
        "up": {"gpu-od": 2},
    }
    assert plan.state.backoff_seconds == {"gpu-spot": 1800.0}  # capacity_backoff_max
    assert plan.state.refused == {"gpu-spot": VCPU}
    assert [(r.pool, r.code, r.message) for r in plan.refused] == [("gpu-spot", *VCPU)]
    spot = next(d for d in plan.decisions if d.pool == "gpu-spot")
    assert "refused: VcpuLimitExceeded, a person must fix it" in spot.reason


def test_refusal_is_reported_every_tick_until_the_pool_delivers() -> None:
    blocked = replace(
        ScalingState(),
        backoff_until={"gpu-spot": T0 + timedelta(seconds=600)},
        backoff_seconds={"gpu-spot": 1800.0},
        refused={"gpu-spot": VCPU},
    )
    assert [r.code for r in plan_for(short_spot(), blocked).refused] == ["VcpuLimitExceeded"]
    fixed = replace(blocked, backoff_until={}, scaled_up_at={"gpu-spot": ago(60)})
    delivered = pool("gpu-spot", [inst(1, "gpu-spot", age=30)])
    plan = plan_for(delivered, fixed, queued=1)
    assert (plan.refused, plan.state.refused) == ((), {})


def test_refused_launch_pages_at_once_with_awss_words_and_fails_over() -> None:
    """Regression: every Failed scaling activity was taken for "out of
    capacity". A vCPU quota of 0 (or a deleted AMI, a broken launch template, a missing
    instance profile) failed over and backed off quietly, again and again, and nobody was
    told what to fix. Classified by AWS's error code, it now pages at once with AWS's
    message, and keeps paging every tick until the pool launches again."""
    fake = world()
    fake.refusal["gpu-spot"] = VCPU
    s = make(fake)
    tick(s, fake, 2, T0)
    assert tick(s, fake, 2, T0 + timedelta(seconds=60)) == {
        "gpu-spot": ("release", 0),
        "gpu-od": ("scale_up", 2),
    }
    expected = [("launch", "gpu-spot", "VcpuLimitExceeded")]
    assert [(p.kind, p.pool, p.code) for p in s.last_problems] == expected
    assert VCPU[1] in s.last_problems[0].message
    failures = "ci_autoscaler_provisioning_failures_total"
    assert metric(s, failures, runner_type=GPU, pool="gpu-spot", reason="launch_refused") == 1

    tick(s, fake, 2, T0 + timedelta(seconds=90))  # nothing new happened: still paged
    assert [(p.kind, p.pool, p.code) for p in s.last_problems] == expected

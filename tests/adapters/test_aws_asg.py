"""AwsAsgPool against moto in-process; faults injected on botocore's ``before-send`` event.

The fault handlers run inside botocore's retry loop, so the attempt counts below are the
real number of HTTP requests: our retries times botocore's ``total_max_attempts``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws
from prometheus_client import CollectorRegistry

from autoscaler.config import AwsConfig, Config, RetryConfig
from autoscaler.domain import ActivityStatus, InstanceLifecycle, ScalingActivity, WarmPoolSpec
from autoscaler.errors import (
    AuthenticationError,
    AutoscalerError,
    CapacityError,
    DeferredError,
    PermanentError,
    RateLimitedError,
    TransientError,
)
from autoscaler.retrying import RetryPolicy
from autoscaler.scale.aws.asg import IAM_ACTIONS, LAUNCH_LOOKUP_SECONDS, AwsAsgPool
from autoscaler.scale.scaler import Scaler
from autoscaler.sim.aws_faults import (
    SPOT_CAPACITY_MESSAGE,
    TIMEOUT,
    BootingInstances,
    CapacityOutage,
    Fault,
    inject,
)
from autoscaler.sim.fleet import PoolSpec, aws_clients, create_pools, moto_session
from autoscaler.telemetry import Metrics
from tests.unit.handover_fakes import handover_ports
from tests.unit.scaling_fakes import GPU, FakeSource, config, observation, rtype, snapshot

SPECS = [
    PoolSpec("gpu-spot", GPU, (GPU,), max_size=3),
    PoolSpec("gpu-od", GPU, (GPU,), max_size=10),
]


@dataclass
class World:
    pool: AwsAsgPool
    metrics: Metrics
    raw_asg: Any
    clock: list[float]
    """The adapter's monotonic clock (seconds), moved by hand."""


def make_pool(
    botocore_attempts: int = 1,
    metrics: Metrics | None = None,
    clock: list[float] | None = None,
) -> AwsAsgPool:
    session = moto_session()
    cfg = AwsConfig(botocore_max_attempts=botocore_attempts)
    kwargs: dict[str, Any] = {} if clock is None else {"monotonic": lambda: clock[0]}
    return AwsAsgPool(cfg, metrics or Metrics(CollectorRegistry()), session=session, **kwargs)


@pytest.fixture
def world(moto_in_process: boto3.session.Session) -> World:
    asg, ec2 = aws_clients(None)
    create_pools(asg, ec2, SPECS)
    clock = [1000.0]
    pool = make_pool(clock=clock)
    return World(pool, pool.metrics, asg, clock)


@pytest.fixture(scope="class")
def shared_moto() -> Iterator[None]:
    """One moto world for the rows that only fail calls (a failed call changes nothing)."""
    with mock_aws():
        asg, ec2 = aws_clients(None)
        create_pools(asg, ec2, SPECS)
        yield


@pytest.fixture
def fresh_pool(shared_moto: None) -> AwsAsgPool:
    """A new adapter (new clients, so no fault handlers) over the shared moto world."""
    return make_pool()


def sample(m: Metrics, name: str, **labels: str) -> float:
    return m.registry.get_sample_value(name, labels) or 0.0


# --- the calls


def test_describe_reports_bounds_instances_and_launch_times(world: World) -> None:
    world.pool.set_desired_capacity("gpu-spot", 2)
    pools = world.pool.describe(["gpu-spot", "gpu-od", "no-such-pool"])
    assert set(pools) == {"gpu-spot", "gpu-od"}
    spot = pools["gpu-spot"]
    assert (spot.min_size, spot.max_size, spot.desired_capacity) == (0, 3, 2)
    assert [i.lifecycle for i in spot.instances] == [InstanceLifecycle.IN_SERVICE] * 2
    assert all(i.protected_from_scale_in for i in spot.instances)
    for i in spot.instances:
        assert i.launched_at is not None and i.launched_at.tzinfo is not None
        assert abs(i.launched_at - datetime.now(UTC)) < timedelta(hours=1)


def test_launch_times_are_looked_up_once_per_instance(world: World) -> None:
    """Story: a webhook-woken tick spent most of its time in DescribeInstances,
    asked every tick for every instance's launch time, which never changes."""
    lookups = "ci_autoscaler_aws_calls_total"
    world.pool.set_desired_capacity("gpu-od", 2)
    first = world.pool.describe(["gpu-od", "gpu-spot"])["gpu-od"]
    assert sample(world.metrics, lookups, operation="DescribeInstances", code="") == 1
    again = world.pool.describe(["gpu-od", "gpu-spot"])["gpu-od"]
    assert sample(world.metrics, lookups, operation="DescribeInstances", code="") == 1
    assert [i.launched_at for i in again.instances] == [i.launched_at for i in first.instances]
    world.pool.set_desired_capacity("gpu-od", 3)  # one new instance: only it is looked up
    world.clock[0] += LAUNCH_LOOKUP_SECONDS
    third = world.pool.describe(["gpu-od", "gpu-spot"])["gpu-od"]
    assert sample(world.metrics, lookups, operation="DescribeInstances", code="") == 2
    assert all(i.launched_at is not None for i in third.instances)


def test_a_tick_right_after_a_scale_up_does_not_wait_for_launch_times(world: World) -> None:
    """Story (reaction at load 7 missed p95 < 1 s): every webhook-woken tick
    right after a scale-up asked DescribeInstances for the launch times of the instances
    that scale-up had just started, before it could set the capacity again. New
    instances are looked up at most every LAUNCH_LOOKUP_SECONDS; until then their
    launch time is unknown (None: young, to the policy and the diagnosis)."""
    lookups = "ci_autoscaler_aws_calls_total"
    world.pool.set_desired_capacity("gpu-od", 1)
    world.pool.describe(["gpu-od"])  # the first describe looks up at once
    assert sample(world.metrics, lookups, operation="DescribeInstances", code="") == 1
    world.pool.set_desired_capacity("gpu-od", 2)
    world.clock[0] += 1.0
    woken = world.pool.describe(["gpu-od"])["gpu-od"]
    assert sample(world.metrics, lookups, operation="DescribeInstances", code="") == 1
    assert sorted(i.launched_at is None for i in woken.instances) == [False, True]
    world.clock[0] += LAUNCH_LOOKUP_SECONDS
    later = world.pool.describe(["gpu-od"])["gpu-od"]
    assert sample(world.metrics, lookups, operation="DescribeInstances", code="") == 2
    assert all(i.launched_at is not None for i in later.instances)


def test_desired_capacity_clamped_to_maxsize_moto_would_accept(world: World) -> None:
    world.pool.describe(["gpu-spot"])
    world.pool.set_desired_capacity("gpu-spot", 7)
    assert world.pool.describe(["gpu-spot"])["gpu-spot"].desired_capacity == 3


def test_terminate_decrements_desired_capacity(world: World) -> None:
    world.pool.set_desired_capacity("gpu-od", 2)
    victim = world.pool.describe(["gpu-od"])["gpu-od"].instances[0].id
    world.pool.terminate_instance("gpu-od", victim)
    after = world.pool.describe(["gpu-od"])["gpu-od"]
    assert after.desired_capacity == 1
    assert victim not in {
        i.id for i in after.instances if i.lifecycle is InstanceLifecycle.IN_SERVICE
    }


def test_protect_instances_sets_scale_in_protection(world: World) -> None:
    world.pool.set_desired_capacity("gpu-od", 1)
    iid = world.pool.describe(["gpu-od"])["gpu-od"].instances[0].id
    world.raw_asg.set_instance_protection(
        AutoScalingGroupName="gpu-od", InstanceIds=[iid], ProtectedFromScaleIn=False
    )
    assert not world.pool.describe(["gpu-od"])["gpu-od"].instances[0].protected_from_scale_in
    world.pool.protect_instances("gpu-od", [iid])
    assert world.pool.describe(["gpu-od"])["gpu-od"].instances[0].protected_from_scale_in


def test_every_call_is_timed_by_operation_and_code(world: World) -> None:
    world.pool.set_desired_capacity("gpu-od", 1)
    inject(world.pool.autoscaling, Fault("SetDesiredCapacity", "ValidationError"))
    with pytest.raises(PermanentError):
        world.pool.set_desired_capacity("gpu-od", 2)
    m = world.metrics
    assert sample(m, "ci_autoscaler_aws_calls_total", operation="SetDesiredCapacity", code="") == 1
    assert (
        sample(
            m,
            "ci_autoscaler_aws_calls_total",
            operation="SetDesiredCapacity",
            code="ValidationError",
        )
        == 1
    )
    count = "ci_autoscaler_aws_call_duration_seconds_count"
    assert sample(m, count, operation="SetDesiredCapacity", code="ValidationError") == 1


def test_iam_actions_are_exactly_the_calls_made(world: World) -> None:
    seen: set[str] = set()

    def record(model: Any, **_: Any) -> None:
        seen.add(f"{model.service_model.endpoint_prefix}:{model.name}")

    for client in (world.pool.autoscaling, world.pool.ec2):
        client.meta.events.register("before-call", record)
    CapacityOutage("gpu-spot").install(world.pool.autoscaling)
    world.pool.set_desired_capacity("gpu-spot", 1)  # short: its activities are read
    world.pool.set_desired_capacity("gpu-od", 1)
    iid = world.pool.describe(["gpu-od", "gpu-spot"])["gpu-od"].instances[0].id
    world.pool.protect_instances("gpu-od", [iid])
    world.pool.terminate_instance("gpu-od", iid)
    world.pool.put_warm_pool("gpu-od", WarmPoolSpec("stopped", 0, None, reuse=False))
    world.pool.describe_warm_pool("gpu-od")
    world.pool.delete_warm_pool("gpu-od")
    assert seen == IAM_ACTIONS


# --- classification: one row each, by code


ROWS = [
    ("Throttling", 400, RateLimitedError),
    ("RequestLimitExceeded", 400, RateLimitedError),
    ("InternalError", 500, TransientError),
    ("ServiceUnavailable", 503, TransientError),
    ("SomethingNew", 502, TransientError),
    (TIMEOUT, 0, TransientError),
    ("ScalingActivityInProgress", 400, DeferredError),
    ("ResourceContention", 500, DeferredError),
    ("InsufficientInstanceCapacity", 400, CapacityError),
    ("UnfulfillableCapacity", 400, CapacityError),
    ("MaxSpotInstanceCountExceeded", 400, CapacityError),
    ("AccessDenied", 403, AuthenticationError),
    ("UnauthorizedOperation", 403, AuthenticationError),
    ("ValidationError", 400, PermanentError),
    ("InvalidParameterValue", 400, PermanentError),
    ("LimitExceeded", 400, PermanentError),
    ("SomethingUnknown", 400, PermanentError),
]


class TestClassification:
    """One shared moto world (class-scoped): a failed call changes nothing in it."""

    @pytest.mark.parametrize(
        ("code", "status", "expected"), [pytest.param(*row, id=row[0].strip("_")) for row in ROWS]
    )
    def test_error_classified_by_code(
        self, fresh_pool: AwsAsgPool, code: str, status: int, expected: type[AutoscalerError]
    ) -> None:
        fault = Fault("SetDesiredCapacity", code, status=status, times=None)
        inject(fresh_pool.autoscaling, fault)
        with pytest.raises(AutoscalerError) as info:
            fresh_pool.set_desired_capacity("gpu-od", 1)
        assert type(info.value) is expected
        assert info.value.code == ("Timeout" if code == TIMEOUT else code)
        assert fault.attempts == 1  # botocore_max_attempts=1: the adapter itself never retries


def test_ec2_errors_classified_too(world: World) -> None:
    world.pool.set_desired_capacity("gpu-od", 1)
    inject(world.pool.ec2, Fault("DescribeInstances", "UnauthorizedOperation", status=403))
    with pytest.raises(AuthenticationError) as info:
        world.pool.describe(["gpu-od"])
    assert info.value.code == "UnauthorizedOperation"


# --- bounded retries


class Sleeps:
    def __init__(self) -> None:
        self.total = 0.0

    def __call__(self, seconds: float) -> None:
        self.total += seconds


def test_throttle_storm_stays_within_the_call_bound() -> None:
    with mock_aws():
        asg, ec2 = aws_clients(None)
        create_pools(asg, ec2, SPECS)
        pool = make_pool(botocore_attempts=2)
        retry = RetryPolicy(
            RetryConfig(max_attempts=3), pool.metrics, sleep=Sleeps(), rng=random.Random(1)
        )
        fault = inject(pool.autoscaling, Fault("SetDesiredCapacity", "Throttling", times=None))
        with pytest.raises(RateLimitedError):
            retry.call(lambda: pool.set_desired_capacity("gpu-od", 1), pool="gpu-od")
        # worst case per logical call = our max_attempts * botocore total_max_attempts
        assert fault.attempts == 3 * 2
        m = pool.metrics
        assert (
            sample(
                m,
                "ci_autoscaler_aws_calls_total",
                operation="SetDesiredCapacity",
                code="Throttling",
            )
            == 3
        )
        assert (
            sample(
                m, "ci_autoscaler_cloud_retries_total", pool="gpu-od", error_class="rate_limited"
            )
            == 2
        )


def test_throttle_that_clears_succeeds_within_the_bound() -> None:
    with mock_aws():
        asg, ec2 = aws_clients(None)
        create_pools(asg, ec2, SPECS)
        pool = make_pool(botocore_attempts=2)
        retry = RetryPolicy(
            RetryConfig(max_attempts=3), pool.metrics, sleep=Sleeps(), rng=random.Random(1)
        )
        fault = inject(pool.autoscaling, Fault("SetDesiredCapacity", "Throttling", times=3))
        retry.call(lambda: pool.set_desired_capacity("gpu-od", 1), pool="gpu-od")
        assert fault.attempts == 4
        assert pool.describe(["gpu-od"])["gpu-od"].desired_capacity == 1


# --- the scaler over the real adapter: failover, back-off, alert once


def scaler_for(pool: AwsAsgPool, cfg: Config) -> Scaler:
    source = FakeSource()
    return Scaler(
        pool,
        source,
        cfg,
        pool.metrics,
        sleep=Sleeps(),
        rng=random.Random(3),
        **handover_ports(source),
    )


def tick(s: Scaler, queued: int, now: datetime) -> dict[str, int]:
    decisions = s.step(
        snapshot({GPU: queued}, at=now), observation([], now), now, observation_fresh=True
    )
    return {d.pool: d.desired for d in decisions}


CFG = config(rtype(pools=("gpu-spot", "gpu-od"), boot_timeout=86400.0))


def test_capacity_error_fails_over_and_backs_off(world: World) -> None:
    s = scaler_for(world.pool, CFG)
    fault = inject(
        world.pool.autoscaling,
        Fault("SetDesiredCapacity", "InsufficientInstanceCapacity", times=None, match="gpu-spot"),
    )
    now = datetime.now(UTC)
    assert tick(s, 2, now) == {"gpu-spot": 0, "gpu-od": 2}
    assert fault.attempts == 1
    assert s.state.backoff_seconds == {"gpu-spot": 300.0}
    m = world.metrics
    assert sample(m, "ci_autoscaler_pool_failovers_total", runner_type=GPU, pool="gpu-spot") == 1
    assert sample(m, "ci_autoscaler_pool_capacity_backoff_seconds", pool="gpu-spot") == 300.0

    assert tick(s, 3, now + timedelta(seconds=60)) == {"gpu-spot": 0, "gpu-od": 3}
    assert fault.attempts == 1  # backed-off pool not even tried

    assert tick(s, 4, now + timedelta(seconds=301)) == {"gpu-spot": 0, "gpu-od": 4}
    assert fault.attempts == 2
    assert s.state.backoff_seconds == {"gpu-spot": 600.0}
    assert s.last_problems == []  # another pool still has capacity

    fault.times = 0  # capacity is back
    assert tick(s, 5, now + timedelta(seconds=902)) == {"gpu-spot": 1, "gpu-od": 4}
    assert s.state.backoff_seconds == {"gpu-spot": 600.0}  # until it delivers:
    tick(s, 5, now + timedelta(seconds=932))
    assert s.state.backoff_seconds == {}


def test_every_pool_out_of_capacity_is_a_problem(world: World) -> None:
    s = scaler_for(world.pool, CFG)
    inject(
        world.pool.autoscaling,
        Fault("SetDesiredCapacity", "InsufficientInstanceCapacity", times=None),
    )
    tick(s, 2, datetime.now(UTC))
    assert [(p.kind, p.runner_type) for p in s.last_problems] == [("out_of_capacity", GPU)]


def test_permanent_error_alerts_once_without_retry_or_failover(world: World) -> None:
    s = scaler_for(world.pool, CFG)
    fault = inject(
        world.pool.autoscaling, Fault("SetDesiredCapacity", "AccessDenied", status=403, times=None)
    )
    assert tick(s, 2, datetime.now(UTC)) == {"gpu-spot": 0, "gpu-od": 0}
    assert fault.attempts == 1
    assert [(p.kind, p.pool, p.code) for p in s.last_problems] == [
        ("permanent", "gpu-spot", "AccessDenied")
    ]
    assert s.state.backoff_seconds == {}


def test_busy_group_is_left_for_the_next_tick(world: World) -> None:
    s = scaler_for(world.pool, CFG)
    fault = inject(
        world.pool.autoscaling, Fault("SetDesiredCapacity", "ScalingActivityInProgress", times=1)
    )
    now = datetime.now(UTC)
    assert tick(s, 2, now) == {"gpu-spot": 0, "gpu-od": 0}
    assert (fault.attempts, s.last_problems) == (1, [])
    assert tick(s, 2, now + timedelta(seconds=30)) == {"gpu-spot": 2, "gpu-od": 0}


# --- asynchronous capacity failures: SetDesiredCapacity succeeds, the launch fails


def test_describe_reads_the_failed_activities_of_a_short_group_only(world: World) -> None:
    at = datetime(2026, 11, 30, 3, 0, 5, tzinfo=UTC)
    CapacityOutage("gpu-spot", clock=lambda: at).install(world.pool.autoscaling)
    world.pool.set_desired_capacity("gpu-spot", 2)
    world.pool.set_desired_capacity("gpu-od", 1)
    pools = world.pool.describe(["gpu-spot", "gpu-od"])
    spot = pools["gpu-spot"]
    assert (spot.desired_capacity, spot.live_instances) == (2, 0)
    # the StatusMessage comes along, for people, with its classification by AWS's code
    assert spot.activities == (
        ScalingActivity(
            at, ActivityStatus.FAILED, SPOT_CAPACITY_MESSAGE, "InsufficientInstanceCapacity"
        ),
    )
    assert pools["gpu-od"].activities == ()  # not short: not asked
    calls = "ci_autoscaler_aws_calls_total"
    assert sample(world.metrics, calls, operation="DescribeScalingActivities", code="") == 1


def test_async_capacity_failure_fails_over_and_backs_off(world: World) -> None:
    s = scaler_for(world.pool, config(rtype(pools=("gpu-spot", "gpu-od"), boot_timeout=900)))
    clock = [datetime.now(UTC)]
    outage = CapacityOutage("gpu-spot", clock=lambda: clock[0] + timedelta(seconds=2))
    outage.install(world.pool.autoscaling)
    now = clock[0]
    assert tick(s, 2, now) == {"gpu-spot": 2, "gpu-od": 0}  # accepted...
    clock[0] = now + timedelta(seconds=30)
    assert tick(s, 2, clock[0]) == {"gpu-spot": 0, "gpu-od": 2}  # ...failed: over to od
    assert s.state.backoff_seconds == {"gpu-spot": 300.0}
    m = world.metrics
    failures = "ci_autoscaler_provisioning_failures_total"
    assert sample(m, failures, runner_type=GPU, pool="gpu-spot", reason="launch_failed") == 1
    assert sample(m, "ci_autoscaler_pool_failovers_total", runner_type=GPU, pool="gpu-spot") == 1
    assert s.last_problems == []

    outage.end()  # capacity is back
    clock[0] = now + timedelta(seconds=331)
    assert tick(s, 13, clock[0]) == {"gpu-spot": 3, "gpu-od": 10}
    tick(s, 13, clock[0] + timedelta(seconds=30))
    assert s.state.backoff_seconds == {}


def test_throttled_activities_stay_within_the_call_bound() -> None:
    with mock_aws():
        asg, ec2 = aws_clients(None)
        create_pools(asg, ec2, SPECS)
        pool = make_pool(botocore_attempts=2)
        retry = RetryPolicy(
            RetryConfig(max_attempts=3), pool.metrics, sleep=Sleeps(), rng=random.Random(1)
        )
        fault = inject(
            pool.autoscaling, Fault("DescribeScalingActivities", "Throttling", times=None)
        )
        CapacityOutage("gpu-spot").install(pool.autoscaling)  # after: the fault goes first
        pool.set_desired_capacity("gpu-spot", 1)
        with pytest.raises(RateLimitedError):
            retry.call(lambda: pool.describe(["gpu-spot", "gpu-od"]), pool="all")
        assert fault.attempts == 3 * 2  # one page per short pool per attempt, bounded
        calls = "ci_autoscaler_aws_calls_total"
        assert sample(pool.metrics, calls, operation="DescribeAutoScalingGroups", code="") == 3


# --- AWS facts moto does not enforce


def test_protecting_a_pending_instance_fails_the_whole_batch_so_only_in_service_is_asked(
    world: World,
) -> None:
    """Regression: SetInstanceProtection naming a Pending instance is a
    ValidationError on real AWS (moto accepts it) and fails the whole batch: the booting
    instance's batch-mates stayed unprotected and on-call was paged every tick. The policy
    now asks only for InService instances; the booting one is protected once in service."""
    world.pool.set_desired_capacity("gpu-spot", 2)
    ids = [i.id for i in world.pool.describe(["gpu-spot"])["gpu-spot"].instances]
    world.raw_asg.set_instance_protection(
        AutoScalingGroupName="gpu-spot", InstanceIds=ids, ProtectedFromScaleIn=False
    )
    booting = BootingInstances(pending={ids[0]}).install(world.pool.autoscaling)

    with pytest.raises(PermanentError) as info:  # what the old policy's call did
        world.pool.protect_instances("gpu-spot", ids)
    assert info.value.code == "ValidationError" and booting.rejected == 1
    described = world.pool.describe(["gpu-spot"])["gpu-spot"].instances
    assert [i.protected_from_scale_in for i in described] == [False, False]  # none of it

    s = scaler_for(world.pool, CFG)
    tick(s, 2, datetime.now(UTC))
    assert s.last_problems == [] and booting.rejected == 1
    instances = world.pool.describe(["gpu-spot"])["gpu-spot"].instances
    assert {i.id: i.protected_from_scale_in for i in instances} == {ids[0]: False, ids[1]: True}

    booting.boot(ids[0])
    tick(s, 2, datetime.now(UTC) + timedelta(seconds=30))
    instances = world.pool.describe(["gpu-spot"])["gpu-spot"].instances
    assert all(i.protected_from_scale_in for i in instances)


VCPU_QUOTA = (
    "Could not launch On-Demand Instances. VcpuLimitExceeded - You have requested more vCPU"
    " capacity than your current vCPU limit of 0 allows for the instance bucket that the"
    " specified instance type belongs to. Launching EC2 instance failed."
)


def test_launch_refused_for_a_quota_pages_with_awss_message(world: World) -> None:
    """A Failed activity whose StatusMessage names VcpuLimitExceeded is read, classified
    and paged through the real adapter; the need still fails over to the next pool."""
    s = scaler_for(world.pool, config(rtype(pools=("gpu-spot", "gpu-od"), boot_timeout=900)))
    clock = [datetime.now(UTC)]
    outage = CapacityOutage(
        "gpu-spot", clock=lambda: clock[0] + timedelta(seconds=2), status_message=VCPU_QUOTA
    )
    outage.install(world.pool.autoscaling)
    now = clock[0]
    assert tick(s, 2, now) == {"gpu-spot": 2, "gpu-od": 0}
    [activity] = world.pool.describe(["gpu-spot"])["gpu-spot"].activities
    assert (activity.code, activity.permanent, activity.message) == (
        "VcpuLimitExceeded",
        True,
        VCPU_QUOTA,
    )
    clock[0] = now + timedelta(seconds=30)
    assert tick(s, 2, clock[0]) == {"gpu-spot": 0, "gpu-od": 2}
    assert [(p.kind, p.pool, p.code) for p in s.last_problems] == [
        ("launch", "gpu-spot", "VcpuLimitExceeded")
    ]
    assert "vCPU limit of 0" in s.last_problems[0].message
    assert s.state.backoff_seconds == {"gpu-spot": 1800.0}

"""Instances in a warm pool are the pool's, whatever their state: against moto in-process,
with :class:`~autoscaler.sim.aws_faults.WarmInstances` playing the warm pool (moto keeps no
warm instances; real AWS lists them under DescribeWarmPool, not the group's instances).

The story: with ``warm_pool.state: running`` an instance waits running for hours. A
persistent runner registered in its earlier stint (``reuse``) stays registered: online
while the machine runs warm, offline while it is stopped. The controller counted that
runner as an idle one (so a queued job got no machine while the warm one could not take
it), deregistered it as stale while it was stopped, and the moment the instance left the
warm pool, its hours-old EC2 launch time made it an orphan: unregistered past
``boot_timeout``, terminated before its runner could register.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from prometheus_client import CollectorRegistry

from autoscaler.config import AwsConfig, Config, PoolConfig, WarmPoolConfig
from autoscaler.domain import Runner, WarmPoolSpec
from autoscaler.scale.aws.asg import AwsAsgPool
from autoscaler.scale.plan import Plan
from autoscaler.scale.scaler import Scaler
from autoscaler.sim.aws_faults import WarmInstances
from autoscaler.sim.fleet import PoolSpec, aws_clients, create_pools, moto_session
from autoscaler.telemetry import Metrics
from tests.unit.handover_fakes import handover_ports
from tests.unit.scaling_fakes import GPU, FakeSource, config, observation, rtype, snapshot

POOL = "gpu-od"


class Sleeps:
    def __call__(self, seconds: float) -> None:
        pass


@pytest.fixture
def pool(moto_in_process: boto3.session.Session) -> AwsAsgPool:
    asg, ec2 = aws_clients(None)
    create_pools(asg, ec2, [PoolSpec(POOL, GPU, (GPU,), max_size=10)])
    ticks = iter(range(0, 10**6, 60))  # a minute between calls: launch times looked up each tick
    p = AwsAsgPool(
        AwsConfig(),
        Metrics(CollectorRegistry()),
        session=moto_session(),
        monotonic=lambda: float(next(ticks)),
    )
    p.set_desired_capacity(POOL, 2)
    p.put_warm_pool(POOL, WarmPoolSpec("running", 1, None, reuse=False))  # an earlier tick's
    return p


def warm_config(state: str, *, ephemeral: bool = False) -> Config:
    rt = rtype(pools=(POOL,), boot_timeout=600.0, idle_timeout=3600.0)
    if ephemeral:
        rt = rt.model_copy(update={"mode": "ephemeral"})
    warm = WarmPoolConfig(state=state, min_size=1, reuse=not ephemeral)
    return config(rt).model_copy(update={"pools": (PoolConfig(name=POOL, warm_pool=warm),)})


def scaler_for(pool: AwsAsgPool, cfg: Config) -> Scaler:
    return Scaler(
        pool,
        FakeSource(),
        cfg,
        pool.metrics,
        sleep=Sleeps(),
        rng=random.Random(3),
        warm_pools=pool,
        **handover_ports(FakeSource()),
    )


def ids(pool: AwsAsgPool) -> list[str]:
    """The group's instances as moto has them (warm ones too)."""
    asg, _ = aws_clients(None)
    asg = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[POOL])
    return sorted(i["InstanceId"] for i in asg["AutoScalingGroups"][0]["Instances"])


def named(pool_name: str, instance_id: str, *, online: bool, busy: bool, n: int) -> Runner:
    return Runner(n, f"{pool_name}-{instance_id}", frozenset({"self-hosted", GPU}), online, busy)


def step(s: Scaler, at: datetime, runners: list[Runner], queued: int = 0) -> Plan:
    s.step(snapshot({GPU: queued}, at=at), observation(runners, at), at, observation_fresh=True)
    assert s.last_plan is not None
    return s.last_plan


def later() -> datetime:
    """Two hours after moto launched the instances: older than any boot_timeout."""
    return datetime.now(UTC).replace(microsecond=0) + timedelta(hours=2)


@pytest.mark.parametrize(
    ("state", "online"),
    [
        pytest.param("Warmed:Running", True, id="running-warm-runner-online"),
        pytest.param("Warmed:Stopped", False, id="stopped-warm-runner-offline"),
        pytest.param("Warmed:Hibernated", False, id="hibernated-warm-runner-offline"),
    ],
)
def test_a_warm_instances_runner_is_no_idle_runner_and_not_stale(
    pool: AwsAsgPool, state: str, online: bool
) -> None:
    serving, warm = ids(pool)
    WarmInstances(POOL, {warm: state}).install(pool.autoscaling)
    s = scaler_for(pool, warm_config("running"))
    now = later()
    runners = [
        named(POOL, serving, online=True, busy=True, n=1),
        named(POOL, warm, online=online, busy=False, n=2),
    ]
    plan = step(s, now, runners, queued=1)
    assert [(u.runner_type, u.need) for u in plan.scale_ups] == [(GPU, 1)], (
        "the warm machine's runner cannot take the queued job: a machine is asked for"
    )
    assert plan.stale_runners == ()
    assert plan.scale_ins == ()
    assert plan.orphans == ()
    assert warm in ids(pool), "the warm instance is still there"


def test_an_instance_leaving_a_running_warm_pool_is_no_orphan(pool: AwsAsgPool) -> None:
    """An ephemeral instance waits running in the warm pool for two hours (EC2's launch
    time is two hours old), then goes in service: its boot clock starts then, and it gets
    its JIT config instead of being terminated as an orphan."""
    serving, warm = ids(pool)
    warm_pool = WarmInstances(POOL, {warm: "Warmed:Running"}).install(pool.autoscaling)
    s = scaler_for(pool, warm_config("running"))
    now = later()
    busy = named(POOL, serving, online=True, busy=True, n=1)
    plan = step(s, now, [busy])
    assert plan.orphans == ()

    del warm_pool.warm[warm]  # a scale-out: the group takes it from the warm pool
    plan = step(s, now + timedelta(seconds=30), [busy], queued=1)
    assert plan.orphans == (), "two hours since EC2 launched it, but seconds in service"
    assert warm in ids(pool)
    assert s.handover.last_plan is not None
    assert [r.instance_id for r in s.handover.last_plan.register] == [warm]
    step(s, now + timedelta(seconds=60 + 600), [busy], queued=1)
    assert warm not in ids(pool), (
        "its runner still offline boot_timeout after it left the warm pool: terminated now"
    )

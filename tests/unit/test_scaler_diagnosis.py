"""What the scaler keeps for diagnosis: its view of the tick, each pool's last capacity
failure (AWS's code or message), and how long capacity took to come online."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime, timedelta

from prometheus_client import CollectorRegistry

from autoscaler.config import AwsConfig, RetryConfig
from autoscaler.domain import Cause
from autoscaler.errors import AuthenticationError, CapacityError
from autoscaler.scale.diagnosis import diagnose
from autoscaler.scale.scaler import Scaler
from autoscaler.telemetry import Metrics
from tests.unit.handover_fakes import handover_ports
from tests.unit.scaling_fakes import (
    GPU,
    T0,
    FakePool,
    FakeSource,
    config,
    observation,
    pool,
    rtype,
    runner,
    snapshot,
)

CFG = config(rtype()).model_copy(update={"aws": AwsConfig(retry=RetryConfig(max_attempts=1))})


def make(fake: FakePool, source: FakeSource | None = None) -> Scaler:
    source = source or FakeSource()
    return Scaler(
        fake,
        source,
        CFG,
        Metrics(CollectorRegistry()),
        sleep=lambda _: None,
        rng=random.Random(0),
        **handover_ports(source),
    )


def tick(s: Scaler, fake: FakePool, queued: int, now: datetime, *, dry: bool = False) -> None:
    fake.now = now
    runners = tuple(getattr(s.source, "runners", {}).values())
    s.step(
        snapshot({GPU: queued}, at=now),
        observation(runners, now),
        now,
        observation_fresh=True,
        dry_run=dry,
    )


def causes(s: Scaler, queued: int, now: datetime, *, dry: bool = False) -> tuple[Cause, ...]:
    return diagnose(
        snapshot({GPU: queued}, at=now),
        observation((), now),
        CFG,
        now,
        scaling=s.last_view,
        problems=s.last_problems,
        dry_run=dry,
    )[GPU]


def world() -> FakePool:
    return FakePool({"gpu-spot": pool("gpu-spot", max_size=3), "gpu-od": pool("gpu-od")})


def test_a_synchronous_capacity_refusal_is_remembered_with_its_code() -> None:
    fake = world()
    fake.fail(
        "set_desired_capacity", "gpu-spot", CapacityError("no", code="InsufficientInstanceCapacity")
    )
    s = make(fake)
    tick(s, fake, 2, T0)
    assert s.last_view is not None
    assert s.last_view.failures["gpu-spot"].code == "InsufficientInstanceCapacity"
    assert s.last_view.state.in_backoff("gpu-spot", T0)  # the executed back-off, not the plan's
    assert [d.action for d in s.last_view.decisions] == ["hold", "scale_up"]
    assert causes(s, 2, T0)[0] == Cause(
        "capacity_backoff",
        "gpu-spot since 03:00:00 UTC, skipped until 03:05:00 UTC;"
        " AWS: InsufficientInstanceCapacity",
    )


def test_a_failed_launch_is_remembered_with_aws_message_until_the_pool_delivers() -> None:
    fake = world()
    fake.outage.add("gpu-spot")
    fake.outage_message = "We currently do not have sufficient g5.4xlarge capacity (us-east-1a)."
    s = make(fake)
    tick(s, fake, 2, T0)
    later = T0 + timedelta(seconds=60)
    tick(s, fake, 2, later)  # Failed activity since our scale-up: released, backed off
    [backoff, *_] = causes(s, 2, later)
    assert backoff == Cause(
        "capacity_backoff",
        "gpu-spot since 03:01:00 UTC, skipped until 03:06:00 UTC; Failed scaling activity,"
        " AWS: We currently do not have sufficient g5.4xlarge capacity (us-east-1a).",
    )
    fake.outage.clear()
    back = later + timedelta(seconds=301)
    tick(s, fake, 5, back)  # back-off over: spot scaled up again and delivers
    tick(s, fake, 5, back + timedelta(seconds=30))
    assert s.failures == {} and s.last_view is not None and s.last_view.failures == {}


def test_a_launch_a_person_must_fix_is_a_permanent_error_with_awss_words() -> None:
    """Since launches are classified by AWS's code: a quota refusal is not
    capacity coming back by itself. The type says permanent_error with AWS's message (the
    scaler pages it every tick), and the back-off says the launch was refused instead of
    repeating the message; the need still fails over to on-demand."""
    quota = "Could not launch On-Demand Instances. VcpuLimitExceeded - You have requested more"
    fake = world()
    fake.refusal["gpu-spot"] = ("VcpuLimitExceeded", quota)
    s = make(fake)
    tick(s, fake, 2, T0)
    later = T0 + timedelta(seconds=60)
    tick(s, fake, 2, later)
    found = causes(s, 2, later)
    assert [c.code for c in found][:2] == ["permanent_error", "capacity_backoff"]
    assert found[0].detail == f"gpu-spot cannot launch instances (VcpuLimitExceeded): {quota}"
    assert found[1].detail == (
        "gpu-spot since 03:01:00 UTC, skipped until 03:31:00 UTC;"
        " launch refused (VcpuLimitExceeded): a person must act"
    )
    assert s.failures["gpu-spot"].code == "VcpuLimitExceeded"
    assert fake.pools["gpu-od"].desired_capacity == 2


def test_dry_run_shows_the_failure_without_remembering_it() -> None:
    fake = world()
    fake.outage.add("gpu-spot")
    s = make(fake)
    tick(s, fake, 2, T0)
    later = T0 + timedelta(seconds=60)
    tick(s, fake, 2, later, dry=True)
    assert s.last_view is not None and "gpu-spot" in s.last_view.failures
    assert s.failures == {}
    assert [c.code for c in causes(s, 2, later, dry=True)] == ["dry_run", "capacity_backoff"]


def test_describe_failing_leaves_a_view_without_pools() -> None:
    fake = world()
    fake.fail("describe", "*", AuthenticationError("denied", code="AccessDenied"))
    s = make(fake)
    tick(s, fake, 2, T0)
    assert s.last_view is not None and s.last_view.plan is None and s.last_view.pools == {}
    assert [c.code for c in causes(s, 2, T0)] == ["permanent_error"]


def test_provisioning_seconds_from_scale_up_to_runner_online() -> None:
    fake = world()
    source = FakeSource()
    s = make(fake, source)
    tick(s, fake, 2, T0)  # +2 in gpu-spot
    ids = [i.id for i in fake.pools["gpu-spot"].instances]
    for n, instance_id in enumerate(ids, start=1):
        source.runners[n] = replace(
            runner(0, "gpu-spot", rid=n), name=f"gpu-spot-{instance_id}", busy=True
        )
    tick(s, fake, 0, T0 + timedelta(seconds=150))
    name = "ci_autoscaler_provisioning_seconds"
    labels = {"runner_type": GPU, "pool": "gpu-spot"}
    registry = s.metrics.registry
    assert registry.get_sample_value(name + "_count", labels) == 2
    assert registry.get_sample_value(name + "_sum", labels) == 300
    assert registry.get_sample_value(name + "_bucket", {**labels, "le": "180.0"}) == 2
    tick(s, fake, 0, T0 + timedelta(seconds=180))
    assert registry.get_sample_value(name + "_count", labels) == 2  # counted once

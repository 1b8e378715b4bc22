"""Orphan cleanup never terminates a runner that exists: the decision (pure, clocks as
inputs) and the scaler's second look at GitHub right before it terminates."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.config import AwsConfig, Config, RetryConfig
from autoscaler.domain import ClockSkew
from autoscaler.errors import TransientError
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
    iid,
    inst,
    observation,
    pool,
    rtype,
    runner,
    snapshot,
)

CFG = config(rtype(pools=("gpu-spot", "gpu-od"), boot_timeout=900))


def plan_for(instance_age: float, skew: ClockSkew) -> Plan:
    """One instance in gpu-spot with no runner, ``instance_age`` seconds old by our clock."""
    pools = {"gpu-spot": pool("gpu-spot", [inst(1, "gpu-spot", age=instance_age)])}
    pools["gpu-od"] = pool("gpu-od")
    return decide(
        snapshot({GPU: 0}),
        (),
        pools,
        CFG,
        ScalingState(),
        T0,
        observation_fresh=True,
        clock_skew=skew,
    )


CLOCKS = [
    pytest.param(1000.0, ClockSkew(github=0.4, aws=-0.6), "terminate", id="true-orphan-goes"),
    pytest.param(600.0, ClockSkew(), "none", id="young-instance-stays"),
    # Regression: our clock 120 s ahead of AWS's. The instance was launched 800 s ago by
    # AWS's clock (LaunchTime), 920 s ago by ours: judged by our clock alone it was past
    # boot_timeout (900 s) and terminated while its runner was still 100 s from its
    # deadline. Its age is now read on AWS's clock.
    pytest.param(920.0, ClockSkew(aws=-120.0), "none", id="our-clock-ahead-of-aws-corrected"),
    pytest.param(1000.0, ClockSkew(aws=-120.0), "none", id="ahead-120s-still-young-on-aws"),
    pytest.param(1100.0, ClockSkew(aws=-120.0), "terminate", id="ahead-120s-old-on-aws-too"),
    # Beyond a quarter of boot_timeout (225 s here) no orphan is judged at all: the skew
    # itself may be wrong, and a terminated instance cannot be taken back.
    pytest.param(5000.0, ClockSkew(aws=-400.0), "held", id="aws-skew-past-a-quarter-holds"),
    pytest.param(5000.0, ClockSkew(github=300.0), "held", id="github-skew-past-a-quarter"),
    pytest.param(5000.0, ClockSkew(github=-226.0), "held", id="negative-skew-counts-too"),
    pytest.param(5000.0, ClockSkew(github=224.0), "terminate", id="just-under-a-quarter"),
]


@pytest.mark.parametrize(("age", "skew", "expected"), CLOCKS)
def test_orphan_age_is_read_on_the_cloud_clock_and_a_large_skew_holds(
    age: float, skew: ClockSkew, expected: str
) -> None:
    plan = plan_for(age, skew)
    got = "terminate" if plan.orphans else "held" if plan.orphans_held else "none"
    assert got == expected
    if expected == "held":
        [decision] = [d for d in plan.decisions if d.pool == "gpu-spot"]
        assert "clocks are" in decision.reason and decision.action != "terminate_orphan"


def make(fake: FakePool, source: FakeSource, cfg: Config = CFG) -> Scaler:
    cfg = cfg.model_copy(update={"aws": AwsConfig(retry=RetryConfig(max_attempts=3))})
    return Scaler(
        fake,
        source,
        cfg,
        Metrics(CollectorRegistry()),
        sleep=lambda _: None,
        rng=random.Random(0),
        **handover_ports(source),
    )


def old_unregistered() -> FakePool:
    """gpu-spot holds one instance 1000 s old (past boot_timeout) with no runner at poll."""
    return FakePool(
        {"gpu-spot": pool("gpu-spot", [inst(1, "gpu-spot", age=1000)]), "gpu-od": pool("gpu-od")}
    )


def kept(s: Scaler, reason: str) -> float:
    labels = {"runner_type": GPU, "pool": "gpu-spot", "reason": reason}
    return s.metrics.registry.get_sample_value("ci_autoscaler_orphans_kept_total", labels) or 0.0


def terminated(fake: FakePool) -> list[object]:
    return [c[2] for c in fake.calls if c[0] == "terminate_instance"]


def test_runner_registered_after_the_poll_and_busy_is_not_terminated_as_orphan() -> None:
    """Regression: an instance just past boot_timeout registered its
    runner after the tick's GitHub poll, and the runner took a job before the scaler acted.
    The scaler judged the instance from the poll's stale runner list ("never registered")
    and terminated it mid-job. It now asks GitHub for the runner by name right before it
    terminates an orphan, and leaves the instance alone when the runner exists."""
    fake, source = old_unregistered(), FakeSource()
    s = make(fake, source)
    polled = observation((), T0)  # GitHub's list at poll time: no runner for the instance
    source.runners[7] = runner(1, "gpu-spot", busy=True, rid=7)  # registers, takes a job
    decisions = s.step(snapshot({GPU: 0}), polled, T0, observation_fresh=True)

    assert terminated(fake) == []
    assert source.lookups == [f"gpu-spot-{iid(1)}"]
    assert kept(s, "registered") == 1
    [spot] = [d for d in decisions if d.pool == "gpu-spot"]
    assert "registered since the poll: kept" in spot.reason
    assert spot.desired == spot.current


def test_true_orphan_is_terminated_after_github_confirms_no_runner() -> None:
    fake, source = old_unregistered(), FakeSource()
    s = make(fake, source)
    s.step(snapshot({GPU: 0}), observation((), T0), T0, observation_fresh=True)
    assert terminated(fake) == [iid(1)]
    assert source.lookups == [f"gpu-spot-{iid(1)}"]


def test_orphan_kept_when_github_cannot_be_asked() -> None:
    """ "Cannot tell" never reads as "not there": a failed lookup keeps the instance for a
    later tick (counted, and a transient failure is not paged)."""
    fake, source = old_unregistered(), FakeSource()
    source.lookup_errors = [TransientError("GitHub 502", code="502")]
    s = make(fake, source)
    s.step(snapshot({GPU: 0}), observation((), T0), T0, observation_fresh=True)
    assert terminated(fake) == []
    assert kept(s, "lookup_failed") == 1
    assert s.last_problems == []


def test_skewed_clocks_keep_orphans_and_are_counted() -> None:
    """The scaler decides with the skew the adapters measured (AWS's from the pool,
    GitHub's from the poll) and counts the orphans it kept because of it."""
    fake = FakePool(
        {"gpu-spot": pool("gpu-spot", [inst(1, "gpu-spot", age=5000)]), "gpu-od": pool("gpu-od")}
    )
    fake.skew = -400.0  # AWS's clock 400 s behind ours: LaunchTime cannot be trusted
    source = FakeSource()
    s = make(fake, source)
    polled = replace(observation((), T0), clock_skew_seconds=1.0)
    s.step(snapshot({GPU: 0}), polled, T0, observation_fresh=True)
    assert terminated(fake) == [] and source.lookups == []
    assert kept(s, "clock_skew") == 1
    assert s.last_clock_skew == ClockSkew(github=1.0, aws=-400.0)


def test_a_held_orphan_keeps_its_pool_size() -> None:
    plan = plan_for(5000.0, ClockSkew(aws=-400.0))
    [d] = [d for d in plan.decisions if d.pool == "gpu-spot"]
    assert (d.current, d.desired) == (1, 1)
    assert plan.orphans == () and [o.instance_id for o in plan.orphans_held] == [iid(1)]


def test_second_look_happens_only_for_orphans() -> None:
    """A healthy fleet costs no extra GitHub request."""
    fake = FakePool(
        {"gpu-spot": pool("gpu-spot", [inst(1, "gpu-spot", age=1000)]), "gpu-od": pool("gpu-od")}
    )
    source = FakeSource({1: runner(1, "gpu-spot")})
    s = make(fake, source)
    polled = observation(list(source.runners.values()))
    s.step(snapshot({GPU: 0}), polled, T0, observation_fresh=True)
    assert source.lookups == [] and terminated(fake) == []

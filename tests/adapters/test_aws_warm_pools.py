"""Warm pools against moto in-process: the adapter's calls, and the scaler applying them.

A group listed under ``pools`` gets the warm pool the configuration says (DescribeWarmPool
shows its state and sizes), loses it when ``warm_pool`` is taken out, and a group not
listed keeps whatever warm pool it has. AWS's refusal (a warm pool on a mixed instances
group is a ValidationError) reaches on-call as a permanent problem, never a traceback.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from prometheus_client import CollectorRegistry

from autoscaler.config import AwsConfig, Config, PoolConfig, WarmPoolConfig
from autoscaler.domain import WarmPoolSpec
from autoscaler.errors import PermanentError, TransientError
from autoscaler.scale.aws.asg import IAM_ACTIONS, AwsAsgPool
from autoscaler.scale.scaler import Scaler
from autoscaler.sim.aws_faults import Fault, inject
from autoscaler.sim.fleet import PoolSpec, aws_clients, create_pools, moto_session
from autoscaler.telemetry import Metrics
from tests.unit.handover_fakes import handover_ports
from tests.unit.scaling_fakes import GPU, FakeSource, config, observation, rtype, snapshot

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SPECS = [
    PoolSpec("gpu-od", GPU, (GPU,), max_size=10),
    PoolSpec("gpu-other", GPU, (GPU,), max_size=10),
]


class Sleeps:
    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
def pool(moto_in_process: boto3.session.Session) -> AwsAsgPool:
    asg, ec2 = aws_clients(None)
    create_pools(asg, ec2, SPECS)
    return AwsAsgPool(AwsConfig(), Metrics(CollectorRegistry()), session=moto_session())


def warm_config(**pools: WarmPoolConfig | None) -> Config:
    base = config(rtype(pools=("gpu-od", "gpu-other")))
    listed = tuple(PoolConfig(name=name, warm_pool=warm) for name, warm in pools.items())
    return base.model_copy(update={"pools": listed})


def scaler_for(pool: AwsAsgPool, cfg: Config) -> Scaler:
    source = FakeSource()
    return Scaler(
        pool,
        source,
        cfg,
        pool.metrics,
        sleep=Sleeps(),
        rng=random.Random(3),
        warm_pools=pool,
        **handover_ports(source),
    )


def tick(s: Scaler, *, dry_run: bool = False) -> None:
    s.step(
        snapshot({GPU: 0}, at=NOW),
        observation([], NOW),
        NOW,
        observation_fresh=True,
        dry_run=dry_run,
    )


def raw_warm_pool(pool: AwsAsgPool, name: str) -> dict[str, Any] | None:
    answer = pool.autoscaling.describe_warm_pool(AutoScalingGroupName=name)
    found: dict[str, Any] | None = answer.get("WarmPoolConfiguration")
    return found


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param(WarmPoolSpec("stopped", 2, 8, reuse=False), id="stopped"),
        pytest.param(WarmPoolSpec("hibernated", 0, None, reuse=False), id="hibernated-maxsize"),
        pytest.param(WarmPoolSpec("running", 1, 3, reuse=True), id="running-reuse"),
    ],
)
def test_put_describe_delete(pool: AwsAsgPool, spec: WarmPoolSpec) -> None:
    assert pool.describe_warm_pool("gpu-od") is None
    pool.put_warm_pool("gpu-od", spec)
    found = pool.describe_warm_pool("gpu-od")
    assert found is not None
    assert found.spec == spec
    assert found.instances == ()  # moto keeps no warm instances
    pool.delete_warm_pool("gpu-od")
    assert pool.describe_warm_pool("gpu-od") is None


def test_reuse_on_scale_in_is_always_sent_false_unless_asked(pool: AwsAsgPool) -> None:
    pool.put_warm_pool("gpu-od", WarmPoolSpec("stopped", 0, None, reuse=False))
    raw = raw_warm_pool(pool, "gpu-od")
    assert raw is not None
    assert raw["InstanceReusePolicy"] == {"ReuseOnScaleIn": False}
    assert raw["PoolState"] == "Stopped"


def test_the_iam_actions_name_the_warm_pool_calls() -> None:
    assert {
        "autoscaling:PutWarmPool",
        "autoscaling:DescribeWarmPool",
        "autoscaling:DeleteWarmPool",
    } <= IAM_ACTIONS


def test_the_scaler_applies_changes_and_removes_a_warm_pool(pool: AwsAsgPool) -> None:
    on = warm_config(**{"gpu-od": WarmPoolConfig(state="stopped", min_size=2, max_prepared=6)})
    tick(scaler_for(pool, on))
    assert raw_warm_pool(pool, "gpu-od") is not None
    found = pool.describe_warm_pool("gpu-od")
    assert found is not None
    assert found.spec == WarmPoolSpec("stopped", 2, 6, reuse=False)

    bigger = warm_config(**{"gpu-od": WarmPoolConfig(state="running", min_size=4)})
    s = scaler_for(pool, bigger)
    tick(s)
    found = pool.describe_warm_pool("gpu-od")
    assert found is not None
    assert found.spec == WarmPoolSpec("running", 4, None, reuse=False)
    assert s.last_view is not None
    assert [v.change.action for v in s.last_view.warm] == ["put"]
    tick(s)  # now it matches: nothing to do
    assert s.last_view is not None
    assert [v.change.action for v in s.last_view.warm] == ["keep"]

    tick(scaler_for(pool, warm_config(**{"gpu-od": None})))
    assert pool.describe_warm_pool("gpu-od") is None


def test_a_dry_run_changes_no_warm_pool(pool: AwsAsgPool) -> None:
    s = scaler_for(pool, warm_config(**{"gpu-od": WarmPoolConfig(min_size=1)}))
    tick(s, dry_run=True)
    assert pool.describe_warm_pool("gpu-od") is None
    assert s.last_view is not None
    [view] = s.last_view.warm
    assert (view.change.action, view.done) == ("put", False)


def test_a_group_not_listed_keeps_its_warm_pool(pool: AwsAsgPool) -> None:
    theirs = WarmPoolSpec("stopped", 3, None, reuse=False)
    pool.put_warm_pool("gpu-other", theirs)  # terraform's, say
    tick(scaler_for(pool, warm_config(**{"gpu-od": WarmPoolConfig()})))
    found = pool.describe_warm_pool("gpu-other")
    assert found is not None
    assert found.spec == theirs


def test_metrics_show_the_configured_minimum_and_warm_instances(pool: AwsAsgPool) -> None:
    tick(scaler_for(pool, warm_config(**{"gpu-od": WarmPoolConfig(min_size=2)})))
    reg = pool.metrics.registry
    labels = {"runner_type": GPU, "pool": "gpu-od"}
    assert reg.get_sample_value("ci_autoscaler_warm_pool_min_size", labels) == 2
    stopped = {**labels, "state": "stopped"}
    assert reg.get_sample_value("ci_autoscaler_warm_pool_instances", stopped) == 0


def test_aws_refusing_a_warm_pool_is_a_permanent_problem(pool: AwsAsgPool) -> None:
    """AWS answers ValidationError for a warm pool on a mixed instances group (moto does
    not check): translated at the edge, reported once, never retried."""
    fault = inject(pool.autoscaling, Fault("PutWarmPool", "ValidationError", times=None))
    s = scaler_for(pool, warm_config(**{"gpu-od": WarmPoolConfig()}))
    tick(s)
    assert fault.attempts == 1
    assert [(p.kind, p.pool, p.code) for p in s.last_problems] == [
        ("permanent", "gpu-od", "ValidationError")
    ]
    with pytest.raises(PermanentError):
        pool.put_warm_pool("gpu-od", WarmPoolSpec("stopped", 0, None, reuse=False))


def test_throttled_describe_is_retried_by_the_one_policy(pool: AwsAsgPool) -> None:
    fault = inject(pool.autoscaling, Fault("DescribeWarmPool", "Throttling", times=2))
    s = scaler_for(pool, warm_config(**{"gpu-od": WarmPoolConfig()}))
    tick(s)
    assert fault.attempts == 3
    assert pool.describe_warm_pool("gpu-od") is not None
    inject(pool.autoscaling, Fault("DescribeWarmPool", "Throttling", times=1))
    with pytest.raises(TransientError):
        pool.describe_warm_pool("gpu-od")


# --- ephemeral runners from a warm pool: the JIT config when it leaves, never before


class Lifecycle:
    """Rewrites AWS's answer to DescribeAutoScalingGroups: every instance of the group in
    ``state`` (moto launches straight into service and keeps no warm instances)."""

    def __init__(self, pool: AwsAsgPool, state: str) -> None:
        self.state = state
        pool.autoscaling.meta.events.register(
            "after-call.auto-scaling.DescribeAutoScalingGroups", self
        )

    def __call__(self, parsed: dict[str, Any], **_: Any) -> None:
        for group in parsed.get("AutoScalingGroups", []):
            for instance in group.get("Instances", []):
                instance["LifecycleState"] = self.state


def test_a_warm_instance_gets_its_jit_config_only_once_in_the_group(
    pool: AwsAsgPool,
) -> None:
    cfg = warm_config(**{"gpu-od": WarmPoolConfig(min_size=1)})
    [rt] = cfg.runner_types
    cfg = cfg.model_copy(update={"runner_types": (rt.model_copy(update={"mode": "ephemeral"}),)})
    pool.set_desired_capacity("gpu-od", 1)
    [instance] = pool.describe(["gpu-od"])["gpu-od"].instances
    source = FakeSource()
    ports = handover_ports(source)
    s = Scaler(
        pool,
        source,
        cfg,
        pool.metrics,
        sleep=Sleeps(),
        rng=random.Random(3),
        warm_pools=pool,
        **ports,
    )
    rewrite = Lifecycle(pool, "Warmed:Stopped")

    def step() -> None:
        s.step(snapshot({GPU: 0}, at=NOW), observation([], NOW), NOW, observation_fresh=True)

    step()
    assert ports["registrar"].asked == [], "a stopped warm instance gets no JIT config"
    assert ports["parameters"].values == {}
    rewrite.state = "Pending:Wait"  # the group took it out of the warm pool: starting
    step()
    [(name, *_)] = ports["registrar"].asked
    assert name == f"gpu-od-{instance.id}"
    assert [tag for _, tag in ports["parameters"].values.values()] == [instance.id]

"""The interruption queue on moto's SQS with AWS's sample events, the real ASG adapter on
moto, the real Scaler's back-off, and a hand-written JobSource for the runners."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from prometheus_client import CollectorRegistry

from autoscaler.config import AwsConfig
from autoscaler.domain import Observation, Runner
from autoscaler.job_retry.interruptions import InterruptionHandler, RecordingPool, parse_event
from autoscaler.job_retry.model import REBALANCE, SPOT_INTERRUPTION, TERMINATED, InstanceEvents
from autoscaler.scale.aws.asg import AwsAsgPool
from autoscaler.scale.aws.sqs import SqsInterruptionQueue
from autoscaler.scale.scaler import Scaler
from autoscaler.sim.fleet import PoolSpec, aws_clients, create_pools
from autoscaler.telemetry import Metrics
from tests.adapters.aws_events import (
    asg_terminated,
    body,
    rebalance,
    spot_warning,
    state_change,
)
from tests.unit.handover_fakes import handover_ports
from tests.unit.scaling_fakes import GPU, FakeSource, config, rtype

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SPECS = [PoolSpec("gpu-spot", GPU, (GPU,), max_size=3), PoolSpec("gpu-od", GPU, (GPU,))]


@dataclass
class World:
    sqs: Any
    url: str
    pool: AwsAsgPool
    source: FakeSource
    scaler: Scaler
    handler: InterruptionHandler
    events: InstanceEvents
    metrics: Metrics

    def send(self, text: str) -> None:
        self.sqs.send_message(QueueUrl=self.url, MessageBody=text)

    def left(self) -> int:
        attrs = self.sqs.get_queue_attributes(
            QueueUrl=self.url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(
            attrs["ApproximateNumberOfMessagesNotVisible"]
        )

    def count(self, pool: str, kind: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "ci_autoscaler_interruptions_total", {"pool": pool, "kind": kind}
        )
        return value or 0.0

    def spot_instances(self) -> list[str]:
        return [i.id for i in self.pool.describe(["gpu-spot"])["gpu-spot"].instances]


@pytest.fixture
def world(moto_in_process: boto3.session.Session) -> World:
    asg, ec2 = aws_clients(None)
    create_pools(asg, ec2, SPECS)
    session = moto_in_process
    metrics = Metrics(CollectorRegistry())
    pool = AwsAsgPool(AwsConfig(), metrics, session=session)
    pool.set_desired_capacity("gpu-spot", 2)
    queue = SqsInterruptionQueue("", AwsConfig(), metrics, session=session)
    url = queue.sqs.create_queue(QueueName="ci-autoscaler-interruptions")["QueueUrl"]
    queue.queue_url = url
    source = FakeSource()
    cfg = config(rtype(pools=("gpu-spot", "gpu-od")))
    events = InstanceEvents()
    scaler = Scaler(
        RecordingPool(pool, events, lambda: NOW), source, cfg, metrics, **handover_ports(source)
    )
    handler = InterruptionHandler(
        queue,
        pool,
        ["gpu-spot", "gpu-od"],
        source,
        events,
        interruptions=metrics.interruptions,
        errors=metrics.interruption_queue_errors,
        observed=lambda: Observation(NOW, (), tuple(source.runners.values())),
        backoff=scaler,
    )
    return World(queue.sqs, url, pool, source, scaler, handler, events, metrics)


def add_runner(w: World, instance: str, *, busy: bool, name: str = "gpu-spot") -> int:
    """A runner named as the runner-pool module names them: ``<pool>-<instance id>``."""
    rid = len(w.source.runners) + 1
    w.source.runners[rid] = Runner(rid, f"{name}-{instance}", frozenset(), True, busy)
    return rid


def test_a_spot_warning_frees_the_idle_runner_backs_the_pool_off_and_is_deleted(
    world: World,
) -> None:
    idle_on, busy_on = world.spot_instances()
    idle = add_runner(world, idle_on, busy=False)
    busy = add_runner(world, busy_on, busy=True)
    world.send(body(spot_warning(idle_on)))
    world.send(body(spot_warning(busy_on)))
    world.handler.step(NOW)
    assert world.source.removed == [idle]  # the busy one is left to finish
    assert busy in world.source.runners
    assert world.scaler.state.in_backoff("gpu-spot", NOW)
    assert not world.scaler.state.in_backoff("gpu-od", NOW)
    assert [e.kind for e in world.events.of(busy_on)] == [SPOT_INTERRUPTION]
    assert world.events.of(busy_on)[0].at == NOW  # the sample's placeholder time
    assert world.count("gpu-spot", SPOT_INTERRUPTION) == 2
    assert world.left() == 0


def test_a_rebalance_recommendation_is_a_warning_too(world: World) -> None:
    instance = world.spot_instances()[0]
    world.send(body(rebalance(instance)))
    world.handler.step(NOW)
    assert world.scaler.state.in_backoff("gpu-spot", NOW)
    assert world.count("gpu-spot", REBALANCE) == 1


def test_a_termination_is_remembered_without_a_back_off(world: World) -> None:
    instance = world.spot_instances()[0]
    world.send(body(state_change(instance, "terminated")))
    world.send(body(state_change(instance, "running")))
    world.handler.step(NOW)
    (event,) = world.events.of(instance)
    assert (event.kind, event.at) == (TERMINATED, datetime(2021, 11, 11, 21, 29, 54, tzinfo=UTC))
    assert not world.scaler.state.in_backoff("gpu-spot", NOW)
    assert world.count("none", "other_state") == 1
    assert world.left() == 0


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("not json at all", id="not-json"),
        pytest.param('{"source": "aws.s3", "detail": {}}', id="another-service"),
        pytest.param("[1, 2]", id="a-list"),
        pytest.param('{"source": "aws.ec2", "detail": "x"}', id="detail-not-an-object"),
        pytest.param(
            '{"source": "aws.ec2", "detail-type": "EC2 Spot Instance Interruption '
            'Warning", "detail": {"instance-id": "../etc"}}',
            id="bad-instance-id",
        ),
        pytest.param("[" * 100_000, id="deeply-nested"),
        pytest.param("", id="empty"),
    ],
)
def test_messages_that_are_not_ec2_events_are_counted_and_deleted(world: World, text: str) -> None:
    world.send(text)
    world.handler.step(NOW)
    assert world.count("none", "not_ec2") == 1
    assert world.left() == 0
    assert world.source.removed == []


def test_an_unmanaged_instance_is_counted_and_deleted(world: World) -> None:
    add_runner(world, "i-0fffffffffffffff0", busy=False, name="someones-laptop")
    world.send(body(spot_warning("i-0fffffffffffffff0")))
    world.handler.step(NOW)
    assert world.count("unmanaged", SPOT_INTERRUPTION) == 1
    assert world.source.removed == []
    assert not world.scaler.state.in_backoff("gpu-spot", NOW)
    assert world.left() == 0


def test_batches_past_ten_messages_are_all_read_in_one_tick(world: World) -> None:
    instance = world.spot_instances()[0]
    for _ in range(23):
        world.send(body(rebalance(instance)))
    world.handler.step(NOW)
    assert world.count("gpu-spot", REBALANCE) == 23
    assert world.left() == 0


def test_dry_run_does_not_even_read_the_queue(world: World) -> None:
    """A follower's ticks are dry runs: a message it received would be hidden from the
    leader for the visibility timeout, so it reads nothing."""
    instance = world.spot_instances()[0]
    rid = add_runner(world, instance, busy=False)
    world.send(body(spot_warning(instance)))
    world.handler.step(NOW, dry_run=True)
    assert world.source.removed == []
    assert not world.scaler.state.in_backoff("gpu-spot", NOW)
    world.handler.step(NOW)  # the leader sees it at once: it was never hidden
    assert world.source.removed == [rid]
    assert world.left() == 0


def test_a_queue_that_cannot_be_read_does_not_fail_the_tick(world: World) -> None:
    world.sqs.delete_queue(QueueUrl=world.url)
    world.handler.step(NOW)
    errors = world.metrics.registry.get_sample_value(
        "ci_autoscaler_interruption_queue_errors_total",
        {"operation": "receive", "kind": "permanent"},
    )
    assert errors == 1


def test_our_own_terminations_are_remembered(world: World) -> None:
    victim = world.spot_instances()[0]
    world.scaler.pool.terminate_instance("gpu-spot", victim)
    (event,) = world.events.of(victim)
    assert event.kind == TERMINATED
    assert "this controller" in event.detail


def test_an_auto_scaling_termination_is_remembered_with_its_cause(world: World) -> None:
    instance = world.spot_instances()[0]
    world.send(body(asg_terminated(instance, "ci-gpu-spot")))
    world.handler.step(NOW)
    (event,) = world.events.of(instance)
    assert event.kind == TERMINATED and "description-text" in event.detail
    assert not world.scaler.state.in_backoff("gpu-spot", NOW)
    assert world.count("gpu-spot", TERMINATED) == 1


def test_parse_keeps_a_real_time() -> None:
    parsed = parse_event(body(state_change("i-abcd1111")), NOW - timedelta(days=1))
    assert parsed.event is not None and parsed.event.at.year == 2021


def test_a_termination_reported_after_the_group_let_go_is_still_ours(world: World) -> None:
    """Regression: EC2's ``terminated`` event arrives after the group stopped listing the
    instance, so it read as an unmanaged instance and the job lost there as the user's.
    The pool is remembered from an earlier description, or read from the runner's name."""
    remembered, named = world.spot_instances()
    world.send(body(rebalance(remembered)))  # described now, while the group lists it
    world.handler.step(NOW)
    add_runner(world, named, busy=True)
    for instance in (remembered, named):
        world.pool.terminate_instance("gpu-spot", instance)
    assert world.spot_instances() == []
    world.send(body(state_change(remembered, "terminated")))
    world.send(body(state_change(named, "terminated")))
    world.handler.step(NOW + timedelta(minutes=5))
    assert world.count("gpu-spot", TERMINATED) == 2
    assert world.count("unmanaged", TERMINATED) == 0
    assert [e.kind for e in world.events.of(named)] == [TERMINATED]

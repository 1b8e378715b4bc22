"""Ephemeral runners end to end: the controller (GitHubSource, AwsAsgPool, SsmParameters,
the state store) against the fake GitHub's HTTP server and moto's server, with the fleet
emulator booting instances the way the runner-pool module's boot script does. Machines
come and go: one JIT config each, one job each, terminated once done; at the end nothing
is left registered, running or stored. Faults: an instance that disappears between
generation and hand-over, a controller restart mid-way."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from autoscaler.app.wiring import Runtime, build_runtime
from autoscaler.config import Config, parse_config
from autoscaler.fakes.github import FakeGitHub
from autoscaler.scale.aws.asg import AwsAsgPool
from autoscaler.scale.aws.ssm import SsmParameters
from autoscaler.sim.fleet import Fleet, PoolSpec, aws_clients, create_pools, moto_session
from autoscaler.telemetry import Metrics

LABELS = ("self-hosted", "linux.g5.4xlarge.nvidia.gpu")
POOL = "ci-gpu"
PATH = "/ci-autoscaler/jit"


@dataclass
class World:
    fake: FakeGitHub
    fleet: Fleet
    asg: Any
    ssm: Any
    config: Config
    metrics: Metrics
    runtime: Runtime
    pool: AwsAsgPool
    now: datetime

    def restart(self) -> None:
        """A new controller process on the same state file."""
        self.runtime.close()
        self.metrics = Metrics()
        self.pool = AwsAsgPool(self.config.aws, self.metrics, session=_session())
        self.runtime = _runtime(self.config, self.metrics, self.pool)

    def tick(self, seconds: float = 10.0) -> None:
        self.now += timedelta(seconds=seconds)
        self.fleet.tick(self.now)
        self.runtime.controller.tick(self.now)
        self.check()

    def live(self) -> dict[str, str]:
        groups = self.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[POOL])
        return {
            i["InstanceId"]: i["LifecycleState"]
            for i in groups["AutoScalingGroups"][0]["Instances"]
            if i["LifecycleState"] in ("Pending", "InService")
        }

    def params(self) -> list[str]:
        return [
            p["Name"]
            for p in self.ssm.get_parameters_by_path(Path=PATH, Recursive=True)["Parameters"]
        ]

    def check(self) -> None:
        """Never a machine with two runners."""
        names = [r.name for r in self.fake.runners()]
        assert len(names) == len(set(names)), names

    def sample(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0


def _session() -> boto3.session.Session:
    return moto_session()


def _runtime(config: Config, metrics: Metrics, pool: AwsAsgPool) -> Runtime:
    ssm = SsmParameters(config.aws, metrics, session=_session())
    return build_runtime(config, metrics, pool=pool, parameters=ssm)


@pytest.fixture
def world(moto_endpoint: str, tmp_path: Any) -> Iterator[World]:
    asg, ec2 = aws_clients(moto_endpoint)
    spec = PoolSpec(POOL, "gpu", LABELS, max_size=5, ephemeral=True)
    create_pools(asg, ec2, [spec])
    ssm = _session().client("ssm", endpoint_url=moto_endpoint)
    now = datetime.now(UTC).replace(microsecond=0)
    clock = {"now": now}
    with FakeGitHub("demo-org", clock=lambda: clock["now"]) as fake:
        fake.add_repo("app")
        config = parse_config(
            {
                "poll_interval": "10s",
                "github": {"owner": "demo-org", "api_url": fake.url, "token": "fake-token"},
                "runner_types": {
                    "gpu": {
                        "labels": list(LABELS),
                        "pools": [POOL],
                        "mode": "ephemeral",
                        "boot_timeout": "10m",
                    }
                },
                "aws": {"endpoint_url": moto_endpoint},
                "state": {"path": str(tmp_path / "state.db")},
                "jit": {"parameter_path": PATH},
            },
            env={},
        )
        metrics = Metrics()
        pool = AwsAsgPool(config.aws, metrics, session=_session())
        runtime = _runtime(config, metrics, pool)
        fleet = Fleet(fake, asg, [spec], boot_delay=20, job_duration=60, ssm=ssm)
        w = World(fake, fleet, asg, ssm, config, metrics, runtime, pool, now)
        original = w.tick

        def tick(seconds: float = 10.0) -> None:
            clock["now"] = w.now + timedelta(seconds=seconds)
            original(seconds)

        w.tick = tick  # type: ignore[method-assign]
        try:
            yield w
        finally:
            w.runtime.close()


def test_machines_come_and_go_one_job_each(world: World) -> None:
    jobs = [world.fake.queue_job("app", list(LABELS)) for _ in range(3)]
    for _ in range(10):
        world.tick()
    world.restart()  # mid-way: the ledger in the state file keeps one config per machine
    for _ in range(15):
        world.tick()
    assert all(world.fake.job(j).status == "completed" for j in jobs)
    ran = [world.fake.job(j).runner_name for j in jobs]
    assert len(set(ran)) == 3, ran  # one job per machine
    assert world.fake.jit.issued == 3  # one config per machine, across the restart
    assert world.live() == {} and world.fake.runners() == [] and world.params() == []
    assert world.fleet.busy_terminations == 0 and world.fleet.jit_refused == 0


def test_an_instance_gone_before_hand_over_leaves_no_runner(world: World) -> None:
    """A spot interruption right after GitHub created the runner, before the controller
    stored the config: the next tick deletes the runner and the parameter."""
    world.fake.queue_job("app", list(LABELS))
    world.tick()  # scale up: an instance appears
    [instance] = world.live()

    def interrupt(method: str, path: str, status: int) -> bool:
        if method == "POST" and path.endswith("/generate-jitconfig") and status == 201:
            world.asg.terminate_instance_in_auto_scaling_group(
                InstanceId=instance, ShouldDecrementDesiredCapacity=True
            )
        return False

    world.fake.before_reply = interrupt
    world.tick()
    world.fake.before_reply = None
    assert world.fake.runners() != []  # registered, its machine gone
    world.tick()
    assert not any(r.name.endswith(instance) for r in world.fake.runners())
    assert not any(p.endswith(instance) for p in world.params())
    for _ in range(15):  # the job still gets a machine, and everything is cleaned up
        world.tick()
    assert world.fake.runners() == [] and world.live() == {} and world.params() == []

"""A persistent runner's instance back from the warm pool registers with a fresh token.

End to end: the controller (GitHubSource, AwsAsgPool, SsmParameters, the state file)
against the fake GitHub's HTTP server and moto's server;
:class:`~autoscaler.sim.aws_faults.WarmInstances` plays the warm pool (moto keeps no warm
instances), and :class:`Machine` does what the runner-pool module's boot script does on
each stint in service of a reused instance: read its parameter, claim it (delete), and
``config.sh --replace --token``.

The story: with ``warm_pool.reuse`` a persistent instance goes back to the warm pool on
scale-in, stopped, and comes back hours later. Its registration token was claimed and is
an hour old: expired. The controller had dropped its record while it was warm, and on
its return saw a runner of its name still registered (offline), took it for a runner
"registered without us" and handed over nothing: the machine waited for a credential
that never came, and its stale token could not register it.
"""

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
from autoscaler.sim.aws_faults import WarmInstances
from autoscaler.sim.fleet import PoolSpec, aws_clients, create_pools, moto_session
from autoscaler.telemetry import Metrics

LABELS = ("self-hosted", "linux.4xlarge")
POOL = "ci-cpu"
PATH = "/ci-autoscaler/jit"


@dataclass
class Machine:
    """One reused instance's boot script, run at each start in service."""

    fake: FakeGitHub
    ssm: Any
    instance_id: str
    tokens: list[str]

    @property
    def parameter(self) -> str:
        return f"{PATH}/{POOL}/{self.instance_id}"

    def boot(self) -> int:
        """Read the parameter, claim it, register with ``--replace``; the runner's id."""
        token = self.ssm.get_parameter(Name=self.parameter, WithDecryption=True)
        value = token["Parameter"]["Value"]
        self.ssm.delete_parameter(Name=self.parameter)  # the claim
        self.tokens.append(value)
        name = f"{POOL}-{self.instance_id}"
        return self.fake.register_with_token(value, name, LABELS, replace=True)


@dataclass
class World:
    fake: FakeGitHub
    ssm: Any
    runtime: Runtime
    warm: WarmInstances
    clock: dict[str, datetime]

    def tick(self, seconds: float = 10.0) -> None:
        self.clock["now"] += timedelta(seconds=seconds)
        self.runtime.controller.tick(self.clock["now"])

    def parameters(self) -> list[str]:
        found = self.ssm.get_parameters_by_path(Path=PATH, Recursive=True)["Parameters"]
        return [p["Name"] for p in found]

    def runner(self, name: str) -> Any:
        [found] = [r for r in self.fake.runners() if r.name == name]
        return found


def _config(fake: FakeGitHub, endpoint: str, state: str) -> Config:
    return parse_config(
        {
            "poll_interval": "10s",
            "github": {"owner": "demo-org", "api_url": fake.url, "token": "fake-token"},
            "runner_types": {
                "cpu": {
                    "labels": list(LABELS),
                    "pools": [POOL],
                    "mode": "persistent",
                    "boot_timeout": "10m",
                    "idle_timeout": "12h",
                }
            },
            "pools": {POOL: {"warm_pool": {"state": "stopped", "min_size": 1, "reuse": True}}},
            "aws": {"endpoint_url": endpoint},
            "state": {"path": state},
            "jit": {"parameter_path": PATH},
        },
        env={},
    )


@pytest.fixture
def world(moto_endpoint: str, tmp_path: Any) -> Iterator[World]:
    asg, ec2 = aws_clients(moto_endpoint)
    create_pools(asg, ec2, [PoolSpec(POOL, "cpu", LABELS, max_size=5)])
    asg.set_desired_capacity(AutoScalingGroupName=POOL, DesiredCapacity=1)
    session: boto3.session.Session = moto_session()
    ssm = session.client("ssm", endpoint_url=moto_endpoint)
    clock = {"now": datetime.now(UTC).replace(microsecond=0)}
    with FakeGitHub("demo-org", clock=lambda: clock["now"]) as fake:
        fake.add_repo("app")
        config = _config(fake, moto_endpoint, str(tmp_path / "state.db"))
        metrics = Metrics()
        pool = AwsAsgPool(config.aws, metrics, session=session)
        warm = WarmInstances(POOL).install(pool.autoscaling)
        parameters = SsmParameters(config.aws, metrics, session=session)
        runtime = build_runtime(config, metrics, pool=pool, parameters=parameters)
        try:
            yield World(fake, ssm, runtime, warm, clock)
        finally:
            runtime.close()


def test_back_from_the_warm_pool_an_instance_registers_with_a_fresh_token(
    world: World,
) -> None:
    [iid] = [i for i in _instances(world)]
    machine = Machine(world.fake, world.ssm, iid, [])
    name = f"{POOL}-{iid}"

    world.tick()  # a new instance: its registration token, in its parameter
    assert world.parameters() == [machine.parameter]
    first = machine.boot()
    world.tick()
    assert world.runner(name).online and world.parameters() == []

    # Scale-in with reuse: the group stops it and puts it back in the warm pool.
    world.warm.warm[iid] = "Warmed:Stopped"
    world.fake.set_runner_online(first, False)
    world.tick()
    assert world.runner(name).id == first, "a warm instance's runner is not stale"
    assert world.parameters() == []

    world.tick(2 * 3600.0)  # hours later: the token it claimed has expired
    with pytest.raises(ValueError, match="expired"):
        world.fake.jit.check_token(machine.tokens[0], world.clock["now"])

    # A job queues; the group takes the instance from the warm pool for it.
    world.fake.queue_job("app", list(LABELS))
    del world.warm.warm[iid]
    world.tick()
    assert world.parameters() == [machine.parameter], "a fresh token for the new stint"
    again = machine.boot()
    assert machine.tokens[1] != machine.tokens[0]
    world.tick()
    runner = world.runner(name)
    assert (runner.id, runner.online) == (again, True)
    assert [r.name for r in world.fake.runners()] == [name]  # replaced, never two
    assert world.parameters() == []


def _instances(world: World) -> list[str]:
    asg, _ = aws_clients(world.runtime.controller.config.aws.endpoint_url)
    groups = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[POOL])
    return [i["InstanceId"] for i in groups["AutoScalingGroups"][0]["Instances"]]

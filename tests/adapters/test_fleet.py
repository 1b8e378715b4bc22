"""The fleet emulator against moto's server on 127.0.0.1 and the fake GitHub (no HTTP)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from autoscaler.fakes.github import FakeGitHub
from autoscaler.sim.fleet import (
    Fleet,
    PoolSpec,
    aws_clients,
    create_pools,
    reset_moto_server,
    start_moto_server,
)

LABELS = ("self-hosted", "linux.4xlarge")
T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


@pytest.fixture
def asg() -> Iterator[Any]:
    server, url = start_moto_server()
    reset_moto_server(url)
    try:
        autoscaling, ec2 = aws_clients(url)
        create_pools(autoscaling, ec2, [PoolSpec("cpu", "linux.4xlarge", LABELS, max_size=4)])
        yield autoscaling
    finally:
        server.stop()


def test_instances_boot_into_runners_run_jobs_and_go(asg: Any) -> None:
    gh = FakeGitHub()
    fleet = Fleet(
        gh, asg, [PoolSpec("cpu", "linux.4xlarge", LABELS)], boot_delay=20, job_duration=60
    )
    asg.set_desired_capacity(AutoScalingGroupName="cpu", DesiredCapacity=2)
    assert fleet.tick(T0).registered == []  # still booting
    events = fleet.tick(T0 + timedelta(seconds=20))
    assert len(events.registered) == 2 and all(n.startswith("cpu-i-") for n in events.registered)

    job = gh.queue_job("app", ["self-hosted", "Linux.4xlarge"])
    other = gh.queue_job("app", ["self-hosted", "gpu"])  # no runner of ours covers it
    assert fleet.tick(T0 + timedelta(seconds=30)).assigned == [job]
    assert [j.id for j in gh.queued_jobs()] == [other]
    assert fleet.tick(T0 + timedelta(seconds=90)).completed == [job]

    victim = next(r for r in gh.runners() if not r.busy)
    asg.terminate_instance_in_auto_scaling_group(
        InstanceId=victim.name.removeprefix("cpu-"), ShouldDecrementDesiredCapacity=True
    )
    assert fleet.tick(T0 + timedelta(seconds=100)).removed == [victim.name]
    assert len(gh.runners()) == 1
    assert fleet.busy_terminations == 0


def test_deregistered_runner_is_not_registered_again_and_never_boot_makes_orphans(asg: Any) -> None:
    gh = FakeGitHub()
    fleet = Fleet(gh, asg, [PoolSpec("cpu", "linux.4xlarge", LABELS)], boot_delay=0)
    asg.set_desired_capacity(AutoScalingGroupName="cpu", DesiredCapacity=2)
    ids = [
        i["InstanceId"]
        for i in asg.describe_auto_scaling_groups()["AutoScalingGroups"][0]["Instances"]
    ]
    fleet.never_boot.add(ids[1])
    assert fleet.tick(T0).registered == [f"cpu-{ids[0]}"]
    gh.remove_runner(gh.runners()[0].id)  # the controller deregistered it
    assert fleet.tick(T0 + timedelta(seconds=5)).registered == []
    assert gh.runners() == []

"""The fleet emulator against moto's server on 127.0.0.1 and the fake GitHub (no HTTP)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from autoscaler.fakes.github import FakeGitHub
from autoscaler.fakes.github_jit import generate
from autoscaler.sim.fleet import Fleet, PoolSpec, aws_clients, create_pools, moto_session

LABELS = ("self-hosted", "linux.4xlarge")
T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


@pytest.fixture
def asg(moto_endpoint: str) -> Iterator[Any]:
    """A fresh group "cpu" in the worker's moto server (emptied per test)."""
    autoscaling, ec2 = aws_clients(moto_endpoint)
    create_pools(autoscaling, ec2, [PoolSpec("cpu", "linux.4xlarge", LABELS, max_size=4)])
    yield autoscaling


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


@pytest.mark.parametrize("terminated_before_next_tick", [True, False], ids=["gone", "still-up"])
def test_a_controller_scale_in_is_counted_once(asg: Any, terminated_before_next_tick: bool) -> None:
    """Story: the demo's "runners gone" counter stayed 0 through every scale-in. The
    controller deregisters the runner first and then terminates its instance; the fleet
    saw "runner missing, instance gone" and counted nothing."""
    gh = FakeGitHub()
    fleet = Fleet(gh, asg, [PoolSpec("cpu", "linux.4xlarge", LABELS)], boot_delay=0)
    asg.set_desired_capacity(AutoScalingGroupName="cpu", DesiredCapacity=1)
    (name,) = fleet.tick(T0).registered
    assert fleet.live_instances == {"cpu": 1}
    runner = gh.runners()[0]
    gh.remove_runner(runner.id)  # the controller's scale-in: deregister first...
    if terminated_before_next_tick:  # ...then terminate, before the fleet looks again
        asg.terminate_instance_in_auto_scaling_group(
            InstanceId=name.removeprefix("cpu-"), ShouldDecrementDesiredCapacity=True
        )
    events = fleet.tick(T0 + timedelta(seconds=5))
    assert (events.deregistered, events.removed) == ([name], [])
    if not terminated_before_next_tick:
        asg.terminate_instance_in_auto_scaling_group(
            InstanceId=name.removeprefix("cpu-"), ShouldDecrementDesiredCapacity=True
        )
    later = fleet.tick(T0 + timedelta(seconds=10))
    assert (later.deregistered, later.removed) == ([], [])
    assert fleet.busy_terminations == 0


def test_a_started_job_reports_how_long_it_waited(asg: Any) -> None:
    gh = FakeGitHub()
    fleet = Fleet(gh, asg, [PoolSpec("cpu", "linux.4xlarge", LABELS)], boot_delay=0)
    gh.queue_job("app", LABELS, created_at=T0)
    asg.set_desired_capacity(AutoScalingGroupName="cpu", DesiredCapacity=1)
    events = fleet.tick(T0 + timedelta(seconds=42))
    assert len(events.assigned) == 1 and events.waited == [42.0]


def test_an_ephemeral_instance_takes_one_job_and_never_another(
    asg: Any, moto_endpoint: str
) -> None:
    """Story: in the demo a finished ephemeral runner (removed by GitHub after its job) was
    handed the next queued job, and the fake raised KeyError for the runner it no longer
    had. An ephemeral instance reads its JIT config from SSM, connects once, runs one job,
    and takes no other; the next job waits for another machine."""
    ssm = moto_session().client("ssm", endpoint_url=moto_endpoint)
    gh = FakeGitHub()
    spec = PoolSpec("cpu", "linux.4xlarge", LABELS, ephemeral=True)
    fleet = Fleet(gh, asg, [spec], boot_delay=0, job_duration=10, ssm=ssm)
    asg.set_desired_capacity(AutoScalingGroupName="cpu", DesiredCapacity=1)
    [iid] = [
        i["InstanceId"]
        for i in asg.describe_auto_scaling_groups()["AutoScalingGroups"][0]["Instances"]
    ]
    assert fleet.tick(T0).registered == []  # no parameter yet: the boot script waits
    body = {"name": f"cpu-{iid}", "runner_group_id": 1, "labels": list(LABELS)}
    answer = json.loads(generate(gh, None, json.dumps(body).encode(), {}).raw)
    config = answer["encoded_jit_config"]
    ssm.put_parameter(Name=f"/ci-autoscaler/jit/cpu/{iid}", Value=config, Type="SecureString")
    jobs = [gh.queue_job("app", list(LABELS)) for _ in range(2)]
    events = fleet.tick(T0 + timedelta(seconds=5))
    assert events.registered == [f"cpu-{iid}"] and events.assigned == [jobs[0]]
    assert fleet.tick(T0 + timedelta(seconds=20)).completed == [jobs[0]]
    assert gh.runners() == []  # GitHub removed the ephemeral runner
    assert fleet.tick(T0 + timedelta(seconds=30)).assigned == []
    assert [j.id for j in gh.queued_jobs()] == [jobs[1]]
    with pytest.raises(ValueError, match="used already"):
        gh.connect_jit(config)  # single-use

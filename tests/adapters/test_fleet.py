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
PATH = "/ci-autoscaler/jit"


@pytest.fixture
def asg(moto_endpoint: str) -> Iterator[Any]:
    """A fresh group "cpu" in the worker's moto server (emptied per test)."""
    autoscaling, ec2 = aws_clients(moto_endpoint)
    create_pools(autoscaling, ec2, [PoolSpec("cpu", "linux.4xlarge", LABELS, max_size=4)])
    yield autoscaling


@pytest.fixture
def ssm(moto_endpoint: str) -> Any:
    return moto_session().client("ssm", endpoint_url=moto_endpoint)


def instance_ids(asg: Any) -> list[str]:
    return [
        i["InstanceId"]
        for i in asg.describe_auto_scaling_groups()["AutoScalingGroups"][0]["Instances"]
    ]


def hand_tokens(gh: FakeGitHub, asg: Any, ssm: Any) -> None:
    """What the controller does for each new persistent instance: a registration token in
    the instance's own parameter."""
    for iid in instance_ids(asg):
        token, _ = gh.jit.issue_token(gh.clock(), None)
        ssm.put_parameter(Name=f"{PATH}/cpu/{iid}", Value=token, Type="SecureString")


def persistent_fleet(gh: FakeGitHub, asg: Any, ssm: Any, **kw: Any) -> Fleet:
    return Fleet(gh, asg, [PoolSpec("cpu", "linux.4xlarge", LABELS)], ssm=ssm, **kw)


def test_instances_boot_into_runners_run_jobs_and_go(asg: Any, ssm: Any) -> None:
    gh = FakeGitHub()
    fleet = persistent_fleet(gh, asg, ssm, boot_delay=20, job_duration=60)
    asg.set_desired_capacity(AutoScalingGroupName="cpu", DesiredCapacity=2)
    hand_tokens(gh, asg, ssm)
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


def test_deregistered_runner_is_not_registered_again_and_never_boot_makes_orphans(
    asg: Any, ssm: Any
) -> None:
    gh = FakeGitHub()
    fleet = persistent_fleet(gh, asg, ssm, boot_delay=0)
    asg.set_desired_capacity(AutoScalingGroupName="cpu", DesiredCapacity=2)
    hand_tokens(gh, asg, ssm)
    ids = instance_ids(asg)
    fleet.never_boot.add(ids[1])
    assert fleet.tick(T0).registered == [f"cpu-{ids[0]}"]
    gh.remove_runner(gh.runners()[0].id)  # the controller deregistered it
    assert fleet.tick(T0 + timedelta(seconds=5)).registered == []
    assert gh.runners() == []


@pytest.mark.parametrize("terminated_before_next_tick", [True, False], ids=["gone", "still-up"])
def test_a_controller_scale_in_is_counted_once(
    asg: Any, ssm: Any, terminated_before_next_tick: bool
) -> None:
    """Story: the demo's "runners gone" counter stayed 0 through every scale-in. The
    controller deregisters the runner first and then terminates its instance; the fleet
    saw "runner missing, instance gone" and counted nothing."""
    gh = FakeGitHub()
    fleet = persistent_fleet(gh, asg, ssm, boot_delay=0)
    asg.set_desired_capacity(AutoScalingGroupName="cpu", DesiredCapacity=1)
    hand_tokens(gh, asg, ssm)
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


def test_a_started_job_reports_how_long_it_waited(asg: Any, ssm: Any) -> None:
    gh = FakeGitHub()
    fleet = persistent_fleet(gh, asg, ssm, boot_delay=0)
    gh.queue_job("app", LABELS, created_at=T0)
    asg.set_desired_capacity(AutoScalingGroupName="cpu", DesiredCapacity=1)
    hand_tokens(gh, asg, ssm)
    events = fleet.tick(T0 + timedelta(seconds=42))
    assert len(events.assigned) == 1 and events.waited == [42.0]


def test_an_ephemeral_instance_takes_one_job_and_never_another(asg: Any, ssm: Any) -> None:
    """Story: in the demo a finished ephemeral runner (removed by GitHub after its job) was
    handed the next queued job, and the fake raised KeyError for the runner it no longer
    had. An ephemeral instance reads its JIT config from SSM, connects once, runs one job,
    and takes no other; the next job waits for another machine."""
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


def test_a_persistent_instance_claims_its_token_and_a_withdrawn_one_never_registers(
    asg: Any, ssm: Any
) -> None:
    """The boot script deletes its parameter to claim the token and registers only when
    that delete succeeded: a parameter the controller deleted first (an orphan's token,
    withdrawn) leaves the machine without a runner for good, and so does an expired token."""
    gh = FakeGitHub(clock=lambda: T0)
    fleet = persistent_fleet(gh, asg, ssm, boot_delay=0)
    asg.set_desired_capacity(AutoScalingGroupName="cpu", DesiredCapacity=3)
    first, withdrawn, expired = instance_ids(asg)
    assert fleet.tick(T0).registered == []  # no token yet: the boot script waits
    hand_tokens(gh, asg, ssm)
    ssm.delete_parameter(Name=f"{PATH}/cpu/{withdrawn}")  # the controller withdrew it
    found = ssm.get_parameter(Name=f"{PATH}/cpu/{expired}", WithDecryption=True)
    gh.jit.tokens[found["Parameter"]["Value"]] = (T0, None)  # expired by now
    assert fleet.tick(T0 + timedelta(seconds=5)).registered == [f"cpu-{first}"]
    assert ssm.get_parameters_by_path(Path=PATH, Recursive=True)["Parameters"] == []
    assert fleet.tick(T0 + timedelta(seconds=10)).registered == []
    assert [r.name for r in gh.runners()] == [f"cpu-{first}"]
    assert fleet.token_refused == 1  # the expired one; the withdrawn one never saw a token
